"""What each resource's last full pass verified, so that a pass with nothing new skips the children.

A full pass builds every child and compares it with the live one, which at 1,000 resources was
most of the operator's CPU (bench/README.md). When a full pass finds every child as
built (nothing applied, pruned, refused or in conflict), it records a digest of what the build
read (:func:`inputs_digest`: the spec, annotations, generation and owner, the remembered state,
the autoscaler and routing choices, the settings) and the marks of the resource's children in the
watch cache (:meth:`ascend_operator.watchcache.WatchCache.marks`: a mark changes with any change
that is not status alone). The next pass with the same digest and marks cannot find anything to
apply or delete, so it goes straight to the status. A change to any input or any child makes the
next pass a full one again; resources with a model cache or hub adapters (whose passes observe
Jobs and claims) always run full passes.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ascend_operator.builders import ChildrenSummary, Remembered
from ascend_operator.k8s import ChildKind
from ascend_operator.watchcache import WatchCache


def inputs_digest(body: Mapping[str, Any], remembered: Remembered, choices: Sequence[object],
                  settings: object) -> bytes:
    """A digest of everything a build of ``body``'s children reads besides the watch cache."""

    meta = body.get("metadata") or {}
    parts = [body.get("spec"), meta.get("annotations"), meta.get("generation"), meta.get("uid"), meta.get("name"),
             remembered.remembered_mode, remembered.remembered_for, sorted(remembered.adapter_jobs_complete),
             sorted(remembered.adapters_served.items()), [str(choice) for choice in choices], id(settings)]
    text = json.dumps(parts, sort_keys=True, default=str, separators=(",", ":"))
    return hashlib.blake2b(text.encode(), digest_size=16).digest()


def children_marks(watch_cache: WatchCache, kinds: Sequence[ChildKind], namespace: str, label: str) -> int:
    """One number for the marks of every child of the resource the watch cache holds, of ``kinds``."""

    return hash(tuple(sorted((kind.kind, name, mark) for kind in kinds
                             for name, mark in watch_cache.marks(kind.kind, namespace, label).items())))


@dataclass(frozen=True)
class Verified:
    inputs: bytes
    marks: int
    summary: ChildrenSummary
    #: Kept so that the settings' id in the digest cannot be reused by another settings object.
    settings: object


class PassMemo:
    """Resource key -> what its last full pass verified (a few hundred bytes each)."""

    def __init__(self) -> None:
        self._verified: dict[str, Verified] = {}

    def __len__(self) -> int:
        return len(self._verified)

    def unchanged(self, key: str, inputs: bytes, marks: int) -> ChildrenSummary | None:
        """The summary of the children as last verified, when neither the inputs nor any child has
        changed since; else None (a full pass is due)."""

        verified = self._verified.get(key)
        if verified is None or verified.inputs != inputs or verified.marks != marks:
            return None
        return verified.summary

    def record(self, key: str, inputs: bytes, marks: int, summary: ChildrenSummary, settings: object) -> None:
        self._verified[key] = Verified(inputs, marks, summary, settings)

    def forget(self, key: str) -> None:
        self._verified.pop(key, None)
