"""The model cache's contract: what the fetch Job is asked, where it writes, what it reports.

The operator renders a :class:`FetchRequest` into the Job's command (``ascend-llm fetch
--request-json ...``), reads :class:`FetchProgress` from the Job pod's ``GET /progress`` and its
termination message (:class:`FetchFailure`), and gates serving pods on the completion marker
(:func:`marker_path`, a :class:`CacheMarker`). The serving runtime finds the weights at
:func:`model_dir` and keeps compile artefacts under :func:`compile_cache_dir`. Like
:mod:`ascend_runtime.config`, this module imports only pydantic and the standard library, so
the operator can import it.

Layout under the cache root::

    <root>/models/<hub>/<org>/<name>/<revision>/          the snapshot (local_dir)
    <root>/models/<hub>/<org>/<name>/<revision>.complete.json   the marker, written last
    <root>/models/<hub>/<org>/<name>/<revision>.lock      the fetch Jobs' file lock
    <root>/compile/<key>/vllm/                            VLLM_CACHE_ROOT of one launch
    <root>/compile/<key>/torchair/                        TORCHAIR_CACHE_HOME of one launch

``<revision>`` is the requested revision with ``/`` spelled ``--`` (``refs/pr/1`` ->
``refs--pr--1``), or ``default`` when none was pinned. The marker sits beside the snapshot, not
in it, so the engine never sees it among the model's files.
"""

from __future__ import annotations

import enum
import fnmatch
import hashlib
import json
import os
import re
from datetime import datetime, timezone
from pathlib import PurePosixPath

from pydantic import BaseModel, ConfigDict, Field, field_validator
from pydantic.alias_generators import to_camel

__all__ = [
    "CLIENT_METADATA_DIR",
    "CacheMarker",
    "CompileCacheKey",
    "ContentHash",
    "DEFAULT_ALLOW_PATTERNS",
    "FetchExit",
    "FetchFailure",
    "FetchPhase",
    "FetchProgress",
    "FetchReason",
    "FetchRequest",
    "Hub",
    "PERMANENT_EXIT_CODES",
    "REMOTE_CODE_PATTERNS",
    "compile_cache_dir",
    "compile_cache_key",
    "file_hashes",
    "links_leaving",
    "lock_path",
    "matches",
    "snapshot_files",
    "marker_path",
    "model_dir",
    "repo_dir",
]

#: Bumped when the layout or the marker's meaning changes; a marker of another version is not ours.
#: 2: markers carry each file's sha256 (:attr:`CacheMarker.digests`), checked before reuse.
LAYOUT_VERSION = 2
#: Default port of the fetch Job's ``GET /progress`` (the runtime's port, so one probe port).
DEFAULT_PROGRESS_PORT = 8080
#: Where Kubernetes reads a container's termination message by default.
DEFAULT_TERMINATION_LOG = "/dev/termination-log"

#: What vLLM loads from a Hugging Face style repo: weights (safetensors only: pickled ``*.bin``
#: weights are neither fetched nor loaded), configs and tokenizers (``*.json``, SentencePiece
#: ``*.model``, ``*.tiktoken``, ``merges.txt`` / ``vocab.txt``), chat templates (``*.jinja``).
DEFAULT_ALLOW_PATTERNS: tuple[str, ...] = (
    "*.safetensors", "*.json", "*.model", "*.tiktoken", "*.txt", "*.jinja",
)
#: Added when the model runs remote code (``--trust-remote-code``): the repo's Python modules.
REMOTE_CODE_PATTERNS: tuple[str, ...] = ("*.py",)

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


class _Model(BaseModel):
    """camelCase on the wire, snake_case in Python (like :mod:`ascend_runtime.config`)."""

    model_config = ConfigDict(extra="forbid", alias_generator=to_camel, populate_by_name=True)


class Hub(str, enum.Enum):
    HUGGINGFACE = "huggingface"
    MODELSCOPE = "modelscope"


class FetchPhase(str, enum.Enum):
    PENDING = "Pending"
    DOWNLOADING = "Downloading"
    COMPLETE = "Complete"
    FAILED = "Failed"


