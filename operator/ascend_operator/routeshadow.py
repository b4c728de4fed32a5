"""Which HTTPRoutes on the same Gateway would take a route's requests (pure).

A Gateway serves each request by the one route match with the highest Gateway API precedence
(exact path, longer path prefix, a method, more header matches, more query matches); between
equals the oldest route wins, then the first by ``namespace/name``. A route made after another
with the same model name on the same Gateway and host would get none of its requests, and the
older route would get the prompts of the newer resource's clients. :func:`shadowing_routes`
lists the live routes that would win over a desired one for some request both match; the
reconcile then does not make it (``Routing`` is ``RouteShadowed``, naming them).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

GATEWAY_GROUP = "gateway.networking.k8s.io"
_ANY_PATH = {"type": "PathPrefix", "value": "/"}


@dataclass(frozen=True)
class Shadow:
    """A live route that wins over the desired one: ``route`` ``namespace/name``, its owner
    (``AscendLLMDeployment namespace/name``, or None for a route the operator did not make) and the
    Gateway they share."""

    route: str
    owner: str | None
    gateway: str

    def describe(self) -> str:
        owner = f" of {self.owner}" if self.owner else ""
        return f"HTTPRoute {self.route}{owner} on Gateway {self.gateway}"


def _parents(route: Mapping[str, Any]) -> list[tuple[str, str, str | None]]:
    namespace = route["metadata"].get("namespace", "")
    out = []
    for ref in (route.get("spec") or {}).get("parentRefs") or []:
        if ref.get("group", GATEWAY_GROUP) != GATEWAY_GROUP or ref.get("kind", "Gateway") != "Gateway":
            continue
        out.append((ref.get("namespace") or namespace, ref["name"], ref.get("sectionName")))
    return out


def _shared_gateway(a: Mapping[str, Any], b: Mapping[str, Any]) -> str | None:
    """``namespace/name`` of a Gateway both routes attach to (listeners may differ only when both
    name different ones), else None."""
    for ns_a, name_a, section_a in _parents(a):
        for ns_b, name_b, section_b in _parents(b):
            if (ns_a, name_a) == (ns_b, name_b) and (section_a is None or section_b is None or section_a == section_b):
                return f"{ns_a}/{name_a}"
    return None


def _host_overlap(a: str, b: str) -> bool:
    if a == b:
        return True
    if a.startswith("*."):
        return b.endswith(a[1:]) or (b.startswith("*.") and a.endswith(b[1:]))
    return b.startswith("*.") and a.endswith(b[1:])


def hostnames_overlap(a: Sequence[str], b: Sequence[str]) -> bool:
    """Whether some host matches both lists (an empty list matches every host)."""
    return not a or not b or any(_host_overlap(x, y) for x in a for y in b)


def _prefix_of(prefix: str, path: str) -> bool:
    """Gateway API PathPrefix: whole path elements (``/v1`` covers ``/v1/x``, not ``/v10``)."""
    prefix = prefix.rstrip("/")
    return not prefix or path == prefix or path.startswith(prefix + "/")


def _paths_overlap(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    kinds = (a.get("type", "PathPrefix"), b.get("type", "PathPrefix"))
    va, vb = a.get("value", "/"), b.get("value", "/")
    if "RegularExpression" in kinds:
        return True  # not decided here: taken as overlapping
    if kinds == ("Exact", "Exact"):
        return va == vb
    if kinds == ("Exact", "PathPrefix"):
        return _prefix_of(vb, va)
    if kinds == ("PathPrefix", "Exact"):
        return _prefix_of(va, vb)
    return _prefix_of(va, vb) or _prefix_of(vb, va)


def _exact(items: Iterable[Mapping[str, Any]], *, fold: bool) -> dict[str, str]:
    return {(item["name"].lower() if fold else item["name"]): item.get("value", "")
            for item in items if item.get("type", "Exact") == "Exact"}


def _values_overlap(a: Mapping[str, str], b: Mapping[str, str]) -> bool:
    return all(a[key] == b[key] for key in a.keys() & b.keys())


def matches_overlap(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    """Whether some request matches both HTTPRoute matches."""
    if not _paths_overlap(a.get("path") or _ANY_PATH, b.get("path") or _ANY_PATH):
        return False
    if a.get("method") and b.get("method") and a["method"] != b["method"]:
        return False
    return (_values_overlap(_exact(a.get("headers") or [], fold=True), _exact(b.get("headers") or [], fold=True))
            and _values_overlap(_exact(a.get("queryParams") or [], fold=False),
                                _exact(b.get("queryParams") or [], fold=False)))


def _precedence(match: Mapping[str, Any]) -> tuple[int, int, int, int, int] | None:
    """Gateway API's order of matches, highest first; None for a regular-expression path (its
    place is the implementation's)."""
    path = match.get("path") or _ANY_PATH
    if path.get("type") == "RegularExpression":
        return None
    return (1 if path.get("type") == "Exact" else 0, len(path.get("value", "/")), 1 if match.get("method") else 0,
            len(match.get("headers") or []), len(match.get("queryParams") or []))


def _matches(route: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    return [match for rule in (route.get("spec") or {}).get("rules") or []
            for match in (rule.get("matches") or [{}])]


def _age(route: Mapping[str, Any]) -> tuple[str, str]:
    """Gateway API's tie-break: the older creationTimestamp, then ``namespace/name``. A route not
    made yet is the youngest (``~`` sorts after every RFC 3339 time)."""
    meta = route["metadata"]
    return (meta.get("creationTimestamp") or "~", f"{meta.get('namespace')}/{meta.get('name')}")


def _wins(other: Mapping[str, Any], mine: Mapping[str, Any], other_route: Mapping[str, Any],
          route: Mapping[str, Any]) -> bool:
    theirs, ours = _precedence(other), _precedence(mine)
    if theirs is None or ours is None:
        return True  # not decided here: taken as a loss
    if theirs != ours:
        return theirs > ours
    return _age(other_route) < _age(route)


def _owner(route: Mapping[str, Any]) -> str | None:
    meta = route["metadata"]
    for ref in meta.get("ownerReferences") or []:
        if ref.get("kind") == "AscendLLMDeployment":
            return f"AscendLLMDeployment {meta.get('namespace')}/{ref.get('name')}"
    return None


def shadowing_routes(route: Mapping[str, Any], live: Iterable[Mapping[str, Any]]) -> list[Shadow]:
    """The routes of ``live`` that would serve some request ``route`` matches in its place: on a
    Gateway both attach to, on a host both accept, with a match that wins by precedence or age.
    ``route`` carries its live ``creationTimestamp`` when it exists (else it is the youngest)."""
    meta = route["metadata"]
    me = (meta.get("namespace"), meta.get("name"))
    hosts = (route.get("spec") or {}).get("hostnames") or []
    found = []
    for other in live:
        other_meta = other["metadata"]
        if (other_meta.get("namespace"), other_meta.get("name")) == me or other_meta.get("deletionTimestamp"):
            continue
        gateway = _shared_gateway(route, other)
        if gateway is None or not hostnames_overlap(hosts, (other.get("spec") or {}).get("hostnames") or []):
            continue
        if any(matches_overlap(mine, theirs) and _wins(theirs, mine, other, route)
               for mine in _matches(route) for theirs in _matches(other)):
            found.append(Shadow(f"{other_meta.get('namespace')}/{other_meta.get('name')}", _owner(other), gateway))
    return sorted(found, key=lambda shadow: shadow.route)
