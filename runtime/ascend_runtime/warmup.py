"""Warmup: real requests through the engine before the pod reports ready.

First requests after start-up are slow on Ascend (kernels compile on first use, new shapes
recompile), so a pod must not take traffic before it has served the shapes users send. The
plan covers every configured prompt length at every configured concurrency level, as
completions with exact token-id prompts (exact shapes, whatever the tokenizer) and, when enabled,
once per concurrency level through the chat template. Every request must succeed; one that fails
makes the warmup, and the start, fail. One exception: a model without a chat template (a base
model) answers chat requests with HTTP 400 naming the missing template. That is the model, not
the engine: the remaining chat waves are skipped and the warmup succeeds with a warning saying so
(``warmup.chat: false`` skips them from the start).

The plan is derived from the engine's rendered argv (:func:`engine_shapes`, :func:`derived_plan`):
a ladder of prompt lengths up to the longest one the model length allows (``max_model_len -
max_tokens - margin``), the chunked-prefill size (``--max-num-batched-tokens``), and one decode
wave whose requests end one group at a time so the running batch passes through every captured
graph size up to ``--max-num-seqs`` (with nothing captured: every size up to
:data:`UNCAPTURED_EVERY_SIZE`, then powers of two). It fits the engine's limits by construction; its cost is
bounded by :data:`DERIVED_PROMPT_TOKEN_BUDGET` and :data:`DERIVED_REQUEST_BUDGET` (the longest
prompt and the chunk are always sent on top) and, like the rest, by ``warmup.timeoutSeconds``.
Lengths and levels the user lists are sent on top of it; left out, the fixed defaults give way
to it (they are used only when the model length is unknown, with no argv or no ``/v1/models``).

What the user lists is checked against the engine's limits before the first request
(:func:`ascend_runtime.enginelimits.fit_warmup`): a prompt length or concurrency the user set
that the engine cannot run fails the warmup with a reason naming both fields (never clipped);
defaults still in use that do not fit are left out or lowered with a warning in
``status.warmup.warnings``.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

import aiohttp

from ascend_runtime.config import WarmupConfig
from ascend_runtime.enginelimits import LENGTH_MARGIN, WarmupFit, fit_warmup

log = logging.getLogger(__name__)

#: Token ids used to build prompts: ordinary tokens in any real vocabulary (ids below ~100
#: are often special or control tokens), cycled to the wanted length.
PROMPT_TOKEN_RANGE = range(100, 1000)
#: How vLLM (through transformers) refuses a chat request for a model without a chat template:
#: "... you must provide a chat template if the tokenizer does not define one", "Cannot use chat
#: template functions because tokenizer.chat_template is not set ...".
_NO_TEMPLATE = re.compile(r"chat[ _]template", re.IGNORECASE)


#: vLLM's OpenAI-server defaults when the argv leaves them out (vllm/engine/arg_utils.py
#: ``get_batch_defaults``, devices under 70 GiB such as a 64 GB 910B): a guess the plan only uses
#: to size itself, never passed to the engine.
VLLM_DEFAULT_MAX_NUM_SEQS = 256
VLLM_DEFAULT_MAX_NUM_BATCHED_TOKENS = 2048
#: vLLM's default largest capture size (vllm/config/vllm.py ``_set_cudagraph_sizes``):
#: min(2 x max_num_seqs, 512).
VLLM_DEFAULT_MAX_CAPTURE_SIZE = 512
#: The derived prompt-length ladder: powers of two from here up to the longest prompt.
LADDER_START = 16
#: With nothing captured (eager, CPU), each decode batch size up to this one is its own shape: vLLM's
#: CPU GEMMs build a oneDNN primitive per token count of a step and keep 32 per weight shape
#: (``create_onednn_mm(weight, 32)``, vllm 0.32 ``model_executor/layers/utils.py``), a first build
#: costing milliseconds. The decode wave steps through every size up to it; above it, powers of two.
UNCAPTURED_EVERY_SIZE = 32
#: Prompt length of the decode wave's requests: short, so its prefill is one small step.
DECODE_WAVE_PROMPT = 16
#: Budget of the derived ladder and decode wave: prompt tokens summed over their requests, and
#: their number. The longest configured prompt and the chunk size are sent on top, always; the
#: user's lengths and levels are not counted. A doubling ladder costs about twice its top rung, so
#: the whole ladder of a 64k-token model length fits (seconds of prefill on an NPU); past the
#: budget the longest rungs are left out.
DERIVED_PROMPT_TOKEN_BUDGET = 131072
DERIVED_REQUEST_BUDGET = 1024
_FLAG_VALUE = ("--max-model-len", "--max-num-seqs", "--max-num-batched-tokens", "--compilation-config")


@dataclass(frozen=True)
class WarmupRequest:
    kind: str  # "completion" or "chat"
    prompt_tokens: int
    concurrency: int
    #: Tokens to generate; None: ``warmup.maxTokens``. The decode wave staggers it.
    max_tokens: int | None = None


@dataclass(frozen=True)
class EngineShapes:
    """The shapes the engine's argv fixes; None where the argv leaves vLLM's default."""

    max_model_len: int | None = None
    max_num_seqs: int | None = None
    max_num_batched_tokens: int | None = None
    #: Decode batch sizes with a captured graph, ascending; () when nothing is captured.
    capture_sizes: tuple[int, ...] = ()


def default_capture_sizes(max_size: int) -> tuple[int, ...]:
    """vLLM's default capture grid up to ``max_size``: 1, 2, 4, then every 8 to 256, every 16 after."""

    sizes = {n for n in (1, 2, 4) if n <= max_size}
    sizes |= set(range(8, min(max_size + 1, 256), 8)) | set(range(256, max_size + 1, 16)) | {max_size}
    return tuple(sorted(sizes))


