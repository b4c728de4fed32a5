"""The children and pods of the resources, as the watches and the operator's own writes show them.

The start-up handler fills the cache with one paged list per watched kind (filtered by the
resource label on the server) before the queue runs, so even the first reconcile after a start
sees every child and pod: a pass reads no child and no pod from the API server, and a restart
with everything present writes nothing. From then on the reflectors' watch events
(``ascend_operator.reflector``) and the responses to the operator's own applies keep it current; the newer ``resourceVersion`` wins, so
a late watch event never hides our own write (which a pass would take for drift) and a DELETED
event removes the object.

An entry is keyed by kind, namespace and resource label value, and holds a slimmed body
(:func:`slim`: no ``managedFields``; a pod keeps only what the status reads) as compact JSON:
parsed objects take about five times the memory of their JSON text, and a pass parses only the
few objects of its own resource (tests/unit/test_watchcache.py measures both).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from ascend_operator.builders.common import RESOURCE_LABEL

#: The parts of a pod's spec the status reads (images, NPU requests, placement).
_POD_SPEC_KEYS = ("nodeName", "containers")
_POD_CONTAINER_KEYS = ("name", "image", "resources")


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


def _version(body: Mapping[str, Any]) -> int:
    try:
        return int((body.get("metadata") or {}).get("resourceVersion") or 0)
    except (TypeError, ValueError):
        return 0


#: Kinds whose API server bumps ``metadata.generation`` on every change of their spec (apps and
#: policy objects, Jobs, custom resources with a status subresource): a change of their status
#: alone keeps their :meth:`WatchCache.marks`. Every other kind's mark is its resourceVersion.
GENERATION_KINDS = frozenset({"Deployment", "PodDisruptionBudget", "Job", "LeaderWorkerSet", "ScaledObject",
                              "InferencePool", "HTTPRoute"})


def beyond_status(body: Mapping[str, Any]) -> list[Any]:
    """What of ``body`` changes when anything but its status changes, for a kind of
    :data:`GENERATION_KINDS`: the generation and the metadata the operator reads."""
    meta = body.get("metadata") or {}
    return [meta.get(key) for key in ("generation", "labels", "annotations", "ownerReferences", "deletionTimestamp")]


def _mark(body: Mapping[str, Any], version: int) -> int:
    if body.get("kind") in GENERATION_KINDS and (body.get("metadata") or {}).get("generation") is not None:
        return hash(json.dumps(beyond_status(body), sort_keys=True))
    return version


def matches(labels: Mapping[str, str], selector: Mapping[str, str]) -> bool:
    return all(labels.get(key) == value for key, value in selector.items())


class WatchCache:
    """Children and pods by kind and resource, newest ``resourceVersion`` kept."""

    def __init__(self) -> None:
        #: (kind, namespace, label value) -> name -> (resourceVersion, slim body as JSON, mark).
        self._groups: dict[tuple[str, str, str], dict[str, tuple[int, str, int]]] = {}
        #: (kind, namespace, name) -> label value, to find an object by name.
        self._labels: dict[tuple[str, str, str], str] = {}
        #: (namespace, label value) -> [the number of the last change to one of its objects, how
        #: many it has] (kept while it has any); numbers only grow, so one names one state.
        self._changed: dict[tuple[str, str], list[int]] = {}
        self._changes = 0

    def __len__(self) -> int:
        return len(self._labels)

    def put(self, body: Mapping[str, Any]) -> bool:
        """Keep ``body`` (a watch event's or an apply's) unless a newer version is kept; ``False``
        when it was not kept (older, or not labelled for a resource)."""

        meta = body.get("metadata") or {}
        label = (meta.get("labels") or {}).get(RESOURCE_LABEL)
        kind, namespace, name = body.get("kind"), meta.get("namespace"), meta.get("name")
        if not (label and kind and namespace and name):
            return False
        version = _version(body)
        old_label = self._labels.get((kind, namespace, name))
        if old_label is not None:
            old = self._groups.get((kind, namespace, old_label), {}).get(name)
            if old is not None and version and old[0] > version:
                return False
            if old_label != label:  # relabelled: it belongs to another resource now
                self.remove(kind, namespace, name)
        text = json.dumps(slim(body), separators=(",", ":"), ensure_ascii=False)
        group = self._groups.setdefault((kind, namespace, label), {})
        held = group.get(name)
        if held is None or held[0] != version or held[1] != text:  # not the same object again
            self._changes += 1
            entry = self._changed.setdefault((namespace, label), [0, 0])
            entry[0] = self._changes
            entry[1] += held is None
        group[name] = (version, text, _mark(body, version))
        self._labels[kind, namespace, name] = label
        return True

    def changed(self, namespace: str, label: str) -> int:
        """A number that changes whenever any object of the resource (label value ``label``) is
        added, changed or removed, and only then (0: it has none and never had; none parsed)."""
        entry = self._changed.get((namespace, label))
        return entry[0] if entry is not None else 0

    def version(self, kind: str, namespace: str, name: str) -> int | None:
        """The ``resourceVersion`` held for the object, if any."""

        label = self._labels.get((kind, namespace, name))
        entry = self._groups.get((kind, namespace, label), {}).get(name) if label is not None else None
        return entry[0] if entry is not None else None

    def entries(self, kind: str) -> list[tuple[str, str, str]]:
        """``(namespace, name, label value)`` of every ``kind`` object held."""
        return [(namespace, name, label) for (k, namespace, name), label in self._labels.items() if k == kind]

    def remove(self, kind: str, namespace: str, name: str, version: int | None = None) -> None:
        """The object is gone (its DELETED event at ``version``, or our own delete). A DELETED event
        older than the object held is the predecessor's: the object was deleted and made again."""

        label = self._labels.get((kind, namespace, name))
        if label is None:
            return
        group = self._groups.get((kind, namespace, label), {})
        held = group.get(name)
        if version and held is not None and held[0] > version:
            return
        del self._labels[kind, namespace, name]
        group.pop(name, None)
        self._changes += 1
        entry = self._changed[namespace, label]
        entry[0], entry[1] = self._changes, entry[1] - 1
        if not entry[1]:
            del self._changed[namespace, label]
        if not group:
            self._groups.pop((kind, namespace, label), None)

    def objects(self, kind: str, namespace: str, label: str) -> list[dict[str, Any]]:
        """Every ``kind`` object labelled for the resource (label value ``label``)."""
        return [json.loads(entry[1]) for entry in self._groups.get((kind, namespace, label), {}).values()]

    def marks(self, kind: str, namespace: str, label: str) -> dict[str, int]:
        """Name -> mark of every ``kind`` object labelled for the resource, without parsing them: a
        mark changes with every change of the object that is not its status alone
        (:data:`GENERATION_KINDS`), or with every change (the other kinds)."""
        return {name: entry[2] for name, entry in self._groups.get((kind, namespace, label), {}).items()}

    def get(self, kind: str, namespace: str, name: str, label: str) -> dict[str, Any] | None:
        """The ``kind`` object ``name`` if it is labelled for the resource and seen, else ``None``
        (absent, or not labelled for the resource: the caller asks the API server)."""

        entry = self._groups.get((kind, namespace, label), {}).get(name)
        return json.loads(entry[1]) if entry is not None else None

    def pods(self, namespace: str, label: str, selector: Mapping[str, str]) -> list[dict[str, Any]]:
        """The resource's pods whose labels match ``selector`` (equality only)."""

        return [pod for pod in self.objects("Pod", namespace, label)
                if matches(pod["metadata"].get("labels") or {}, selector)]