class FetchReason(str, enum.Enum):
    """Why a fetch failed; the first three do not get better by retrying."""

    UNAUTHORIZED = "Unauthorized"  # token missing, wrong, or without access to a gated repo
    NOT_FOUND = "NotFound"  # no such repo, revision or file
    INVALID = "Invalid"  # a request the fetch command cannot use
    DISK_FULL = "DiskFull"  # the cache volume ran out of space (ENOSPC, EDQUOT)
    NETWORK = "Network"  # the hub or mirror could not be reached, timed out, or answered 5xx/429
    INTEGRITY = "Integrity"  # a file is not the content the hub lists, or a link leads out of the cache
    UNKNOWN = "Unknown"


class FetchExit(int, enum.Enum):
    """Exit codes of ``ascend-llm fetch``: one per reason, so a Job's ``podFailurePolicy`` can
    stop retrying on :data:`PERMANENT_EXIT_CODES` (``action: FailJob``, ``operator: In``)."""

    OK = 0
    UNKNOWN = 1
    INVALID = 2
    UNAUTHORIZED = 3
    NOT_FOUND = 4
    DISK_FULL = 5
    NETWORK = 6
    INTEGRITY = 7

    @classmethod
    def for_reason(cls, reason: FetchReason) -> FetchExit:
        return {
            FetchReason.UNAUTHORIZED: cls.UNAUTHORIZED, FetchReason.NOT_FOUND: cls.NOT_FOUND,
            FetchReason.INVALID: cls.INVALID, FetchReason.DISK_FULL: cls.DISK_FULL,
            FetchReason.NETWORK: cls.NETWORK, FetchReason.INTEGRITY: cls.INTEGRITY,
            FetchReason.UNKNOWN: cls.UNKNOWN,
        }[reason]


#: Retrying cannot fix these: a new token, repo id or request is needed.
PERMANENT_EXIT_CODES: tuple[int, ...] = tuple(
    int(code) for code in (FetchExit.INVALID, FetchExit.UNAUTHORIZED, FetchExit.NOT_FOUND)
)


def _split_repo(repo_id: str) -> tuple[str, str]:
    parts = repo_id.split("/")
    if len(parts) not in (1, 2) or not all(_NAME.match(part) and ".." not in part for part in parts):
        raise ValueError(
            f"repoId {repo_id!r} is not a hub repo id: use 'org/name' (letters, digits, '.', '_', '-')"
        )
    if len(parts) == 1:
        return "_", parts[0]  # an org-less repo id (legacy hub ids such as "gpt2")
    return parts[0], parts[1]


def _revision_slug(revision: str | None) -> str:
    if not revision:
        return "default"
    slug = revision.replace("/", "--")
    if not _NAME.match(slug) or ".." in slug:
        raise ValueError(
            f"revision {revision!r} is not a branch, tag or commit name (letters, digits, '.', '_', '-', '/')"
        )
    return slug