def engine_shapes(argv: Sequence[str]) -> EngineShapes:
    """The warmup-relevant shapes from the engine argv as flags.py renders it (and extraArgs).

    Capture sizes: ``--compilation-config`` ``cudagraph_capture_sizes``, else (when it names a
    ``cudagraph_mode``, i.e. graphs are captured) vLLM's default grid up to
    ``max_cudagraph_capture_size`` or min(2 x max_num_seqs, 512); none with ``--enforce-eager``,
    ``cudagraph_mode: NONE`` or no compilation config (CPU torch.compile captures nothing).
    """

    values: dict[str, str] = {}
    eager = False
    tokens = list(argv)
    for index, token in enumerate(tokens):
        name, eq, attached = token.partition("=")
        if name.startswith("--"):
            name = "--" + name[2:].replace("_", "-")
        if name == "--enforce-eager":
            eager = True
        elif name in _FLAG_VALUE:
            if eq:
                values[name] = attached
            elif index + 1 < len(tokens):
                values[name] = tokens[index + 1]

    def number(flag: str) -> int | None:
        try:
            return int(values[flag]) if flag in values else None
        except ValueError:
            return None

    max_num_seqs = number("--max-num-seqs")
    batched = number("--max-num-batched-tokens")
    sizes: tuple[int, ...] = ()
    try:
        compilation = json.loads(values.get("--compilation-config", "{}"))
    except json.JSONDecodeError:
        compilation = {}
    if not isinstance(compilation, dict):
        compilation = {}
    mode = compilation.get("cudagraph_mode")
    if not eager and mode is not None and str(mode).upper() != "NONE":
        explicit = compilation.get("cudagraph_capture_sizes")
        if isinstance(explicit, list) and explicit:
            sizes = tuple(sorted({int(size) for size in explicit if int(size) >= 1}))
        else:
            largest = compilation.get("max_cudagraph_capture_size") or min(
                2 * (max_num_seqs or VLLM_DEFAULT_MAX_NUM_SEQS), VLLM_DEFAULT_MAX_CAPTURE_SIZE)
            largest = min(int(largest), batched or VLLM_DEFAULT_MAX_NUM_BATCHED_TOKENS)
            sizes = default_capture_sizes(largest)
    return EngineShapes(number("--max-model-len"), max_num_seqs, batched, sizes)


