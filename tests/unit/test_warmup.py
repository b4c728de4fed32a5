"""Warmup: the plan (pure) and its run against a small in-process HTTP server.

The plan must cover every prompt length at every concurrency level plus the chat template, refuse
what the user set beyond the engine's limits (never clip it), derive its waves from the engine's
argv in place of the defaults and, where the defaults are still sent (no known model length), fit
them with a warning; a run must fail, with the reason, on the first request that fails, and time
out by the configured budget.
"""

from __future__ import annotations

import asyncio

from aiohttp import web

import pytest

from ascend_runtime.config import EngineOptions, WarmupConfig
from ascend_runtime.enginelimits import EngineLimits, engine_limits, fit_warmup
from ascend_runtime.warmup import WarmupRefused, WarmupRequest, plan_warmup, run_warmup


def test_plan_covers_lengths_times_levels_then_chat_per_level():
    config = WarmupConfig(prompt_lengths=[16, 256], concurrency=[1, 4], max_tokens=8, chat=True)
    waves = plan_warmup(config, max_model_len=4096, max_num_seqs=None)
    assert waves == [
        [WarmupRequest("completion", 16, 1)],
        [WarmupRequest("completion", 256, 1)],
        [WarmupRequest("chat", 16, 1)],
        [WarmupRequest("completion", 16, 4)] * 4,
        [WarmupRequest("completion", 256, 4)] * 4,
        [WarmupRequest("chat", 16, 4)] * 4,
    ]


def test_plan_refuses_what_the_user_set_beyond_the_limits_never_clipping_it():
    config = WarmupConfig(prompt_lengths=[64, 1024], concurrency=[2, 16], max_tokens=8, chat=False)
    with pytest.raises(WarmupRefused) as caught:
        plan_warmup(config, max_model_len=512, max_num_seqs=8)
    reason = str(caught.value)
    assert "warmup.promptLengths [1024]" in reason and "engine.maxModelLen" in reason
    assert "warmup.concurrency [16]" in reason and "engine.maxNumSeqs" in reason


def test_plan_fits_defaults_to_the_limits_and_says_so():
    config = WarmupConfig(chat=False)  # defaults: lengths [16, 256, 1024], concurrency [1, 4, 16]
    fit = fit_warmup(config, max_model_len=512, max_num_seqs=8)
    assert fit.refusals == []
    assert (fit.prompt_lengths, fit.concurrency) == ([16, 256], [1, 4, 8])
    assert any("[1024] left out" in note for note in fit.notes)
    assert any("[16] lowered to 8" in note for note in fit.notes)
    waves = plan_warmup(config, max_model_len=512, max_num_seqs=8)
    assert [(w[0].prompt_tokens, w[0].concurrency, len(w)) for w in waves] == [
        (16, 1, 1), (256, 1, 1), (16, 4, 4), (256, 4, 4), (16, 8, 8), (256, 8, 8)]


def test_defaults_that_cannot_fit_at_all_are_refused():
    fit = fit_warmup(WarmupConfig(max_tokens=20), max_model_len=40, max_num_seqs=None)
    assert fit.refusals and "warmup.maxTokens (20)" in fit.refusals[0]


def test_engine_limits_read_the_rendered_command_line_else_the_platform_default():
    engine = EngineOptions()
    argv = ["vllm", "--max-num-seqs", "8", "--max-model-len", "512", "--max_num_seqs=32"]
    assert engine_limits(argv, engine, cpu=False) == EngineLimits(512, 32)
    npu = engine_limits(["vllm"], engine, cpu=False)
    assert (npu.max_model_len, npu.max_num_seqs) == (None, 256) and "default" in npu.seqs_from
    assert engine_limits(["vllm"], engine, cpu=True).max_num_seqs == 128
    assert engine_limits(["vllm", "--performance-mode", "throughput"], engine, cpu=True).max_num_seqs == 256


async def serve(handler, models=None) -> tuple[web.AppRunner, str]:
    app = web.Application()
    if models is not None:
        app.router.add_get("/v1/models", models)
    app.router.add_post("/v1/completions", handler)
    app.router.add_post("/v1/chat/completions", handler)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]
    return runner, f"http://127.0.0.1:{port}"