class FetchRequest(_Model):
    """What one fetch Job downloads. Tokens never travel in it: ``tokenEnv`` names the variable."""

    hub: Hub = Hub.HUGGINGFACE
    repo_id: str = Field(description="Hub repo id, org/name.")
    revision: str | None = Field(None, description="Branch, tag or commit; None: the hub's default branch.")
    cache_root: str = Field(description="Mount path of the cache volume in the Job's pod.")
    allow_patterns: list[str] | None = Field(
        None, min_length=1,
        description="Glob patterns of the files to fetch; None: DEFAULT_ALLOW_PATTERNS "
        "(+ *.py with trustRemoteCode).",
    )
    trust_remote_code: bool = Field(False, description="Also fetch the repo's Python modules (*.py).")
    endpoint: str | None = Field(
        None,
        description="Hub mirror: a URL for Hugging Face (HF_ENDPOINT, e.g. https://hf-mirror.com); a host or "
        "URL for ModelScope (MODELSCOPE_DOMAIN). None: the client's default or its own env variable.",
    )
    token_env: str | None = Field(
        None,
        description="Name of the env variable holding the hub token (from a Secret); None: HF_TOKEN for "
        "Hugging Face, MODELSCOPE_API_TOKEN for ModelScope, when set.",
    )

    @field_validator("repo_id")
    @classmethod
    def _repo(cls, value: str) -> str:
        _split_repo(value)
        return value

    @field_validator("revision")
    @classmethod
    def _rev(cls, value: str | None) -> str | None:
        _revision_slug(value)
        return value

    @field_validator("cache_root")
    @classmethod
    def _root(cls, value: str) -> str:
        if not value.startswith("/"):
            raise ValueError(f"cacheRoot {value!r} must be an absolute path (the volume's mount path)")
        return value

    def patterns(self) -> list[str]:
        """The allow patterns this request fetches with."""

        if self.allow_patterns is not None:
            return list(self.allow_patterns)
        return [*DEFAULT_ALLOW_PATTERNS, *(REMOTE_CODE_PATTERNS if self.trust_remote_code else ())]

    def command(self, progress_port: int = DEFAULT_PROGRESS_PORT) -> list[str]:
        """The fetch Job container's command for this request."""

        text = self.model_dump_json(by_alias=True, exclude_none=True)
        return ["ascend-llm", "fetch", "--request-json", text, "--progress-port", str(progress_port)]

    def default_token_env(self) -> str:
        return self.token_env or ("HF_TOKEN" if self.hub is Hub.HUGGINGFACE else "MODELSCOPE_API_TOKEN")

    @property
    def model_dir(self) -> PurePosixPath:
        return model_dir(self.cache_root, self.hub, self.repo_id, self.revision)

    @property
    def repo_dir(self) -> PurePosixPath:
        return repo_dir(self.cache_root, self.hub, self.repo_id)

    @property
    def marker_path(self) -> PurePosixPath:
        return marker_path(self.cache_root, self.hub, self.repo_id, self.revision)


def _revision_base(cache_root: str, hub: Hub | str, repo_id: str) -> PurePosixPath:
    org, name = _split_repo(repo_id)
    return PurePosixPath(cache_root) / "models" / Hub(hub).value / org / name


def repo_dir(cache_root: str, hub: Hub | str, repo_id: str) -> PurePosixPath:
    """The repo's directory: its snapshots, markers and locks, and nothing else. All a fetch of
    the repo writes, so the fetch's pod mounts only this directory of the cache writable."""

    return _revision_base(cache_root, hub, repo_id)


def model_dir(cache_root: str, hub: Hub | str, repo_id: str, revision: str | None) -> PurePosixPath:
    """The snapshot's directory: the engine's ``--model`` in serving pods."""

    return _revision_base(cache_root, hub, repo_id) / _revision_slug(revision)


def marker_path(cache_root: str, hub: Hub | str, repo_id: str, revision: str | None) -> PurePosixPath:
    """The completion marker, beside the snapshot; it exists only once the snapshot is whole."""

    return _revision_base(cache_root, hub, repo_id) / f"{_revision_slug(revision)}.complete.json"


def lock_path(cache_root: str, hub: Hub | str, repo_id: str, revision: str | None) -> PurePosixPath:
    """The file lock two fetch Jobs of the same model and revision take in turn."""

    return _revision_base(cache_root, hub, repo_id) / f"{_revision_slug(revision)}.lock"


#: The hub clients' own bookkeeping inside a snapshot (``.cache/huggingface/``), never model files.
CLIENT_METADATA_DIR = ".cache"


def matches(path: str, patterns: list[str] | tuple[str, ...]) -> bool:
    """Whether a repo path matches an allow pattern, as ``huggingface_hub`` matches them
    (``fnmatchcase``; a pattern ending in ``/`` matches everything below that folder)."""

    return any(fnmatch.fnmatchcase(path, p + "*" if p.endswith("/") else p) for p in patterns)


