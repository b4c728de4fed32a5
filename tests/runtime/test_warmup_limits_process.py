"""The runtime process checks its warmup against the engine it launched (fake engine, real runtime).

What admission cannot know is checked here, before the first warmup request: the model length
when ``engine.maxModelLen`` is unset (the model's own, read from the engine's ``/v1/models``) and
limits set through ``engine.extraArgs`` (read from the rendered command line). A value the user
set that does not fit fails the start with the reason in ``/state`` and the log, never clipped;
defaults that do not fit are left out or lowered with a warning in ``status.warmup.warnings``.
Before issue 23 the runtime sent the first case's 1024 tokens unchecked (the engine's HTTP 400
was the only reason), warmed the second at 8 on an engine that batches 4 and turned Ready, and
cut the third's defaults without a word.
"""

from __future__ import annotations

from runtime_harness import is_ready


def test_a_user_prompt_beyond_the_models_own_length_fails_the_start_with_the_reason(runtime_factory):
    runtime = runtime_factory({"runtime": {"restart": {"maxRestarts": 0}},
                               "warmup": {"promptLengths": [16, 1024], "concurrency": [1]}},
                              {"FAKE_ENGINE_MAX_MODEL_LEN": "512"})
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
                               "warmup": {"promptLengths": [16], "concurrency": [1, 8]}}, {})
    state = runtime.wait_for(lambda s: s["warmup"]["outcome"] == "failed", 60, "the warmup refused")
    assert "warmup.concurrency [8]" in state["warmup"]["reason"]
    assert "max concurrent sequences 4" in state["warmup"]["reason"]
    assert runtime.process.wait(timeout=60) == 3


def test_defaults_that_do_not_fit_are_left_out_with_a_warning(runtime_factory):
    runtime = runtime_factory({"warmup": {"chat": False, "promptLengths": None, "concurrency": None},
                               "engine": {"maxNumSeqs": 2}},
                              {"FAKE_ENGINE_MAX_MODEL_LEN": "300"})
    state = runtime.wait_for(is_ready, 60, "Ready with the defaults fitted")
    warnings = state["warmup"]["warnings"]
    assert any("[1024] left out" in w and "max model length 300" in w for w in warnings), warnings
    assert any("[4, 16] lowered to 2" in w for w in warnings), warnings
    # Lengths 16 and 256 at concurrency 1 and 2: 2 x (1 + 2) requests, every one answered.
    assert state["warmup"]["requests"] == 6