async def test_a_successful_run_reports_requests_and_steps():
    seen = []

    async def ok(request: web.Request) -> web.Response:
        body = await request.json()
        seen.append(len(body["prompt"]) if "prompt" in body else "chat")
        return web.json_response({"choices": [{"text": "x"}]})

    runner, url = await serve(ok)
    try:
        config = WarmupConfig(prompt_lengths=[4, 8], concurrency=[1, 2], max_tokens=2)
        result = await run_warmup(url, "m", config, max_model_len=None, max_num_seqs=None)
    finally:
        await runner.cleanup()
    assert result.ok and result.reason is None
    assert result.requests == 9  # (2 lengths + chat) x (1 + 2)
    assert sorted(x for x in seen if x != "chat") == [4, 4, 4, 8, 8, 8]
    assert [step["concurrency"] for step in result.steps] == [1, 1, 1, 2, 2, 2]


async def test_a_failing_request_fails_the_warmup_with_the_status_and_body():
    async def broken(request: web.Request) -> web.Response:
        return web.json_response({"error": "kernel compile failed"}, status=500)

    runner, url = await serve(broken)
    try:
        result = await run_warmup(url, "m", WarmupConfig(prompt_lengths=[4], concurrency=[1]), None, None)
    finally:
        await runner.cleanup()
    assert not result.ok
    assert "HTTP 500" in result.reason and "kernel compile failed" in result.reason


async def test_a_warmup_past_its_budget_fails_naming_the_setting():
    async def slow(request: web.Request) -> web.Response:
        await asyncio.sleep(2)
        return web.json_response({"choices": []})

    runner, url = await serve(slow)
    try:
        result = await run_warmup(url, "m", WarmupConfig(prompt_lengths=[4], concurrency=[1], timeout_s=1), None, None)
    finally:
        await runner.cleanup()
    assert not result.ok
    assert "warmup.timeoutSeconds" in result.reason


NO_TEMPLATE = ("Cannot use chat template functions because tokenizer.chat_template is not set and no template "
               "argument was passed!")


async def test_a_model_without_a_chat_template_skips_the_chat_waves_with_a_warning():
    chats = []

    async def base_model(request: web.Request) -> web.Response:
        body = await request.json()
        if "messages" in body:
            chats.append(1)
            return web.json_response({"object": "error", "message": NO_TEMPLATE, "type": "BadRequestError",
                                      "code": 400}, status=400)
        return web.json_response({"choices": [{"text": "x"}]})

    runner, url = await serve(base_model)
    try:
        config = WarmupConfig(prompt_lengths=[4, 8], concurrency=[1, 2], max_tokens=2)
        result = await run_warmup(url, "m", config, max_model_len=None, max_num_seqs=None)
    finally:
        await runner.cleanup()
    assert result.ok and result.reason is None
    assert chats == [1]  # the first chat wave tells; the next one is not sent
    assert [step["kind"] for step in result.steps] == ["completion"] * 4
    assert len(result.warnings) == 1 and "no chat template" in result.warnings[0]
    assert "warmup.chat: false" in result.warnings[0]


async def test_any_other_chat_error_still_fails_the_warmup():
    async def broken_chat(request: web.Request) -> web.Response:
        body = await request.json()
        if "messages" in body:
            return web.json_response({"message": "maximum context length exceeded"}, status=400)
        return web.json_response({"choices": [{"text": "x"}]})

    runner, url = await serve(broken_chat)
    try:
        result = await run_warmup(url, "m", WarmupConfig(prompt_lengths=[4], concurrency=[1]), None, None)
    finally:
        await runner.cleanup()
    assert not result.ok and "chat request" in result.reason and "HTTP 400" in result.reason


async def test_a_user_length_beyond_the_models_own_length_fails_before_sending_anything():
    # engine.maxModelLen unset: the limit is the model's (config.json), read from /v1/models.
    seen = []

    async def models(request: web.Request) -> web.Response:
        return web.json_response({"data": [{"id": "m", "max_model_len": 256}]})

    async def ok(request: web.Request) -> web.Response:
        seen.append(request.path)
        return web.json_response({"choices": [{"text": "x"}]})

    runner, url = await serve(ok, models)
    try:
        refused = await run_warmup(url, "m", WarmupConfig(prompt_lengths=[16, 1024], concurrency=[1]), None, 4)
        fitted = await run_warmup(url, "m", WarmupConfig(concurrency=[1], chat=False), None, 4)
    finally:
        await runner.cleanup()
    assert not refused.ok and refused.requests == 0
    assert "warmup.promptLengths [1024]" in refused.reason and "max model length 256" in refused.reason
    assert "engine.maxModelLen unset" in refused.reason
    # No engine argv, so no derived plan: the defaults [16, 256, 1024] are sent, fitted (8 generated
    # and 8 margin in 256 tokens: only 16 fits), said so.
    assert fitted.ok and fitted.requests == 1 and seen == ["/v1/completions"]
    assert any("[256, 1024] left out" in warning for warning in fitted.warnings)


