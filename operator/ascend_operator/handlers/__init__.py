"""kopf handler bodies, one module per concern (``ascend_operator.main`` only registers them).

- :mod:`.handle_startup`: kopf settings, operator settings, the API connection, login.
- :mod:`.handle_reconcile`: the level-based reconcile of one resource (create, update, resume).
- :mod:`.handle_status`: the periodic resync that re-reads pods and runtime states.

:class:`OperatorContext` is what the startup handler puts into kopf's operator-level memo
(``memo.ascend``); every per-object memo is a shallow copy of it, so all handlers share one
context, and each object keeps its own lock in its own memo.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

import kopf

from ascend_operator.k8s import Kube
from ascend_operator.settings import OperatorSettings

MEMO_KEY = "ascend"
_LOCK_KEY = "ascend_lock"


@dataclass(frozen=True)
class OperatorContext:
    """The operator's settings and its one API connection."""

    settings: OperatorSettings
    kube: Kube


def context(memo: kopf.Memo) -> OperatorContext:
    """The context the startup handler stored; a missing one is a wiring bug, said plainly."""

    found: OperatorContext | None = memo.get(MEMO_KEY)
    if found is None:
        raise RuntimeError("the operator context is missing from kopf's memo: the startup handler did not run")
    return found


def object_lock(memo: Any) -> asyncio.Lock:
    """One lock per resource object, so its create/update handler and its resync never interleave."""

    lock = memo.get(_LOCK_KEY)
    if lock is None:
        lock = memo[_LOCK_KEY] = asyncio.Lock()
    return lock