@dataclass(frozen=True)
class DerivedPlan:
    """The derived waves and what the budget left out (for the log and /state)."""

    waves: list[list[WarmupRequest]]
    lengths: list[int]
    batch: int
    decode_sizes: list[int]
    dropped_lengths: list[int]
    prompt_tokens: int
    #: The chunked-prefill size: the most prompt tokens one engine step takes.
    chunk: int

    def describe(self) -> str:
        text = (f"derived from the engine config: prompt lengths {self.lengths} at concurrency 1; decode batch "
                f"{self.batch} stepping through sizes {self.decode_sizes}; {self.prompt_tokens} prompt tokens")
        if self.dropped_lengths:
            text += (f"; lengths {self.dropped_lengths} left out (budget {DERIVED_PROMPT_TOKEN_BUDGET} prompt "
                     f"tokens, {DERIVED_REQUEST_BUDGET} requests)")
        return text


def _decode_wave(steps: Sequence[int], max_tokens: int, prompt: int) -> list[WarmupRequest]:
    """``steps[0]`` short requests whose output lengths step the running batch down through ``steps``.

    With sizes s0 > s1 > ... (descending) the s0 - s1 requests of group 0 stop after ``max_tokens``
    tokens, group 1 one token later, and so on: after each step the batch is the next size.
    """

    batch = steps[0]
    wave: list[WarmupRequest] = []
    for index, size in enumerate(steps):
        following = steps[index + 1] if index + 1 < len(steps) else 0
        wave += [WarmupRequest("completion", prompt, batch, max_tokens + index)] * (size - following)
    return wave


