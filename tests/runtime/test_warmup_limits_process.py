"""The runtime process checks its warmup against the engine it launched (fake engine, real runtime).

What admission cannot know is checked here, before the first warmup request: the model length
when ``engine.maxModelLen`` is unset (the model's own, read from the engine's ``/v1/models``) and
limits set through ``engine.extraArgs`` (read from the rendered command line). A value the user
set that does not fit fails the start with the reason in ``/state`` and the log, never clipped;
left unset, the plan derived from the launched argv replaces the defaults and fits without a warning.
Before issue 23 the runtime sent the first case's 1024 tokens unchecked (the engine's HTTP 400
was the only reason) and warmed the second at 8 on an engine that batches 4 and turned Ready.
"""

from __future__ import annotations

from runtime_harness import is_ready

#: A refusal is instant and the runtime then exits: an engine that ignores SIGTERM keeps it up for
#: its stop grace (2 s), so the test reads /state before the exit (else a race with the poll).
SLOW_STOP = {"FAKE_ENGINE_IGNORE_SIGTERM": "1"}


def test_a_user_prompt_beyond_the_models_own_length_fails_the_start_with_the_reason(runtime_factory):
    runtime = runtime_factory({"runtime": {"restart": {"maxRestarts": 0}},
                               "warmup": {"promptLengths": [16, 1024], "concurrency": [1]}},
                              {"FAKE_ENGINE_MAX_MODEL_LEN": "512", **SLOW_STOP})
    state = runtime.wait_for(lambda s: s["warmup"]["outcome"] == "failed", 60, "the warmup refused")
    reason = state["warmup"]["reason"]
    assert "warmup.promptLengths [1024]" in reason and "max model length 512" in reason, reason
    assert "engine.maxModelLen unset" in reason and "raise engine.maxModelLen" in reason
    assert state["warmup"]["requests"] == 0  # refused before sending, not clipped
    assert runtime.process.wait(timeout=60) == 3  # EXIT_START_FAILED
    assert "warmup.promptLengths [1024]" in runtime.log_path.read_text()


def test_concurrency_above_a_limit_set_in_extra_args_fails_the_start(runtime_factory):
    runtime = runtime_factory({"runtime": {"restart": {"maxRestarts": 0}},
                               "engine": {"maxNumSeqs": 64, "extraArgs": ["--max-num-seqs=4"]},
                               "warmup": {"promptLengths": [16], "concurrency": [1, 8]}}, SLOW_STOP)
    state = runtime.wait_for(lambda s: s["warmup"]["outcome"] == "failed", 60, "the warmup refused")
    assert "warmup.concurrency [8]" in state["warmup"]["reason"]
    assert "max concurrent sequences 4" in state["warmup"]["reason"]
    assert runtime.process.wait(timeout=60) == 3


def test_unset_lengths_and_levels_give_way_to_the_derived_plan_which_fits_without_warnings(runtime_factory):
    # Before the derived plan, the defaults [16, 256, 1024] x [1, 4, 16] were fitted here with two
    # warnings (1024 left out of 300 tokens, 4 and 16 lowered to 2). Now the plan comes from the
    # launched argv and the model length the engine reports: it fits, nothing to warn about, and
    # the fake engine (which refuses over-long prompts as vLLM does) answers every request.
    runtime = runtime_factory({"warmup": {"chat": False, "promptLengths": None, "concurrency": None},
                               "engine": {"maxNumSeqs": 2}},
                              {"FAKE_ENGINE_MAX_MODEL_LEN": "300"})
    state = runtime.wait_for(is_ready, 120, "Ready with the derived plan")
    assert state["warmup"]["outcome"] == "succeeded" and state["warmup"]["warnings"] == [], state["warmup"]
    # The longest prompt: 300 - 2 generated (the harness's maxTokens) - 8 margin = 290; no default 1024 was sent.
    assert "prompt lengths [16, 32, 64, 128, 256, 290] at concurrency 1" in runtime.log_path.read_text()