# -- the plan derived from the engine's configuration ------------------------------------------

from ascend_runtime.config import EngineConfig  # noqa: E402
from ascend_runtime.flags import render_engine_command  # noqa: E402
from ascend_runtime.warmup import (  # noqa: E402
    DERIVED_PROMPT_TOKEN_BUDGET,
    UNCAPTURED_EVERY_SIZE,
    EngineShapes,
    default_capture_sizes,
    derived_plan,
    engine_shapes,
)


def test_engine_shapes_read_the_limits_and_capture_sizes_from_the_argv():
    argv = ["vllm", "--max-model-len", "4096", "--max_num_seqs=24", "--max-num-batched-tokens", "1024",
            "--compilation-config", '{"cudagraph_mode": "FULL_DECODE_ONLY", "cudagraph_capture_sizes": [8, 1, 4]}']
    assert engine_shapes(argv) == EngineShapes(4096, 24, 1024, (1, 4, 8))
    # A graph mode without sizes: vLLM's default grid up to min(2 x max_num_seqs, 512).
    assert engine_shapes(["vllm", "--max-num-seqs", "24", "--compilation-config",
                          '{"cudagraph_mode": "PIECEWISE"}']).capture_sizes == (1, 2, 4, 8, 16, 24, 32, 40, 48)
    assert engine_shapes(["vllm", "--compilation-config", '{"cudagraph_mode": "PIECEWISE", '
                          '"max_cudagraph_capture_size": 12}']).capture_sizes == (1, 2, 4, 8, 12)
    # Nothing is captured: eager, NONE, or no compilation config (CPU torch.compile).
    graph = '{"cudagraph_mode": "PIECEWISE"}'
    assert engine_shapes(["vllm", "--enforce-eager", "--compilation-config", graph]).capture_sizes == ()
    assert engine_shapes(["vllm", "--compilation-config", '{"cudagraph_mode": "NONE"}']).capture_sizes == ()
    assert engine_shapes(["vllm", "--max-model-len", "512"]) == EngineShapes(512, None, None, ())


def test_default_capture_grid_is_vllms():
    assert default_capture_sizes(512)[:5] == (1, 2, 4, 8, 16)
    assert default_capture_sizes(512)[-3:] == (480, 496, 512)
    assert 248 in default_capture_sizes(512) and 264 not in default_capture_sizes(512)


def test_derived_plan_covers_ladder_chunk_longest_prompt_and_every_captured_batch_size():
    shapes = EngineShapes(4096, 16, 1024, (1, 2, 4, 8, 16, 24))
    plan = derived_plan(shapes, 4096, max_tokens=8)
    longest = 4096 - 8 - 8
    assert plan.lengths == [16, 32, 64, 128, 256, 512, 1024, 2048, longest]
    assert plan.chunk == 1024 and plan.batch == 16 and plan.decode_sizes == [1, 2, 4, 8, 16]
    singles = [wave for wave in plan.waves if len(wave) == 1]
    assert [wave[0].prompt_tokens for wave in singles] == plan.lengths
    decode = plan.waves[-1]
    assert len(decode) == 16 and {r.prompt_tokens for r in decode} == {16}
    # The running batch steps 16 -> 8 -> 4 -> 2 -> 1: after max_tokens + k tokens, those with more remain.
    outputs = sorted(r.max_tokens for r in decode)
    alive = [sum(1 for out in outputs if out > 8 + k) for k in range(-1, 4)]
    assert alive == [16, 8, 4, 2, 1]
    assert plan.dropped_lengths == []


def test_a_chunk_larger_than_the_longest_prompt_is_filled_by_concurrent_prompts():
    plan = derived_plan(EngineShapes(512, 8, None, ()), 512, max_tokens=8)  # vLLM's 2048 by default
    chunk_waves = [wave for wave in plan.waves if len(wave) > 1 and wave[0].prompt_tokens > 16]
    assert [(len(w), w[0].prompt_tokens) for w in chunk_waves] == [(5, 409)]  # 5 x 409 = 2045 <= 2048
    # Nothing captured on CPU: every batch size up to max_num_seqs is its own shape.
    assert plan.decode_sizes == [1, 2, 3, 4, 5, 6, 7, 8]


