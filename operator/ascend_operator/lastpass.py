"""What each resource's last pass read, so that a pass whose inputs all stayed the same is skipped.

A pass reads the resource's body, its children and pods from the watch cache, discovery, the
settings and the pods' runtime states. When none of them changed since a pass that wrote nothing
(no child, no status: it found everything as it computed it), the next pass would compute the
same children and the same status and write nothing either, so it is skipped: the resync of a
settled resource costs a few dictionary lookups and the state reads, instead of decoding the
body and the pods and computing the status (at 1,000 resources most of the operator's idle CPU;
bench/README.md). The body is compared by its ``resourceVersion``, the children and pods by the
watch cache's change number of the resource (:meth:`ascend_operator.watchcache.WatchCache.changed`),
both taken before the pass reads anything (an object that changes during the pass makes the next
pass a full one).

Passes that read objects the watches do not show (a model cache's claim and Jobs, hub adapters,
``spec.routing``'s pool and the routes of other resources, KEDA's HPA) are never skipped:
:func:`skippable` says which.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ascend_runtime.config import RuntimeState

from ascend_operator.podreads import StateTarget


@dataclass(frozen=True)
class Inputs:
    """What a pass reads besides the runtime states: the body's version, discovery's answer, the
    settings object and the watch cache's change number of the children and pods."""

    body_version: str | None
    served: frozenset[str]
    settings: object
    objects: int

    def same(self, other: Inputs) -> bool:
        return (self.body_version == other.body_version and self.settings is other.settings
                and self.served == other.served and self.objects == other.objects)


@dataclass(frozen=True)
class LastPass:
    """One resource's last pass that wrote nothing: its inputs, the pods whose state it read, the
    states it got, and the seconds until its next run."""

    inputs: Inputs
    targets: tuple[StateTarget, ...]
    states: Mapping[str, RuntimeState | None]
    due_s: float | None


def skippable(*, cache: bool, adapters: bool, routing: bool, keda: bool) -> bool:
    """Whether a pass of a resource with these features reads only what :class:`Inputs` covers."""
    return not (cache or adapters or routing or keda)


class LastPasses:
    """Resource key -> its :class:`LastPass` (a few hundred bytes each)."""

    def __init__(self) -> None:
        self._passes: dict[str, LastPass] = {}

    def __len__(self) -> int:
        return len(self._passes)

    def get(self, key: str) -> LastPass | None:
        return self._passes.get(key)

    def record(self, key: str, last: LastPass) -> None:
        self._passes[key] = last

    def forget(self, key: str) -> None:
        self._passes.pop(key, None)


def same_states(old: Mapping[str, Any], new: Mapping[str, Any]) -> bool:
    """Whether two passes read the same runtime states (pydantic models compare by value)."""
    return old.keys() == new.keys() and all(old[name] == new[name] for name in old)
