"""The children and pods as the watches show them, kept in kopf's indices.

``main.py`` registers one kopf index per watched kind (children and pods, filtered by the
resource label on the server). kopf fills the indices from the initial listing and every event,
and holds back every handler until all of them are filled, so even the first reconcile after a
start sees every child and pod: a pass reads no child and no pod from the API server, and a
restart with everything present writes nothing.

An index entry is keyed by ``(namespace, resource label value)`` and holds a slimmed body
(:func:`slim`: no ``managedFields``; a pod keeps only what the status reads) as compact JSON:
parsed objects take about five times the memory of their JSON text, and a pass parses only the few
objects of its own resource (tests/unit/test_watchcache.py measures both). The operator's own
apply responses are kept beside the indices until the watch delivers that version or a newer
one, so a pass that runs in between does not take its own write for drift.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any, Protocol

from ascend_operator.builders.common import RESOURCE_LABEL

#: The parts of a pod's spec the status reads (images, NPU requests, placement).
_POD_SPEC_KEYS = ("nodeName", "containers")
_POD_CONTAINER_KEYS = ("name", "image", "resources")

Key = tuple[str, str]


class IndexLike(Protocol):
    """What the cache uses of a kopf index: key -> the values of the objects under it."""

    def __contains__(self, item: object) -> bool: ...

    def __getitem__(self, item: Key) -> Iterable[str]: ...


def index_id(plural: str) -> str:
    """The kopf id of a kind's index; kopf passes each index to handlers as a keyword of this name."""
    return f"ascend_index_{plural}"


def slim(body: Mapping[str, Any]) -> dict[str, Any]:
    """``body`` without what no reconcile reads (``managedFields``; most of a pod's spec)."""

    out = {key: value for key, value in body.items() if key not in ("metadata", "spec")}
    meta = dict(body.get("metadata") or {})
    meta.pop("managedFields", None)
    out["metadata"] = meta
    spec = body.get("spec")
    if spec is None:
        return out
    if body.get("kind") == "Pod":
        pod_spec = {key: spec[key] for key in _POD_SPEC_KEYS if key in spec}
        pod_spec["containers"] = [
            {key: container[key] for key in _POD_CONTAINER_KEYS if key in container}
            for container in spec.get("containers") or []
        ]
        out["spec"] = pod_spec
    else:
        out["spec"] = spec
    return out


def index_entry(body: Mapping[str, Any]) -> dict[Key, str] | None:
    """What a kind's index keeps of ``body``: ``{(namespace, label value): slim body as JSON}``."""

    meta = body.get("metadata") or {}
    value = (meta.get("labels") or {}).get(RESOURCE_LABEL)
    namespace = meta.get("namespace")
    if not value or not namespace:
        return None
    return {(namespace, value): json.dumps(slim(body), separators=(",", ":"), ensure_ascii=False)}


def _version(body: Mapping[str, Any]) -> int:
    try:
        return int((body.get("metadata") or {}).get("resourceVersion") or 0)
    except (TypeError, ValueError):
        return 0


def matches(labels: Mapping[str, str], selector: Mapping[str, str]) -> bool:
    return all(labels.get(key) == value for key, value in selector.items())


class WatchCache:
    """Children and pods of one resource by kind, from the indices and the operator's own writes."""

    def __init__(self) -> None:
        #: kind (``Deployment``, ``Pod``...) -> its kopf index; set from the first handler call.
        self._indices: dict[str, IndexLike] = {}
        #: (kind, namespace, name) -> the body the last apply returned, until the watch catches up.
        self._applied: dict[tuple[str, str, str], dict[str, Any]] = {}

    @property
    def ready(self) -> bool:
        return bool(self._indices)

    def attach(self, indices: Mapping[str, IndexLike]) -> None:
        """Use ``indices`` (kind -> kopf index); kopf keeps them current from then on."""
        self._indices = dict(indices)

    def _indexed(self, kind: str, namespace: str, label: str) -> list[dict[str, Any]]:
        index = self._indices.get(kind)
        if index is None or (namespace, label) not in index:
            return []
        return [json.loads(text) for text in index[namespace, label]]

    def objects(self, kind: str, namespace: str, label: str) -> list[dict[str, Any]]:
        """Every ``kind`` object labelled for the resource (label value ``label``), newest known."""

        found: dict[str, dict[str, Any]] = {}
        for body in self._indexed(kind, namespace, label):
            found[body["metadata"]["name"]] = body
        for (k, ns, name), body in list(self._applied.items()):
            if k != kind or ns != namespace:
                continue
            if ((body["metadata"].get("labels") or {}).get(RESOURCE_LABEL)) != label:
                continue
            seen = found.get(name)
            if seen is not None and _version(seen) >= _version(body):
                del self._applied[k, ns, name]  # the watch has caught up
            else:
                found[name] = body
        return list(found.values())

    def get(self, kind: str, namespace: str, name: str, label: str) -> dict[str, Any] | None:
        """The ``kind`` object ``name`` if the watches (or our own write) show it, else ``None``
        (absent, or not labelled for the resource: the caller asks the API server)."""

        for body in self.objects(kind, namespace, label):
            if body["metadata"]["name"] == name:
                return body
        return None

    def pods(self, namespace: str, label: str, selector: Mapping[str, str]) -> list[dict[str, Any]]:
        """The resource's pods whose labels match ``selector`` (equality only)."""

        return [pod for pod in self._indexed("Pod", namespace, label)
                if matches(pod["metadata"].get("labels") or {}, selector)]

    def applied(self, body: Mapping[str, Any]) -> None:
        """Remember the server's answer to an apply until the watch delivers it."""

        meta = body.get("metadata") or {}
        if body.get("kind") in self._indices and (meta.get("labels") or {}).get(RESOURCE_LABEL):
            self._applied[body["kind"], meta["namespace"], meta["name"]] = slim(body)

    def forget(self, kind: str, namespace: str, name: str) -> None:
        """The object is gone (deleted by us, or its DELETED event came)."""
        self._applied.pop((kind, namespace, name), None)