def test_with_nothing_captured_the_decode_wave_steps_through_every_size_up_to_32_then_powers_of_two():
    # vLLM's CPU GEMMs build one oneDNN primitive per token count and keep 32 per weight shape, so
    # a batch of 3 (4 requests admitted over two steps end over two steps) is cold after 8, 4, 2, 1.
    plan = derived_plan(EngineShapes(512, 8, None, ()), 512, max_tokens=8)
    decode = plan.waves[-1]
    outputs = sorted(r.max_tokens for r in decode)
    assert [sum(1 for out in outputs if out > 8 + k) for k in range(-1, 8)] == [8, 7, 6, 5, 4, 3, 2, 1, 0]
    eager = derived_plan(engine_shapes(["vllm", "--enforce-eager", "--max-num-seqs", "256"]), 4096, max_tokens=8)
    assert eager.decode_sizes == list(range(1, UNCAPTURED_EVERY_SIZE + 1)) + [64, 128, 256]
    assert len(eager.waves[-1]) == 256 and max(r.max_tokens for r in eager.waves[-1]) == 8 + 34
    # Captured sizes are used as they are: no extra steps in between.
    assert derived_plan(EngineShapes(512, 8, None, (1, 2, 4, 8)), 512, 8).decode_sizes == [1, 2, 4, 8]


def test_the_budget_drops_the_longest_ladder_rungs_but_keeps_the_longest_prompt_and_chunk():
    plan = derived_plan(EngineShapes(262144, 8, 8192, ()), 262144, max_tokens=8)
    longest = 262144 - 16
    assert longest in plan.lengths and 8192 in plan.lengths  # 8192, the chunk, is not a ladder cost
    assert plan.dropped_lengths == [131072]
    ladder = [length for length in plan.lengths if length not in (longest, 8192)]
    assert sum(ladder) + 16 * len(plan.waves[-1]) <= DERIVED_PROMPT_TOKEN_BUDGET
    assert "left out" in plan.describe()


def test_every_derived_request_fits_the_model_length_even_a_short_one():
    for model_len, sizes in ((16, ()), (16, tuple(range(1, 33))), (40, tuple(range(1, 33))), (512, (1, 2, 4, 8))):
        plan = derived_plan(EngineShapes(model_len, 32, None, sizes), model_len, max_tokens=8)
        for wave in plan.waves:
            for request in wave:
                assert request.prompt_tokens + (request.max_tokens or 8) <= model_len, (model_len, request)


def test_a_32k_model_length_with_vllms_defaults_costs_about_70k_prompt_tokens():
    """docs/runtime.md's example of the bound."""
    plan = derived_plan(engine_shapes(["vllm", "--max-model-len", "32768"]), 32768, max_tokens=8)
    assert len(plan.lengths) == 12 and 2048 in plan.lengths and plan.lengths[-1] == 32768 - 16
    assert len(plan.waves[-1]) == 256 and plan.dropped_lengths == []
    assert 65_000 <= plan.prompt_tokens <= 75_000


def test_left_out_lengths_and_levels_give_way_to_the_derived_plan():
    shapes = EngineShapes(512, 8, None, ())
    derived = derived_plan(shapes, 512, 8)
    waves = plan_warmup(WarmupConfig.model_validate({"chat": True}), 512, 8, shapes)
    assert waves[:len(derived.waves)] == derived.waves
    assert waves[len(derived.waves):] == [[WarmupRequest("chat", 16, 1)]]  # not the fixed [16, 256, 1024]


def test_user_lengths_and_levels_are_sent_on_top_of_the_derived_plan():
    shapes = EngineShapes(512, 8, None, ())
    derived = derived_plan(shapes, 512, 8)
    config = WarmupConfig.model_validate({"prompt_lengths": [16, 300], "concurrency": [1, 4], "chat": False})
    extra = plan_warmup(config, 512, 8, shapes)[len(derived.waves):]
    # 16 at concurrency 1 is in the derived ladder already; 300 is not; at 4 both are sent.
    assert [(w[0].prompt_tokens, len(w)) for w in extra] == [(300, 1), (16, 4), (300, 4)]
    # Levels alone: the derived lengths at that level whose batched prefill fits one chunk (2048).
    levels = WarmupConfig.model_validate({"concurrency": [4], "chat": False})
    extra = plan_warmup(levels, 512, 8, shapes)[len(derived.waves):]
    assert [(w[0].prompt_tokens, len(w)) for w in extra] == [(16, 4), (32, 4), (64, 4), (128, 4), (256, 4), (496, 4)]


