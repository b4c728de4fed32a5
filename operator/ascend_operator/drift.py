"""Drift between a child as built and the live object (pure).

The operator owns every field it sets on a child; anything else on the live object (fields the
API server defaults, a ``kubectl rollout restart`` annotation, a label another controller adds)
is left alone. :func:`find_drift` therefore compares *desired as a subset of live*:

- mappings: every key of the desired mapping must be on the live one, recursively;
- lists of mappings (containers, env, ports, volumes): every desired item must match one live
  item (the server keeps foreign items another field manager added; they are not ours to remove);
- lists of scalars (command, args) and scalars: equal, where a string that parses as a
  Kubernetes quantity is compared by value (``1024Mi`` and ``1Gi`` are the same memory).

A field whose value someone changed comes back with the next server-side apply (``force=True``
takes the field back from the other manager); a deleted field too. The paths returned name what
drifted, for the log.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from decimal import Decimal
from typing import Any

#: Metadata the server manages or that other controllers legitimately add to; never compared.
_IGNORED_METADATA = frozenset({"managedFields", "resourceVersion", "uid", "creationTimestamp", "generation",
                               "selfLink", "deletionTimestamp", "deletionGracePeriodSeconds"})


def _quantity(value: str) -> Decimal | None:
    from kubernetes.utils.quantity import parse_quantity  # the client's own parser (pure)

    try:
        return parse_quantity(value)
    except (ValueError, TypeError, ArithmeticError):
        return None


def _number_or_text(value: Any) -> bool:
    return isinstance(value, str | int | float) and not isinstance(value, bool)


def _scalar_equal(desired: Any, live: Any) -> bool:
    """Equal, or the same quantity: the server stores ``huawei.com/Ascend910: 1`` as ``"1"``."""

    if desired == live:
        return True
    if isinstance(desired, str) or isinstance(live, str):
        if not (_number_or_text(desired) and _number_or_text(live)):
            return False
        left, right = _quantity(str(desired)), _quantity(str(live))
        return left is not None and left == right
    if _number_or_text(desired) and _number_or_text(live):
        return float(desired) == float(live)
    return False


def _subset(desired: Any, live: Any, path: str, out: list[str]) -> None:
    if isinstance(desired, Mapping):
        if not isinstance(live, Mapping):
            out.append(path or ".")
            return
        for key, value in desired.items():
            if path == "metadata" and key in _IGNORED_METADATA:
                continue
            child = f"{path}.{key}" if path else str(key)
            if key not in live:
                if value in (None, {}, []):
                    continue  # the server drops empty values; nothing was lost
                out.append(child)
                continue
            _subset(value, live[key], child, out)
        return
    if isinstance(desired, Sequence) and not isinstance(desired, str):
        if not isinstance(live, Sequence) or isinstance(live, str):
            out.append(path)
            return
        if all(isinstance(item, Mapping) for item in desired):
            for index, item in enumerate(desired):
                if not any(not _drifted(item, candidate) for candidate in live):
                    out.append(f"{path}[{_item_name(item, index)}]")
            return
        if len(desired) != len(live) or any(not _scalar_equal(a, b) for a, b in zip(desired, live, strict=False)):
            out.append(path)
        return
    if not _scalar_equal(desired, live):
        out.append(path)


def _item_name(item: Mapping[str, Any], index: int) -> str:
    for key in ("name", "type", "port", "containerPort", "key", "mountPath"):
        if key in item:
            return f"{key}={item[key]}"
    return str(index)


def _drifted(desired: Any, live: Any) -> bool:
    found: list[str] = []
    _subset(desired, live, "", found)
    return bool(found)


def find_drift(desired: Mapping[str, Any], live: Mapping[str, Any]) -> list[str]:
    """The paths of ``desired`` (a child as built) that ``live`` no longer has as built.

    ``status`` is never compared (other controllers write it).
    """

    found: list[str] = []
    for key, value in desired.items():
        if key == "status":
            continue
        if key not in live:
            if value not in (None, {}, []):
                found.append(key)
            continue
        _subset(value, live[key], key, found)
    return found


#: Fields the API server never lets change once set, per kind: a child whose builder sets one to
#: another value than the live object's is deleted and created again (an apply would be refused).
IMMUTABLE_FIELDS: Mapping[str, tuple[tuple[str, ...], ...]] = {
    "Service": (("spec", "clusterIP"),),  # the runtime Service, which an earlier operator gave a cluster IP
}


def _at(body: Mapping[str, Any], path: Sequence[str]) -> Any:
    for key in path:
        if not isinstance(body, Mapping):
            return None
        body = body.get(key)  # type: ignore[assignment]
    return body


def immutable_changes(desired: Mapping[str, Any], live: Mapping[str, Any]) -> list[str]:
    """The immutable fields (:data:`IMMUTABLE_FIELDS`) that ``desired`` sets to another value than
    ``live`` has; a field the builder leaves unset is the server's to choose."""

    changed = []
    for path in IMMUTABLE_FIELDS.get(str(desired.get("kind") or ""), ()):
        want = _at(desired, path)
        if want is not None and want != _at(live, path):
            changed.append(".".join(path))
    return changed
