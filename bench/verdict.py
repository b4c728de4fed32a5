"""Goal verdicts that the spread of a measurement supports: met, missed, or inconclusive (and why).

A median alone can sit on the right side of a goal by luck: a throughput ratio of 1.96 with a
spread of +-93 % says nothing about ">= 0.99". So a goal counts as met only when the whole range
of the measured quantity (min-max over its samples) lies on the goal's side, as missed only when
the whole range lies on the other side, and as inconclusive otherwise, or from fewer than
:data:`MIN_SAMPLES` samples: the min-max range of n samples holds the true median with
probability 1 - 2^(1-n), 50 % for two samples (a 3.7x "throughput ratio" of two identical engines
came out of two pairs here), 75 % for three, 94 % for five. Shared by the benches in this folder.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import Enum


#: Fewest samples whose min-max range can decide a goal (see the module docstring).
MIN_SAMPLES = 3


class Outcome(str, Enum):
    MET = "met"
    MISSED = "MISSED"
    INCONCLUSIVE = "inconclusive"


class Direction(str, Enum):
    """Which side of the goal is good."""

    AT_MOST = "<="
    AT_LEAST = ">="


@dataclass(frozen=True)
class Verdict:
    outcome: Outcome
    reason: str

    @property
    def met(self) -> bool:
        return self.outcome is Outcome.MET

    def as_dict(self) -> dict[str, str]:
        return {"outcome": self.outcome.value, "reason": self.reason}


def _num(value: float) -> str:
    return f"{value:.3g}"


def judge_range(low: float, high: float, samples: int, goal: float, direction: Direction) -> Verdict:
    """The verdict for a quantity measured between ``low`` and ``high`` over ``samples`` samples."""

    if low > high:
        raise ValueError(f"low {low} is above high {high}")
    span = f"range {_num(low)}-{_num(high)} over {samples} sample{'s' if samples != 1 else ''}"
    if samples < MIN_SAMPLES:
        return Verdict(Outcome.INCONCLUSIVE, f"{span}: fewer than {MIN_SAMPLES} samples cannot bound the spread; "
                                             "measure more rounds")
    good_low, good_high = (low <= goal, high <= goal) if direction is Direction.AT_MOST else (low >= goal, high >= goal)
    if good_low and good_high:
        return Verdict(Outcome.MET, f"{span}, all {direction.value} {_num(goal)}")
    if not good_low and not good_high:
        return Verdict(Outcome.MISSED, f"{span}, all on the wrong side of {_num(goal)}")
    return Verdict(Outcome.INCONCLUSIVE, f"{span} straddles {_num(goal)}: the spread cannot tell; measure more "
                                         "rounds or on a quieter machine")


def judge(values: Sequence[float], goal: float, direction: Direction) -> Verdict:
    """The verdict for a quantity with one value per sample (e.g. a runtime/bare ratio per pair)."""

    if not values:
        return Verdict(Outcome.INCONCLUSIVE, "no samples")
    return judge_range(min(values), max(values), len(values), goal, direction)


def combine(verdicts: Iterable[tuple[str, Verdict]]) -> Verdict:
    """One verdict over parts: missed if any part missed, else inconclusive if any part was, else met."""

    parts = list(verdicts)
    if not parts:
        return Verdict(Outcome.INCONCLUSIVE, "nothing measured")
    for outcome in (Outcome.MISSED, Outcome.INCONCLUSIVE):
        named = [f"{name}: {verdict.reason}" for name, verdict in parts if verdict.outcome is outcome]
        if named:
            return Verdict(outcome, f"{len(named)} of {len(parts)} {outcome.value} ({'; '.join(named)})")
    return Verdict(Outcome.MET, f"all {len(parts)} met")


def format_verdicts(verdicts: Iterable[tuple[str, Verdict]]) -> str:
    """``Goals:`` lines, one per goal: ``- <name>: met (why)``."""

    return "\n".join(["Goals:"] + [f"- {name}: {verdict.outcome.value} ({verdict.reason})"
                                   for name, verdict in verdicts])
