"""Deterministic names of the children, always valid, never longer than Kubernetes allows.

Every child name is a DNS-1035 label (``[a-z]([-a-z0-9]*[a-z0-9])?``, at most 63 characters), the
strictest of the rules involved: Services need DNS-1035, label values need 63 characters, and
Deployments put their name into pod names and labels. A resource name (a DNS-1123 subdomain of up
to 253 characters, which may contain dots or start with a digit) is used as it is when it fits;
otherwise it is slugged and cut, with 8 hex characters of its SHA-256 appended, so two different
long names never share a child name (kubespawner's ``safe_slug`` approach).
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

MAX_NAME_LENGTH = 63
#: LeaderWorkerSet names are kept shorter: LWS names the leader StatefulSet after it and each
#: group's worker StatefulSet ``<lws>-<group>``, whose pods ``<lws>-<group>-<worker>`` get a
#: ``controller-revision-hash`` label ``<statefulset>-<10 hex>`` that must fit 63 characters;
#: 40 leaves room for group and worker indices up to 9999 and the hash.
MAX_LWS_NAME_LENGTH = 40
HASH_LENGTH = 8
_DNS_1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
_INVALID = re.compile(r"[^a-z0-9-]+")
#: Prefix for names that start with a digit (DNS-1035 labels must start with a letter).
DIGIT_PREFIX = "x-"


def is_dns1035_label(value: str) -> bool:
    """Whether ``value`` is a valid DNS-1035 label."""
    return len(value) <= MAX_NAME_LENGTH and bool(_DNS_1035.match(value))


def _short_hash(value: str) -> str:
    return hashlib.sha256(value.encode("utf-8")).hexdigest()[:HASH_LENGTH]


def safe_name(base: str, suffix: str = "", max_length: int = MAX_NAME_LENGTH) -> str:
    """``base`` + ``-suffix`` as a DNS-1035 label of at most ``max_length`` characters.

    Returned unchanged when already valid; otherwise slugged, cut, and tagged with a hash of
    ``base`` so distinct bases stay distinct. ``suffix`` must itself be a short valid label part.
    """
    if not 2 * HASH_LENGTH <= max_length <= MAX_NAME_LENGTH:
        raise ValueError(f"max_length {max_length} must be between {2 * HASH_LENGTH} and {MAX_NAME_LENGTH}")
    if suffix and not re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", suffix):
        raise ValueError(f"suffix {suffix!r} must be lower-case letters, digits and inner dashes")
    if len(suffix) > 20:
        raise ValueError(f"suffix {suffix!r} is longer than 20 characters")
    tail = f"-{suffix}" if suffix else ""
    plain = f"{base}{tail}"
    if is_dns1035_label(plain) and len(plain) <= max_length:
        return plain
    slug = _INVALID.sub("-", base.lower()).strip("-")
    if not slug or not slug[0].isalpha():
        slug = DIGIT_PREFIX + slug
    room = max_length - len(tail) - HASH_LENGTH - 1
    slug = slug[:room].rstrip("-")
    return f"{slug}-{_short_hash(base)}{tail}"


def label_value(value: str) -> str:
    """``value`` as a label value (at most 63 characters, alphanumeric at both ends)."""
    if len(value) <= MAX_NAME_LENGTH and re.fullmatch(r"([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?", value):
        return value
    return safe_name(value)


@dataclass(frozen=True)
class ChildNames:
    """Names of the children of one resource (distinct kinds may share a name).

    The LeaderWorkerSet alone gets its own name (``<name>-lws``): LWS creates a headless
    Service named after the LeaderWorkerSet (its pods' DNS subdomain, behind
    ``LWS_LEADER_ADDRESS``), which must not collide with the operator's Service ``<name>``.
    """

    deployment: str
    service: str
    configmap: str
    pdb: str
    container: str = "engine"
    leaderworkerset: str = ""
    hpa: str = ""
    scaled_object: str = ""
    #: The headless Service of the runtime port (probes' /state, /metrics), apart from the API's.
    runtime_service: str = ""
    #: The ConfigMap of the LoRA adapter set (apart from the engine config: it changes without a rollout).
    adapters: str = ""

    @classmethod
    def for_resource(cls, name: str) -> ChildNames:
        """The children's names for the resource ``name``."""
        base = safe_name(name)
        return cls(
            deployment=base,
            service=base,
            configmap=safe_name(name, "config"),
            pdb=base,
            leaderworkerset=safe_name(name, "lws", MAX_LWS_NAME_LENGTH),
            hpa=base,
            scaled_object=base,
            runtime_service=safe_name(name, "runtime"),
            adapters=safe_name(name, "adapters"),
        )

    @classmethod
    def for_role(cls, name: str, role: str) -> ChildNames:
        """The children's names of one disaggregation role (``prefill`` / ``decode``) of resource
        ``name``: its workload, ConfigMap, Service and autoscaler get the role as a suffix; the
        runtime Service is the resource's (it selects every engine pod)."""
        base = safe_name(name, role)
        return cls(
            deployment=base,
            service=base,
            configmap=safe_name(name, f"{role}-config"),
            pdb=base,
            leaderworkerset=safe_name(name, f"{role}-lws", MAX_LWS_NAME_LENGTH),
            hpa=base,
            scaled_object=base,
            runtime_service=safe_name(name, "runtime"),
            adapters=safe_name(name, "adapters"),
        )
