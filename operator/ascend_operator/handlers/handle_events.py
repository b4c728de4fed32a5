"""Watch events -> reconcile requests (no API calls here).

- An ``AscendLLMDeployment`` event stores the body and requests its reconcile, unless the body
  is one the store already has (the echo of our own status write: same ``resourceVersion``);
  urgently (:attr:`~ascend_operator.workqueue.Urgency.SPEC`) when its generation was never
  applied, so new and changed specs go before status refreshes.
  ``DELETED`` forgets it: the children carry owner references and the garbage collector removes
  them, so nothing has to run before the object goes (and no finalizer holds it).
- An event of a child or pod (label ``llm.ascend.dev/deployment``, filtered by the API server;
  from ``ascend_operator.reflector``, ``None`` for an object a list returned) updates the watch cache and requests the reconcile of the resource it belongs to, after
  :data:`CHILD_DEBOUNCE_S`, so a rollout's burst of pod events costs one reconcile: drift is
  repaired and status follows within about a second. Status-only changes of children whose status
  the reconcile does not read (:data:`STATUS_UNREAD`) request nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ascend_operator.builders.common import RESOURCE_LABEL
from ascend_operator.k8s import HTTP_ROUTE
from ascend_operator.handlers import OperatorContext
from ascend_operator.store import key_of
from ascend_operator.watchcache import beyond_status
from ascend_operator.workqueue import Urgency

#: Seconds to wait after a child or pod event before reconciling (merges bursts).
CHILD_DEBOUNCE_S = 0.5
#: Children whose status the reconcile never reads: an event that changes only their status
#: (same generation, labels, annotations and owners) triggers no reconcile. A PodDisruptionBudget's
#: status moves with every pod; a ScaledObject's with KEDA's every poll.
STATUS_UNREAD = frozenset({"PodDisruptionBudget", "ScaledObject"})


def resource_event(ctx: OperatorContext, event_type: str | None, body: Mapping[str, Any]) -> None:
    # The queue starts from the first handler call: its tasks inherit this context, where kopf
    # keeps what kopf.event needs (the startup handler's context lacks it).
    ctx.work.start()
    meta = body["metadata"]
    key = key_of(meta["namespace"], meta["name"])
    if event_type == "DELETED":
        ctx.store.remove(key)
        ctx.passes.forget(key)
        ctx.specs.forget(key)
        ctx.last_passes.forget(key)
        ctx.work.forget(key)
        ctx.shadowed.discard(key)
        return
    previous = ctx.store.version(key)
    if not ctx.store.put(body):
        return  # older than what we have
    if previous is not None and previous == meta.get("resourceVersion"):
        return  # the echo of our own write
    ctx.work.request(key, urgency=Urgency.SPEC if _spec_unapplied(body) else Urgency.REFRESH)


def _spec_unapplied(body: Mapping[str, Any]) -> bool:
    """Whether the resource's generation is one no pass has applied yet (new, or its spec changed)."""
    return (body.get("status") or {}).get("observedGeneration") != body["metadata"].get("generation")


def _status_only(old: Mapping[str, Any] | None, new: Mapping[str, Any]) -> bool:
    """Whether ``new`` differs from ``old`` only where the operator reads nothing (its status)."""
    return old is not None and beyond_status(old) == beyond_status(new)


def _version(body: Mapping[str, Any]) -> int | None:
    try:
        return int((body.get("metadata") or {}).get("resourceVersion"))
    except (TypeError, ValueError):
        return None


def child_event(ctx: OperatorContext, event_type: str | None, body: Mapping[str, Any]) -> None:
    meta = body.get("metadata") or {}
    value = (meta.get("labels") or {}).get(RESOURCE_LABEL)
    namespace = meta.get("namespace")
    kind, name = body.get("kind") or "", meta.get("name") or ""
    if not value or not namespace:
        return
    if event_type == "DELETED":
        ctx.watch_cache.remove(kind, namespace, name, _version(body))
    elif event_type is None and ctx.watch_cache.version(kind, namespace, name) == _version(body):
        return  # listed again, unchanged (a re-list after a dropped watch)
    else:
        old = ctx.watch_cache.get(kind, namespace, name, value) if kind in STATUS_UNREAD else None
        if not ctx.watch_cache.put(body) and kind and name:
            return  # older than what the cache holds (our own write's answer came first)
        if event_type is not None and _status_only(old, body):
            return  # e.g. a PodDisruptionBudget counting pods: nothing to reconcile
    key = ctx.store.key_for_label(namespace, value)
    if key is not None:
        ctx.work.request(key, CHILD_DEBOUNCE_S)
    if kind == HTTP_ROUTE.kind and event_type is not None:
        # A route that changed its matches or went away may have been what held another
        # resource's route back (routeshadow.py): those resources are asked again now.
        for shadowed in tuple(ctx.shadowed - {key}):
            ctx.work.request(shadowed, CHILD_DEBOUNCE_S)
