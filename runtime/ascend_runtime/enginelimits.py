"""The engine limits a warmup must fit in (``--max-num-seqs``, ``--max-model-len``), vLLM's defaults
for them when unset, and the check of a warmup against them.

Shared by the API's admission rules, which see only the spec, and the runtime, which sees the
rendered command line and the running engine: both must say the same thing about the same input.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from ascend_runtime.config import EngineOptions, WarmupConfig

#: vLLM's ``--max-num-seqs`` default for the OpenAI server (``EngineArgs.get_batch_defaults``):
#: 256 on every device under 70 GiB, which is every Ascend NPU (64 GiB per 910B device or A3 die).
NPU_DEFAULT_MAX_NUM_SEQS = 256
#: On CPU it is 128 per tensor x pipeline rank (the same table, V1 engine through vLLM 0.32).
CPU_DEFAULT_MAX_NUM_SEQS = 128
#: Tokens kept free between a warmup prompt and the model length besides the generated ones
#: (the chat template's own tokens around the chat warmup's text).
LENGTH_MARGIN = 8
#: Flags in extraArgs that set or change ``--max-num-seqs`` / ``--max-model-len``: admission cannot
#: read their values, so the runtime checks the warmup against the rendered command line instead.
MAX_NUM_SEQS_FLAGS = r"^--(max[-_]num[-_]seqs|performance[-_]mode)(=|$)"
MAX_MODEL_LEN_FLAGS = r"^--max[-_]model[-_]len(=|$)"


def default_max_num_seqs(cpu: bool, world_size: int = 1) -> int:
    """vLLM's ``--max-num-seqs`` when the flag is unset (``world_size``: tensor x pipeline)."""
    return CPU_DEFAULT_MAX_NUM_SEQS * world_size if cpu else NPU_DEFAULT_MAX_NUM_SEQS


def prompt_fits(length: int, max_tokens: int, max_model_len: int) -> bool:
    """Whether a warmup prompt of ``length`` tokens plus its generated tokens fits the model length."""
    return length + max_tokens + LENGTH_MARGIN <= max_model_len


@dataclass
class WarmupFit:
    """What a warmup can send within the engine's limits: refusals for what the user asked that
    does not fit, notes for defaults left out or lowered (reported, never silent)."""

    prompt_lengths: list[int]
    concurrency: list[int]
    refusals: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def fit_warmup(config: WarmupConfig, max_model_len: int | None, max_num_seqs: int | None,
               len_from: str = "", seqs_from: str = "", defaults_replaced: bool = False) -> WarmupFit:
    """Check ``config`` against the limits (``None``: unknown, not checked).

    Values the user set (``config.model_fields_set``) that do not fit are refusals naming both
    fields and the fix; the defaults are fitted (lengths that do not fit left out, concurrency
    lowered to the limit) with a note each, unless ``defaults_replaced`` (the runtime's plan
    derived from the engine's argv stands in for them: they are not sent, so not checked).
    ``len_from`` / ``seqs_from`` say where each limit came from (for example `` (vLLM's
    default)``), for the messages.
    """
    fit = WarmupFit(list(config.prompt_lengths), list(config.concurrency))
    chosen = config.model_fields_set
    if max_model_len is not None and ("prompt_lengths" in chosen or not defaults_replaced):
        over = [n for n in config.prompt_lengths if not prompt_fits(n, config.max_tokens, max_model_len)]
        kept = [n for n in config.prompt_lengths if n not in over]
        if over and ("prompt_lengths" in chosen or not kept):
            fit.refusals.append(
                f"warmup.promptLengths {over} plus warmup.maxTokens ({config.max_tokens}) and "
                f"{LENGTH_MARGIN} tokens of margin do not fit in the engine's max model length "
                f"{max_model_len}{len_from}; lower warmup.promptLengths or warmup.maxTokens, or raise "
                "engine.maxModelLen")
        elif over:
            fit.notes.append(
                f"default warmup prompt lengths {over} left out: with warmup.maxTokens "
                f"({config.max_tokens}) they do not fit in the engine's max model length "
                f"{max_model_len}{len_from}; set warmup.promptLengths to choose")
            fit.prompt_lengths = kept
    if max_num_seqs is not None and ("concurrency" in chosen or not defaults_replaced):
        over = [n for n in config.concurrency if n > max_num_seqs]
        if over and "concurrency" in chosen:
            fit.refusals.append(
                f"warmup.concurrency {over} is above the engine's max concurrent sequences "
                f"{max_num_seqs}{seqs_from} (engine.maxNumSeqs): the engine never batches that many; "
                "lower warmup.concurrency or raise engine.maxNumSeqs")
        elif over:
            fit.notes.append(
                f"default warmup concurrency {over} lowered to {max_num_seqs}, the engine's max "
                f"concurrent sequences{seqs_from} (engine.maxNumSeqs); set warmup.concurrency to choose")
            fit.concurrency = sorted({min(n, max_num_seqs) for n in config.concurrency})
    return fit


def flag_value(argv: Sequence[str], flag: str) -> int | None:
    """The integer the last ``flag`` in ``argv`` sets (``--flag N``, ``--flag=N``, ``_`` for ``-``)."""
    text = _flag_text(argv, flag)
    try:
        return int(text) if text is not None else None
    except ValueError:
        return None


@dataclass(frozen=True)
class EngineLimits:
    """The limits an engine started with a command line runs under (``None``: the engine decides)."""

    max_model_len: int | None
    max_num_seqs: int
    seqs_from: str = ""


def engine_limits(argv: Sequence[str], engine: EngineOptions, cpu: bool) -> EngineLimits:
    """The effective ``--max-model-len`` and ``--max-num-seqs`` of ``argv`` (the last flag wins, as
    in vLLM's parser; extraArgs come after the rendered fields), else vLLM's defaults for the
    platform (``--performance-mode throughput`` doubles the default concurrency). The model length
    left unset is the model's own (its config.json), which only the running engine knows."""
    seqs = flag_value(argv, "--max-num-seqs")
    seqs_from = ""
    if seqs is None:
        world = engine.parallel.tensor * engine.parallel.pipeline
        seqs = default_max_num_seqs(cpu, world)
        seqs_from = f" (engine.maxNumSeqs unset: vLLM's default on {'CPU' if cpu else 'NPU'})"
        if _flag_text(argv, "--performance-mode") == "throughput":
            seqs *= 2
            seqs_from = " (engine.maxNumSeqs unset: vLLM's default doubled by --performance-mode throughput)"
    return EngineLimits(flag_value(argv, "--max-model-len"), seqs, seqs_from)


def _flag_text(argv: Sequence[str], flag: str) -> str | None:
    value = None
    names = {flag, flag[:2] + flag[2:].replace("-", "_")}
    for i, token in enumerate(argv):
        name, eq, attached = token.partition("=")
        if name in names:
            value = attached if eq else (argv[i + 1] if i + 1 < len(argv) else None)
    return value
