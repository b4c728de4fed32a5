"""CPython's cycle collector, told to skip the operator's settled state.

The operator holds every resource's body, children, pods and memos for as long as it runs, and
each full collection traverses all of them: at 3,000 resources here up to 0.3 s each, 14 in the
converge and one every 40 s or so while idle (the resyncs' short-lived objects start them;
bench/README.md, bench/heap_probe.py). After each full collection :class:`Freezer` freezes what survived
(``gc.freeze``: later collections skip it), so the next one traverses only what was made since.
A frozen object that is dropped is still freed by its reference count; only a garbage cycle
among frozen objects waits: every :attr:`Freezer.unfreeze_s` the whole heap is collected once
and frozen again.
"""

from __future__ import annotations

import enum
import gc
import time
from collections.abc import Callable
from dataclasses import dataclass, field

#: Seconds between the operator's looks at the collector's count of full collections.
CHECK_INTERVAL_S = 5.0
#: Seconds between collections of the whole heap, frozen part included.
UNFREEZE_INTERVAL_S = 3600.0


class Step(enum.Enum):
    NOTHING = "nothing"
    #: A full collection ran since the last step: what survived it is frozen now.
    FROZE = "froze"
    #: The whole heap was collected and what survived frozen.
    COLLECTED = "collected"


def full_collections() -> int:
    """How many collections of the oldest generation this process has run."""
    return int(gc.get_stats()[-1]["collections"])


def unfreeze() -> None:
    """Give the frozen objects back to the collector (the operator stops)."""
    gc.unfreeze()


@dataclass
class Freezer:
    """Freezes the heap after each full collection; collects all of it every ``unfreeze_s``."""


    unfreeze_s: float = UNFREEZE_INTERVAL_S
    clock: Callable[[], float] = time.monotonic
    _seen: int = field(init=False, default=0)
    _collected_at: float = field(init=False, default=0.0)

    def __post_init__(self) -> None:
        self._seen = full_collections()
        self._collected_at = self.clock()

    def step(self) -> Step:
        if self.clock() - self._collected_at >= self.unfreeze_s:
            gc.unfreeze()
            gc.collect()
            gc.freeze()
            self._collected_at, self._seen = self.clock(), full_collections()
            return Step.COLLECTED
        full = full_collections()
        if full == self._seen:
            return Step.NOTHING
        self._seen = full
        # The young generations' garbage first: a cycle alive only among them would be frozen too.
        gc.collect(1)
        gc.freeze()
        return Step.FROZE
