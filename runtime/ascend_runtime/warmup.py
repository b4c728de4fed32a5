"""Warmup: real requests through the engine before the pod reports ready.

First requests after start-up are slow on Ascend (kernels compile on first use, new shapes
recompile), so a pod must not take traffic before it has served the shapes users send. The
plan covers every configured prompt length at every configured concurrency level, as completions with exact token-id prompts (exact shapes,
whatever the tokenizer) and, when enabled, once per concurrency level through the chat
template. Every request must succeed; one that fails makes the warmup, and the start, fail.
One exception: a model without a chat template (a base model) answers chat requests with HTTP
400 naming the missing template. That is the model, not the engine: the remaining chat waves are
skipped and the warmup succeeds with a warning saying so (``warmup.chat: false`` skips them from
the start).

The warmup is checked against the engine's limits before the first request
(:func:`ascend_runtime.enginelimits.fit_warmup`): a prompt length or concurrency the user set
that the engine cannot run fails the warmup with a reason naming both fields (never clipped);
defaults that do not fit are left out or lowered with a warning in ``status.warmup.warnings``.
"""

from __future__ import annotations

import asyncio
import os
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass, field

import aiohttp

from ascend_runtime.config import WarmupConfig
from ascend_runtime.enginelimits import WarmupFit, fit_warmup

#: Token ids used to build prompts: ordinary tokens in any real vocabulary (ids below ~100
#: are often special or control tokens), cycled to the wanted length.
PROMPT_TOKEN_RANGE = range(100, 1000)
#: How vLLM (through transformers) refuses a chat request for a model without a chat template:
#: "... you must provide a chat template if the tokenizer does not define one", "Cannot use chat
#: template functions because tokenizer.chat_template is not set ...".
_NO_TEMPLATE = re.compile(r"chat[ _]template", re.IGNORECASE)


@dataclass(frozen=True)
class WarmupRequest:
    kind: str  # "completion" or "chat"
    prompt_tokens: int
    concurrency: int


@dataclass
class WarmupResult:
    ok: bool
    seconds: float
    requests: int
    reason: str | None = None
    steps: list[dict] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


def plan_warmup(config: WarmupConfig, max_model_len: int | None, max_num_seqs: int | None) -> list[list[WarmupRequest]]:
    """The waves of requests to send: each inner list is sent concurrently.

    Pure. Raises :class:`WarmupRefused` when a value the user set does not fit the limits
    (``None``: unknown); defaults that do not fit are left out or lowered (see :func:`fit_warmup`).
    """

    return waves_of(config, fit_warmup(config, max_model_len, max_num_seqs))


def waves_of(config: WarmupConfig, fit: WarmupFit) -> list[list[WarmupRequest]]:
    """The waves for an already checked ``fit``, ascending by concurrency then length."""

    if fit.refusals:
        raise WarmupRefused("; ".join(fit.refusals))
    lengths = sorted(set(fit.prompt_lengths))
    waves: list[list[WarmupRequest]] = []
    for level in sorted(set(fit.concurrency)):
        for length in lengths:
            waves.append([WarmupRequest("completion", length, level)] * level)
        if config.chat:
            waves.append([WarmupRequest("chat", lengths[0], level)] * level)
    return waves


def _prompt(length: int, salt: int) -> list[int]:
    span = len(PROMPT_TOKEN_RANGE)
    return [PROMPT_TOKEN_RANGE[(salt * 7919 + i) % span] for i in range(length)]


