"""``spec.model``: the weights' source (PVC, host path, Hugging Face, ModelScope) and the model cache."""

from __future__ import annotations

import enum
from typing import Annotated

from ascend_operator.api.base import QUANTITY_PATTERN, DnsSubdomain, SpecModel, SpecRule
from pydantic import Field, StringConstraints


# --------------------------------------------------------------------------------------------
# spec.model


#: An absolute path of non-empty segments: no ``//``, no trailing ``/`` (``.`` / ``..`` segments:
#: a CEL rule, RE2 has no look-ahead). No control characters either.
HOST_PATH_PATTERN = r"^(/[^/\x00-\x1f]+)+$"
#: A key of a Secret's or a ConfigMap's data, as the API server validates it.
DataKey = Annotated[str, StringConstraints(min_length=1, max_length=253, pattern=r"^[-._a-zA-Z0-9]+$")]


class SecretKeyRef(SpecModel):
    """A key of a Secret in the resource's namespace."""

    name: DnsSubdomain = Field(description="Name of the Secret in the resource's namespace.")
    key: DataKey = Field(description="Key in the Secret whose value is the token.")


class ConfigMapKeyRef(SpecModel):
    """A key of a ConfigMap in the resource's namespace."""

    name: DnsSubdomain = Field(description="Name of the ConfigMap in the resource's namespace.")
    key: DataKey = Field(description="Key in the ConfigMap whose value the variable gets.")


class EnvValueSource(SpecModel):
    """Where one engine environment variable's value comes from: a Secret key or a ConfigMap key."""

    secret_key_ref: SecretKeyRef | None = Field(
        None, description="A key of a Secret; the value is never written to the engine config or logged."
    )
    config_map_key_ref: ConfigMapKeyRef | None = Field(None, description="A key of a ConfigMap.")


#: A relative directory inside a volume: no leading '/', no empty segment, no control characters
#: ('.' and '..' segments: a CEL rule, RE2 has no look-ahead).
RELATIVE_DIR_PATTERN = r"^[^/\x00-\x1f]+(/[^/\x00-\x1f]+)*$"
RelativeDir = Annotated[str, StringConstraints(min_length=1, max_length=1024, pattern=RELATIVE_DIR_PATTERN)]


class PvcSource(SpecModel):
    """Weights on a PersistentVolumeClaim, mounted into the pod."""

    claim_name: DnsSubdomain = Field(
        description="Name of the PersistentVolumeClaim in the resource's namespace."
    )
    sub_path: RelativeDir | None = Field(
        None,
        description="Directory inside the claim holding the weights (relative, no '.' or '..' segment, no "
        "'//', no trailing '/'). Default: the claim's root.",
    )
    read_only: bool = Field(True, description="Mount the claim read-only. Default: true.")


class HostPathSource(SpecModel):
    """Weights in a directory on the node (pre-staged by the cluster admin)."""

    path: Annotated[str, StringConstraints(min_length=2, max_length=1024, pattern=HOST_PATH_PATTERN)] = Field(
        description=(
            "Absolute, normalised directory on the node holding the weights (no '.' or '..' segment, "
            "no '//', no trailing '/'); mounted read-only. Allowed only under a prefix the "
            "administrator lists (operator setting HOST_PATH_PREFIXES; default: none)."
        )
    )


#: A repository id on Hugging Face or ModelScope: ``org/name`` (or a legacy org-less ``name``).
HubRepoId = Annotated[
    str,
    StringConstraints(min_length=1, max_length=256, pattern=r"^[A-Za-z0-9][-._A-Za-z0-9]*(/[-._A-Za-z0-9]+)?$"),
]


class HubSource(SpecModel):
    """A model downloaded from a hub at start-up into the pod's model cache."""

    id: HubRepoId = Field(description="Repository id on the hub, for example Qwen/Qwen2.5-72B-Instruct.")


class CacheAccessMode(str, enum.Enum):
    READ_WRITE_MANY = "ReadWriteMany"
    READ_WRITE_ONCE = "ReadWriteOnce"
    READ_WRITE_ONCE_POD = "ReadWriteOncePod"


class CacheClaimSpec(SpecModel):
    """A PersistentVolumeClaim the operator creates for the model cache, named ``<name>-model-cache``."""

    size: Annotated[str, StringConstraints(max_length=64, pattern=QUANTITY_PATTERN)] = Field(
        description="Storage to request, for example 200Gi: the weights plus the compile caches."
    )
    storage_class_name: DnsSubdomain | None = Field(
        None, description="StorageClass of the claim. Default: the cluster's default class."
    )
    access_mode: CacheAccessMode = Field(
        CacheAccessMode.READ_WRITE_MANY,
        description=(
            "ReadWriteMany (default) lets every replica on every node mount the cache; with "
            "ReadWriteOnce all pods that mount it must run on one node."
        ),
    )
    delete_with_resource: bool = Field(
        False,
        description=(
            "Delete the claim (and the cached weights) with the resource. Default: false, the claim "
            "is kept for the next resource or rollout and must be deleted by hand."
        ),
    )


