"""Warmup: the plan (pure) and its run against a small in-process HTTP server.

The plan must cover every prompt length at every concurrency level plus the chat template, refuse
what the user set beyond the engine's limits (never clip it) and fit the defaults with a warning;
a run must fail, with the reason, on the first request that fails, and time out by the configured
budget.
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
    # Defaults [16, 256, 1024] with 8 generated and 8 margin in 256 tokens: only 16 fits, said so.
    assert fitted.ok and fitted.requests == 1 and seen == ["/v1/completions"]
    assert any("[256, 1024] left out" in warning for warning in fitted.warnings)