async def _send(session: aiohttp.ClientSession, base: str, model: str, request: WarmupRequest,
                max_tokens: int, salt: int) -> None:
    if request.kind == "chat":
        url = f"{base}/v1/chat/completions"
        body: dict = {
            "model": model,
            "messages": [{"role": "user", "content": "Warm up the chat template. " * max(1, request.prompt_tokens // 6)}],
            "max_tokens": max_tokens,
        }
    else:
        url = f"{base}/v1/completions"
        # Salted prompts so prefix caching does not turn the warmup into cache hits.
        body = {"model": model, "prompt": _prompt(request.prompt_tokens, salt), "max_tokens": max_tokens}
    body["temperature"] = 0.0
    async with session.post(url, json=body) as response:
        text = await response.text()
        if response.status == 400 and request.kind == "chat" and _NO_TEMPLATE.search(text):
            raise NoChatTemplate(f"the model has no chat template (chat request got HTTP 400: {text[:200]})")
        if response.status != 200:
            raise WarmupError(f"{request.kind} request ({request.prompt_tokens} tokens, concurrency "
                              f"{request.concurrency}) got HTTP {response.status}: {text[:300]}")
        if '"choices"' not in text:
            raise WarmupError(f"{request.kind} request returned no choices: {text[:300]}")


class WarmupError(RuntimeError):
    pass


def api_key_headers(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The engine's API key as a bearer token when one is set (vLLM guards /v1 with VLLM_API_KEY)."""
    key = (os.environ if environ is None else environ).get("VLLM_API_KEY")
    return {"Authorization": f"Bearer {key}"} if key else {}


class WarmupRefused(WarmupError):
    """The warmup asks for more than the engine's limits allow (nothing was sent)."""


class NoChatTemplate(WarmupError):
    """The engine refused a chat request because the model defines no chat template."""


async def engine_max_model_len(session: aiohttp.ClientSession, base: str, model: str) -> int | None:
    """The ``max_model_len`` the engine reports for ``model`` on ``/v1/models`` (vLLM lists it)."""

    try:
        async with session.get(f"{base}/v1/models") as response:
            if response.status != 200:
                return None
            listing = await response.json(content_type=None)
    except (aiohttp.ClientError, ValueError):
        return None
    for entry in listing.get("data", []) if isinstance(listing, dict) else []:
        if isinstance(entry, dict) and entry.get("id") == model and isinstance(entry.get("max_model_len"), int):
            return entry["max_model_len"]
    return None


async def run_warmup(base_url: str, model: str, config: WarmupConfig, max_model_len: int | None,
                     max_num_seqs: int | None, seqs_from: str = "") -> WarmupResult:
    """Send the plan to the engine at ``base_url``; never raises for engine errors.

    ``max_model_len`` None: the engine's own (the model's config.json), read from ``/v1/models``
    before the first request; ``max_num_seqs`` None: not checked. A warmup that does not fit
    fails here, before anything is sent, with the reason (``status.warmup.reason``).
    """

    started = time.monotonic()
    sent = 0
    steps: list[dict] = []
    warnings: list[str] = []
    timeout = aiohttp.ClientTimeout(total=config.timeout_s)
    try:
        async with aiohttp.ClientSession(timeout=timeout, headers=api_key_headers()) as session:
            async with asyncio.timeout(config.timeout_s):
                len_from = ""
                if max_model_len is None:
                    max_model_len = await engine_max_model_len(session, base_url, model)
                    len_from = " (engine.maxModelLen unset: the model's own, as the engine reports it)"
                fit = fit_warmup(config, max_model_len, max_num_seqs, len_from, seqs_from)
                warnings.extend(fit.notes)
                no_template = False
                for wave in waves_of(config, fit):
                    if wave[0].kind == "chat" and no_template:
                        continue  # no chat template: the other chat waves would fail alike
                    wave_start = time.monotonic()
                    outcomes = await asyncio.gather(*(
                        _send(session, base_url, model, request, config.max_tokens, sent + i)
                        for i, request in enumerate(wave)
                    ), return_exceptions=True)
                    sent += len(wave)
                    failures = [error for error in outcomes if isinstance(error, BaseException)]
                    if failures and all(isinstance(error, NoChatTemplate) for error in failures):
                        warnings.append(f"chat warmup skipped: {failures[0]} (set warmup.chat: false to "
                                        "skip it without trying)")
                        no_template = True
                        continue
                    for error in failures:
                        if not isinstance(error, NoChatTemplate):
                            raise error
                    steps.append({"kind": wave[0].kind, "promptTokens": wave[0].prompt_tokens,
                                  "concurrency": wave[0].concurrency,
                                  "seconds": round(time.monotonic() - wave_start, 3)})
    except WarmupError as error:
        return WarmupResult(False, time.monotonic() - started, sent, str(error), steps, warnings)
    except (TimeoutError, asyncio.TimeoutError):
        return WarmupResult(False, time.monotonic() - started, sent,
                            f"warmup did not finish within {config.timeout_s} s (warmup.timeoutSeconds)", steps,
                            warnings)
    except aiohttp.ClientError as error:
        return WarmupResult(False, time.monotonic() - started, sent, f"engine connection failed: {error}", steps,
                            warnings)
    return WarmupResult(True, time.monotonic() - started, sent, None, steps, warnings)