class ModelCacheSpec(SpecModel):
    """Where hub weights and compile caches live between pods: exactly one of create, claimName
    and hostPath. Hub weights are downloaded once per model and revision by a Job; serving pods
    start only after the download is complete and mount the weights read-only."""

    create: CacheClaimSpec | None = Field(None, description="A claim the operator creates and keeps.")
    claim_name: DnsSubdomain | None = Field(
        None, description="An existing PersistentVolumeClaim in the namespace (another resource's cache, say)."
    )
    host_path: Annotated[str, StringConstraints(min_length=2, max_length=1024, pattern=HOST_PATH_PATTERN)] | None = (
        Field(
            None,
            description=(
                "A directory on each node, for clusters without ReadWriteMany storage: every node "
                "downloads once (an init container of the serving pods). Allowed only under a node cache "
                "prefix the administrator lists (operator setting CACHE_HOST_PATH_PREFIXES); absolute and "
                "normalised (no '.' or '..' segment)."
            ),
        )
    )
    compile_cache: bool = Field(
        True,
        description=(
            "Keep vLLM's and TorchAir's compile caches on the cache volume, keyed by image, model, "
            "revision, versions, graph mode and graph flags, so restarts and new pods skip compilation."
        ),
    )

    def kind(self) -> str:
        """``create``, ``claimName`` or ``hostPath``: the one that is set."""
        return "create" if self.create is not None else "claimName" if self.claim_name is not None else "hostPath"


#: A branch, tag or commit as the hubs name them (and the model cache can lay out on disk).
REVISION_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._/-]*$"
Revision = Annotated[str, StringConstraints(min_length=1, max_length=256, pattern=REVISION_PATTERN)]
#: The revision rule CEL adds to the pattern (RE2 has no look-ahead for "no '..'").
REVISION_RULE = SpecRule(
    cel="!has(self.revision) || !self.revision.contains('..')",
    message="revision must not contain '..'; name a branch, tag or commit",
    field_path=".revision",
    holds=lambda source: source.revision is None or ".." not in source.revision,
)


class ModelSpec(SpecModel):
    """The model to serve: exactly one source, plus how it is served."""

    pvc: PvcSource | None = Field(None, description="Weights on a PersistentVolumeClaim.")
    host_path: HostPathSource | None = Field(None, description="Weights in a directory on the node.")
    hugging_face: HubSource | None = Field(None, description="Download from Hugging Face by repository id.")
    model_scope: HubSource | None = Field(
        None, description="Download from ModelScope by repository id (sets VLLM_USE_MODELSCOPE=true)."
    )
    revision: Revision | None = Field(
        None,
        description=(
            "Model revision (branch, tag or commit) for hub sources: letters, digits, '.', '_', '-' and '/', "
            "starting with a letter or digit, no '..'. Default: the hub's default branch."
        ),
    )
    served_name: Annotated[str, StringConstraints(min_length=1, max_length=256)] | None = Field(
        None, description="Name clients use in the OpenAI API. Default: the hub id or the resource name."
    )
    token_secret_ref: SecretKeyRef | None = Field(
        None,
        description=(
            "Secret key holding the hub token (HF_TOKEN or MODELSCOPE_API_TOKEN). A reference only: "
            "the token never appears in the resource or the engine config."
        ),
    )
    trust_remote_code: bool = Field(
        False, description="Pass --trust-remote-code to the engine. Default: false."
    )
    cache: ModelCacheSpec | None = Field(
        None,
        description=(
            "Keep the weights (hub sources) and the compile caches on a volume that outlives pods. "
            "Default: hub weights go to an emptyDir per pod and are downloaded by every pod."
        ),
    )
    size_gi_b: Annotated[float, Field(gt=0, le=4096)] | None = Field(
        None,
        alias="sizeGiB",
        description=(
            "Approximate size of the weights in GiB; sizes the start-up probe budget. "
            "Default: the operator's assumption (64 GiB)."
        ),
    )

    def sources(self) -> list[str]:
        """The camelCase names of the sources that are set."""
        return [
            alias
            for alias, value in (
                ("pvc", self.pvc),
                ("hostPath", self.host_path),
                ("huggingFace", self.hugging_face),
                ("modelScope", self.model_scope),
            )
            if value is not None
        ]