def snapshot_files(directory: str | os.PathLike[str],
                   patterns: list[str] | tuple[str, ...]) -> dict[str, int]:
    """Relative path -> size of the files under ``directory`` that match ``patterns``, the
    clients' metadata folder excluded; empty when the directory does not exist."""

    found: dict[str, int] = {}
    for parent, dirs, files in os.walk(directory):
        if os.path.samefile(parent, directory):
            dirs[:] = [d for d in dirs if d != CLIENT_METADATA_DIR]
        for name in files:
            full = os.path.join(parent, name)
            relative = os.path.relpath(full, directory).replace(os.sep, "/")
            if matches(relative, patterns):
                try:
                    found[relative] = os.stat(full).st_size
                except FileNotFoundError:
                    continue  # moved or removed while we walked
    return found


class ContentHash(str, enum.Enum):
    """How a hub names a file's content: what its listing gives to check a download against."""

    SHA256 = "sha256"  # Hugging Face LFS files (``lfs.sha256``); every ModelScope file
    GIT_SHA1 = "git-sha1"  # Hugging Face files kept in git: the blob id: sha1 of "blob <size>\0" + content


_CHUNK = 8 << 20


def file_hashes(path: str | os.PathLike[str]) -> dict[ContentHash, str]:
    """The file's sha256 and git blob sha1 (hex), from one read."""

    size = os.stat(path).st_size
    sha256, git = hashlib.sha256(), hashlib.sha1(f"blob {size}\0".encode())  # noqa: S324 (git's own id)
    with open(path, "rb") as stream:
        while chunk := stream.read(_CHUNK):
            sha256.update(chunk)
            git.update(chunk)
    return {ContentHash.SHA256: sha256.hexdigest(), ContentHash.GIT_SHA1: git.hexdigest()}


def links_leaving(directory: str | os.PathLike[str], root: str | os.PathLike[str] | None = None) -> list[str]:
    """Symbolic links at or under ``directory`` (the directory itself and, with ``root``, every
    folder from ``root`` down to it) whose target lies outside ``directory``: a planted link would
    make the engine read, or a fetch write, somewhere else."""

    top = os.path.realpath(directory)
    leaving: list[str] = []
    if root is not None:
        real_root = os.path.realpath(root)
        if top != real_root and not top.startswith(real_root + os.sep):
            leaving.append(f"{directory} -> {top}")
    for parent, dirs, files in os.walk(directory):
        for name in [*dirs, *files]:
            full = os.path.join(parent, name)
            if os.path.islink(full):
                target = os.path.realpath(full)
                if not target.startswith(top + os.sep):
                    leaving.append(f"{full} -> {target}")
    return leaving