def derived_plan(shapes: EngineShapes, max_model_len: int, max_tokens: int) -> DerivedPlan:
    """Pure: the waves every client shape needs warm, from the engine's own limits, within budget."""

    longest = max(1, max_model_len - max_tokens - LENGTH_MARGIN)
    seqs = shapes.max_num_seqs or VLLM_DEFAULT_MAX_NUM_SEQS
    full_chunk = shapes.max_num_batched_tokens or VLLM_DEFAULT_MAX_NUM_BATCHED_TOKENS
    chunk = min(full_chunk, longest)
    ladder = []
    length = LADDER_START
    while length < longest:
        ladder.append(length)
        length *= 2
    captured = [size for size in shapes.capture_sizes if size <= seqs]
    batch = max(captured) if captured else seqs
    batch = min(batch, seqs, DERIVED_REQUEST_BUDGET // 2)
    # Nothing captured (eager, CPU): every size up to UNCAPTURED_EVERY_SIZE, then powers of two.
    sizes = captured or sorted(set(range(1, min(batch, UNCAPTURED_EVERY_SIZE) + 1))
                               | {1 << power for power in range(batch.bit_length())})
    steps = sorted({size for size in sizes if size < batch} | {batch}, reverse=True)
    while len(steps) > 1 and len(steps) >= longest + LENGTH_MARGIN:
        steps = steps[::2]  # a tiny model length: fewer steps, so the longest request still fits
    # Its longest request generates max_tokens + len(steps) - 1 tokens: the prompt leaves room for them.
    decode = _decode_wave(steps, max_tokens, max(1, min(DECODE_WAVE_PROMPT, longest - len(steps))))
    # The longest prompt and the chunk are always sent; the budget bounds the ladder and the
    # decode wave, so the cost is at most the budget plus those two prompts.
    kept = {longest, chunk}
    spent = sum(request.prompt_tokens for request in decode)
    requests = len(decode)
    dropped: list[int] = []
    for rung in sorted(set(ladder) - kept):
        if spent + rung <= DERIVED_PROMPT_TOKEN_BUDGET and requests + 1 <= DERIVED_REQUEST_BUDGET:
            kept.add(rung)
            spent += rung
            requests += 1
        else:
            dropped.append(rung)
    spent += longest + (chunk if chunk != longest else 0)
    lengths = sorted(kept)
    waves = [[WarmupRequest("completion", length, 1)] for length in lengths]
    # A chunk larger than the longest prompt is still one prefill step when prompts arrive
    # together: enough concurrent prompts to fill it (within max_num_seqs).
    if full_chunk > longest and seqs > 1:
        count = min(-(-full_chunk // longest), seqs)
        share = max(1, min(longest, full_chunk // count))
        waves.append([WarmupRequest("completion", share, count)] * count)
        spent += share * count
    waves.append(decode)
    return DerivedPlan(waves, lengths, batch, sorted(steps), dropped, spent, full_chunk)


@dataclass
class WarmupResult:
    ok: bool
    seconds: float
    requests: int
    reason: str | None = None
    steps: list[dict] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


def plan_warmup(config: WarmupConfig, max_model_len: int | None, max_num_seqs: int | None,
                shapes: EngineShapes | None = None) -> list[list[WarmupRequest]]:
    """The waves of requests to send: each inner list is sent concurrently.

    Pure. Raises :class:`WarmupRefused` when a value the user set does not fit the limits
    (``None``: unknown; see :func:`fit_warmup`). With the engine's ``shapes`` and a known model
    length the derived waves (:func:`derived_plan`) come first and replace the defaults; the
    user's lengths and levels follow (every length at every level), or, when the user listed
    neither, only the chat waves do (at concurrency 1). Without them the (fitted) defaults are sent.
    """

    derived = None
    if shapes is not None and max_model_len is not None:
        derived = derived_plan(shapes, max_model_len, config.max_tokens)
    fit = fit_warmup(config, max_model_len, max_num_seqs, defaults_replaced=derived is not None)
    return waves_of(config, fit, derived)


def waves_of(config: WarmupConfig, fit: WarmupFit,
             derived: DerivedPlan | None = None) -> list[list[WarmupRequest]]:
    """The waves for an already checked ``fit`` (after the ``derived`` ones, if any), ascending by
    concurrency then length."""

    if fit.refusals:
        raise WarmupRefused("; ".join(fit.refusals))
    given = config.model_fields_set
    user_lengths = derived is None or "prompt_lengths" in given
    lengths = sorted(set(fit.prompt_lengths))
    levels = sorted(set(fit.concurrency))
    waves: list[list[WarmupRequest]] = []
    chunk = derived.chunk if derived is not None else 0
    if derived is not None:
        waves += derived.waves
        if "concurrency" not in given:
            levels = [1]
        if not user_lengths:
            # The user's levels over the derived lengths whose batched prefill fits one chunk.
            lengths = derived.lengths
    for level in levels:
        for length in lengths:
            if derived is not None and level == 1 and length in derived.lengths:
                continue  # the derived waves sent it already
            if not user_lengths and level > 1 and length * level > chunk and length != lengths[0]:
                continue
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
        # ignore_eos: exactly max_tokens decode steps, so the decode wave's batch steps as planned.
        body = {"model": model, "prompt": _prompt(request.prompt_tokens, salt),
                "max_tokens": request.max_tokens or max_tokens, "ignore_eos": True}
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
                     max_num_seqs: int | None, seqs_from: str = "",
                     engine_argv: Sequence[str] | None = None) -> WarmupResult:
    """Send the plan to the engine at ``base_url``; never raises for engine errors.

    ``max_model_len`` None: the argv's, else the engine's own (the model's config.json), read from
    ``/v1/models`` before the first request; ``max_num_seqs`` None: the argv's, else not checked.
    With ``engine_argv`` the plan includes the waves derived from it. A warmup that does not fit
    fails here, before anything is sent, with the reason (``status.warmup.reason``).
    """

    started = time.monotonic()
    shapes = engine_shapes(engine_argv) if engine_argv is not None else None
    if shapes is not None:
        max_model_len = max_model_len or shapes.max_model_len
        max_num_seqs = max_num_seqs or shapes.max_num_seqs
        # The derived plan sizes its decode wave by the limit the checks use (vLLM's platform default).
        shapes = replace(shapes, max_num_seqs=max_num_seqs)
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
                derived = None
                if shapes is not None and max_model_len is not None:
                    derived = derived_plan(shapes, max_model_len, config.max_tokens)
                    log.info("warmup plan %s", derived.describe())
                fit = fit_warmup(config, max_model_len, max_num_seqs, len_from, seqs_from,
                                 defaults_replaced=derived is not None)
                warnings.extend(fit.notes)
                no_template = False
                for wave in waves_of(config, fit, derived):
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
