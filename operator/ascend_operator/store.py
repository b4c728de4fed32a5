"""The operator's view of its resources: the latest body of each, as the API server sent it.

Watch events and the responses to our own status writes both update it; the newer
``resourceVersion`` wins, so a late watch event never rolls back a status we just wrote. The
reconcile compares the status it computes with the body here (the server's status, not what
this process last wrote: after a handover or an outside write the two differ).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from ascend_operator.names import label_value


def key_of(namespace: str, name: str) -> str:
    return f"{namespace}/{name}"


def _number(value: Any) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def _version(body: Mapping[str, Any]) -> int | None:
    return _number((body.get("metadata") or {}).get("resourceVersion"))


class ResourceStore:
    """Bodies by ``namespace/name`` (as compact JSON, like the watch cache: a fifth of the
    memory of parsed bodies; each ``get`` is a fresh copy), and the resource a pod's label value
    belongs to."""

    def __init__(self) -> None:
        #: key -> (resourceVersion, the body as JSON).
        self._bodies: dict[str, tuple[str | None, str]] = {}
        self._by_label: dict[tuple[str, str], str] = {}

    def put(self, body: Mapping[str, Any]) -> bool:
        """Keep ``body`` unless the one kept is newer; ``True`` when it was kept."""

        meta = body["metadata"]
        key = key_of(meta["namespace"], meta["name"])
        current = self._bodies.get(key)
        if current is not None:
            old, new = _number(current[0]), _version(body)
            if old is not None and new is not None and new < old:
                return False
        text = json.dumps(dict(body), separators=(",", ":"), ensure_ascii=False)
        self._bodies[key] = (meta.get("resourceVersion"), text)
        self._by_label[(meta["namespace"], label_value(meta["name"]))] = key
        return True

    def version(self, key: str) -> str | None:
        """The ``resourceVersion`` of the body kept under ``key``."""
        entry = self._bodies.get(key)
        return None if entry is None else entry[0]

    def get(self, key: str) -> dict[str, Any] | None:
        entry = self._bodies.get(key)
        return json.loads(entry[1]) if entry is not None else None

    def remove(self, key: str) -> None:
        entry = self._bodies.pop(key, None)
        if entry is not None:
            namespace, _, name = key.partition("/")
            self._by_label.pop((namespace, label_value(name)), None)

    def key_for_label(self, namespace: str, value: str) -> str | None:
        """The resource whose ``llm.ascend.dev/deployment`` label value is ``value``."""

        return self._by_label.get((namespace, value))

    def keys(self) -> list[str]:
        return list(self._bodies)

    def __len__(self) -> int:
        return len(self._bodies)