class CacheMarker(_Model):
    """Written atomically (temporary file, then rename) when a snapshot is complete."""

    model_config = ConfigDict(extra="ignore", alias_generator=to_camel, populate_by_name=True)

    layout_version: int = LAYOUT_VERSION
    hub: Hub
    repo_id: str
    revision: str | None = None
    commit: str | None = Field(None, description="The commit the revision resolved to.")
    allow_patterns: list[str] = Field(default_factory=list)
    files: int = Field(ge=0, description="Files of the snapshot (the client's own metadata excluded).")
    total_bytes: int = Field(ge=0)
    digests: dict[str, str] = Field(
        default_factory=dict,
        description="Relative path -> sha256 (hex) of each file, checked against the hub's own hashes "
        "where its listing gives them.")
    completed_at: datetime

    @classmethod
    def now(cls, request: FetchRequest, commit: str | None, files: int, total_bytes: int,
            digests: dict[str, str] | None = None) -> CacheMarker:
        return cls(hub=request.hub, repo_id=request.repo_id, revision=request.revision, commit=commit,
                   allow_patterns=request.patterns(), files=files, total_bytes=total_bytes,
                   digests=dict(digests or {}), completed_at=datetime.now(timezone.utc))

    @classmethod
    def of_directory(cls, request: FetchRequest, commit: str | None,
                     directory: str | os.PathLike[str]) -> CacheMarker:
        """The marker of the snapshot now at ``directory``: its files, sizes and sha256 digests."""

        present = snapshot_files(directory, request.patterns())
        digests = {path: file_hashes(os.path.join(directory, path))[ContentHash.SHA256] for path in present}
        return cls.now(request, commit, len(present), sum(present.values()), digests)

    def mismatch(self, request: FetchRequest) -> str | None:
        """Why this marker does not answer ``request`` (None when it does)."""

        if self.layout_version != LAYOUT_VERSION:
            return f"marker layout version {self.layout_version}, this fetch writes {LAYOUT_VERSION}"
        for name, mine, theirs in (
            ("hub", self.hub, request.hub), ("repoId", self.repo_id, request.repo_id),
            ("revision", self.revision, request.revision),
            ("allowPatterns", sorted(self.allow_patterns), sorted(request.patterns())),
        ):
            if mine != theirs:
                return f"marker has {name} {mine!r}, the request {theirs!r}"
        return None

    def incomplete(self, directory: str | os.PathLike[str],
                   root: str | os.PathLike[str] | None = None) -> str | None:
        """Why the snapshot at ``directory`` is not what this marker says, by its files and sizes
        and its links (None when it agrees); ``root``: the cache root it must lie in."""

        leaving = links_leaving(directory, root)
        if leaving:
            return f"{directory} has links that leave it: {', '.join(leaving[:3])}"
        present = snapshot_files(directory, self.allow_patterns)
        files, size = len(present), sum(present.values())
        if files != self.files or size != self.total_bytes:
            return (f"{directory} holds {files} of the marker's {self.files} files, {size} of its "
                    f"{self.total_bytes} bytes")
        if self.digests and set(present) != set(self.digests):
            return f"{directory} holds other files than the marker lists"
        return None

    def corrupt(self, directory: str | os.PathLike[str],
                root: str | os.PathLike[str] | None = None) -> str | None:
        """Why the snapshot at ``directory`` is not the content this marker recorded: as
        :meth:`incomplete`, then every file's sha256 (None when all agree)."""

        why = self.incomplete(directory, root)
        if why is not None:
            return why
        if not self.digests:
            return "the marker records no digests (written before layout version 2)"
        for path, digest in sorted(self.digests.items()):
            actual = file_hashes(os.path.join(directory, path))[ContentHash.SHA256]
            if actual != digest:
                return f"{path} in {directory} has sha256 {actual}, the marker recorded {digest}"
        return None

    def to_json(self) -> str:
        return self.model_dump_json(by_alias=True)


class FetchProgress(_Model):
    """``GET /progress`` of a running fetch Job (camelCase JSON); the operator shows it in status."""

    phase: FetchPhase = FetchPhase.PENDING
    bytes_done: int = 0
    bytes_total: int | None = Field(None, description="From the hub's file listing; None until it is known.")
    files_done: int = 0
    files_total: int | None = None
    commit: str | None = None
    reason: FetchReason | None = None
    message: str | None = None


class FetchFailure(_Model):
    """The one-line JSON a failed fetch writes to its termination message file."""

    reason: FetchReason
    message: str


class CompileCacheKey(_Model):
    """What makes one launch's compiled graphs reusable by another: change any, get a new dir."""

    image: str | None = None
    model: str
    revision: str | None = Field(None, description="The resolved commit when known, else the revision.")
    vllm: str | None = None
    vllm_ascend: str | None = None
    torch: str | None = None
    torch_npu: str | None = None
    cann: str | None = None
    chip: str | None = None
    mode: str = Field(
        description="The launch's graph mode (each rung of the ladder compiles its own graphs)."
    )
    flags: list[str] = Field(default_factory=list, description="Engine argv that shapes the graphs.")
    env: dict[str, str] = Field(default_factory=dict, description="engine.env of the config.")
    namespace: str | None = Field(
        None, description="The resource's namespace: compiled kernels are never shared across tenants.")


def compile_cache_key(key: CompileCacheKey) -> str:
    """A stable 16-hex-digit digest of ``key`` (sha256 of its canonical JSON)."""

    canonical = json.dumps(key.model_dump(mode="json", by_alias=True), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()[:16]


def compile_cache_dir(cache_root: str, key: CompileCacheKey) -> PurePosixPath:
    """The directory one launch's compile caches live in (``vllm/`` and ``torchair/`` below it)."""

    return PurePosixPath(cache_root) / "compile" / compile_cache_key(key)