def test_the_plan_follows_the_argv_flags_py_renders_per_version():
    from ascend_runtime.config import GraphMode
    from ascend_runtime.versions import Versions

    config = EngineConfig.model_validate({
        "schemaVersion": 1, "name": "x", "model": {"path": "/m"},
        "engine": {"maxModelLen": 1024, "maxNumSeqs": 4, "extraArgs": ["--max-num-batched-tokens", "256"]},
        "graph": {"captureSizes": [1, 2, 4]},
    })
    npu = render_engine_command(config, Versions(platform="ascend", vllm="0.13.0", vllm_ascend="0.13.0"),
                                GraphMode.PIECEWISE)
    shapes = engine_shapes(npu.argv)
    assert shapes == EngineShapes(1024, 4, 256, (1, 2, 4))
    assert derived_plan(shapes, 1024, 8).chunk == 256
    # On CPU the same config captures nothing (torch.compile): the sizes are not rendered.
    cpu = render_engine_command(config, Versions(platform="cpu", vllm="0.11.0"), GraphMode.PIECEWISE)
    assert engine_shapes(cpu.argv).capture_sizes == ()


async def test_run_warmup_takes_the_model_length_from_the_engine_when_the_argv_has_none():
    seen = []

    async def models(request: web.Request) -> web.Response:
        return web.json_response({"data": [{"id": "m", "max_model_len": 128}]})

    async def ok(request: web.Request) -> web.Response:
        body = await request.json()
        seen.append((len(body.get("prompt", [])), body.get("max_tokens"), body.get("ignore_eos")))
        return web.json_response({"choices": [{"text": "x"}]})

    app = web.Application()
    app.router.add_get("/v1/models", models)
    app.router.add_post("/v1/completions", ok)
    app.router.add_post("/v1/chat/completions", ok)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    url = f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}"
    try:
        result = await run_warmup(url, "m", WarmupConfig.model_validate({"max_tokens": 2, "chat": False}), None, None,
                                  engine_argv=["vllm", "--max-num-seqs", "2", "--max-num-batched-tokens", "64"])
    finally:
        await runner.cleanup()
    assert result.ok
    # 128 - 2 generated - 8 margin = 118: ladder 16, 32, 64 (= the chunk), then 118; decode wave 2 -> 1.
    assert sorted(length for length, _, _ in seen) == [16, 16, 16, 32, 64, 118]
    assert sorted(out for length, out, _ in seen if length == 16)[-2:] == [2, 3]
    assert all(eos is True for _, _, eos in seen)


# -- the derived plan and the engine limits together ---------------------------------------------


def test_with_the_derived_plan_what_the_user_set_beyond_the_limits_is_still_refused():
    shapes = EngineShapes(512, 8, None, ())
    config = WarmupConfig.model_validate({"prompt_lengths": [64, 1024], "concurrency": [2, 16], "chat": False})
    with pytest.raises(WarmupRefused) as caught:
        plan_warmup(config, 512, 8, shapes)
    reason = str(caught.value)
    assert "warmup.promptLengths [1024]" in reason and "warmup.concurrency [16]" in reason


def test_the_derived_plan_replaces_defaults_that_would_not_fit_without_refusing_or_warning():
    # 40 tokens with 20 generated: no default length fits (refused without a derived plan, above).
    config = WarmupConfig(max_tokens=20, chat=False)
    fit = fit_warmup(config, max_model_len=40, max_num_seqs=2, defaults_replaced=True)
    assert fit.refusals == [] and fit.notes == []
    shapes = EngineShapes(40, 2, None, ())
    waves = plan_warmup(config, 40, 2, shapes)
    assert waves == derived_plan(shapes, 40, 20).waves
    assert all(r.prompt_tokens + (r.max_tokens or 20) <= 40 for wave in waves for r in wave)


async def test_run_warmup_with_the_argv_sends_the_derived_plan_and_no_default_warnings():
    seen = []

    async def ok(request: web.Request) -> web.Response:
        seen.append(len((await request.json()).get("prompt", [])))
        return web.json_response({"choices": [{"text": "x"}]})

    runner, url = await serve(ok)
    argv = ["vllm", "--max-model-len", "128", "--max-num-seqs", "2", "--max-num-batched-tokens", "64"]
    try:
        derived = await run_warmup(url, "m", WarmupConfig(chat=False), 128, 2, engine_argv=argv)
        refused = await run_warmup(url, "m", WarmupConfig(concurrency=[4], chat=False), 128, 2,
                                   " (engine.maxNumSeqs)", engine_argv=argv)
    finally:
        await runner.cleanup()
    # Defaults [16, 256, 1024] x [1, 4, 16] would leave 256 and 1024 out and lower 4 and 16, with warnings.
    assert derived.ok and derived.warnings == [] and 256 not in seen and max(seen) == 128 - 8 - 8
    assert not refused.ok and refused.requests == 0 and "warmup.concurrency [4]" in refused.reason
