"""kopf handler bodies, one module per concern (``ascend_operator.main`` only registers them).

- :mod:`.handle_startup`: kopf settings, operator settings, the API connection, login, the queue.
- :mod:`.handle_events`: watch events of the resources, their children and pods -> the queue.
- :mod:`.handle_reconcile`: the level-based reconcile of one resource, run by the queue.
- :mod:`.handle_modelcache`: the model cache's part of a reconcile pass (claim, fetch Jobs, retries).

:class:`OperatorContext` is what the startup handler puts into kopf's operator-level memo
(``memo.ascend``): the settings, the one API connection, the reader of the pods' own state, the store of resource bodies, the
children and pods the reflectors show (the watch cache), what each resource's last full pass
verified (:mod:`ascend_operator.passmemo`) and the work queue. kopf feeds the
resources' events in; every reconcile runs from the queue, one at a time per resource, so no
kopf state (annotations, finalizers) is ever written to a resource.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import kopf

from ascend_operator.k8s import Kube
from ascend_operator.lastpass import LastPasses
from ascend_operator.passmemo import PassMemo
from ascend_operator.podreads import PodReader
from ascend_operator.reflector import Reflectors
from ascend_operator.settings import OperatorSettings
from ascend_operator.specmemo import SpecMemo
from ascend_operator.store import ResourceStore
from ascend_operator.watchcache import WatchCache
from ascend_operator.workqueue import WorkQueue

MEMO_KEY = "ascend"


@dataclass
class OperatorContext:
    """The operator's settings, its API connection, its pod reader, the resource bodies, the
    watched children and pods, and the work queue."""

    settings: OperatorSettings
    kube: Kube
    #: The pods' own /state and /progress (plain HTTP to the pod IPs, or the pod proxy).
    pods: PodReader
    store: ResourceStore = field(default_factory=ResourceStore)
    watch_cache: WatchCache = field(default_factory=WatchCache)
    passes: PassMemo = field(default_factory=PassMemo)
    specs: SpecMemo = field(default_factory=SpecMemo)
    last_passes: LastPasses = field(default_factory=LastPasses)
    #: Resources whose last pass held their HTTPRoute back (RouteShadowed): a route's change or
    #: deletion asks them again at once (handle_events.child_event), not at the next resync.
    shadowed: set[str] = field(default_factory=set)
    #: Set by the startup handler once the event loop runs (its worker needs this context).
    queue: WorkQueue | None = None
    #: The list-then-watch streams of the children and pods (set by the startup handler).
    reflectors: Reflectors | None = None

    @property
    def work(self) -> WorkQueue:
        if self.queue is None:
            raise RuntimeError("the work queue is not running: the startup handler did not finish")
        return self.queue


def context(memo: kopf.Memo) -> OperatorContext:
    """The context the startup handler stored; a missing one is a wiring bug, said plainly."""

    found: OperatorContext | None = memo.get(MEMO_KEY)
    if found is None:
        raise RuntimeError("the operator context is missing from kopf's memo: the startup handler did not run")
    return found
