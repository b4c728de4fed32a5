"""`ascend-llm fetch`: the model cache Job. Download one model revision once, then mark it complete.

The hubs' own clients do the download (``huggingface_hub.snapshot_download``; ModelScope's
``snapshot_download``), into :func:`~ascend_runtime.cachelayout.model_dir` on the cache volume.
A second Job for the same model and revision waits on the file lock, finds the marker and
exits 0 without a request to the hub. While it runs, ``GET /progress`` on the progress port
answers :class:`~ascend_runtime.cachelayout.FetchProgress` (bytes from the hub's file listing
and from the files on disk). A failure is classified (:func:`classify`), written as one line of
JSON to the termination message file (secrets masked) and turned into its exit code
(:class:`~ascend_runtime.cachelayout.FetchExit`); the Job's backoff does the retrying.
"""

from __future__ import annotations

import argparse
import errno
import http.server
import json
import logging
import os
import sys
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from pydantic import ValidationError

from ascend_runtime import redact
from ascend_runtime.cachelayout import (
    CLIENT_METADATA_DIR,
    DEFAULT_PROGRESS_PORT,
    DEFAULT_TERMINATION_LOG,
    CacheMarker,
    ContentHash,
    FetchExit,
    FetchFailure,
    FetchPhase,
    FetchProgress,
    FetchReason,
    FetchRequest,
    Hub,
    file_hashes,
    links_leaving,
    lock_path,
    matches,
    snapshot_files,
)

log = logging.getLogger(__name__)

#: The ModelScope client the fetch is written and tested against (pyproject's ``modelscope`` extra).
MODELSCOPE_REQUIREMENT = "modelscope>=1.40"
#: Seconds between polls of the bytes on disk while downloading.
POLL_S = 1.0
#: Characters of an error message kept in the termination message (Kubernetes keeps 4096 bytes).
MESSAGE_LIMIT = 1000
#: Exception class names (anywhere in an error's MRO) that mean the hub was not reachable.
_NETWORK_CLASSES = {"ConnectError", "ConnectTimeout", "TimeoutException", "TransportError", "NetworkError",
                    "ConnectionError", "Timeout", "ReadTimeout", "ProxyError", "LocalEntryNotFoundError"}
_NOT_FOUND_CLASSES = {"RepositoryNotFoundError", "RevisionNotFoundError", "RemoteEntryNotFoundError",
                      "EntryNotFoundError", "NotExistError", "FileNotExistError", "NoMatchingFilesError"}
_UNAUTHORIZED_CLASSES = {"GatedRepoError", "NotLoginException", "DisabledRepoError",
                         "AuthenticationError", "PermissionDeniedError"}


class MissingClientError(RuntimeError):
    """The hub's client package is not installed in this image."""


class NoMatchingFilesError(LookupError):
    """The revision has no file that the allow patterns match."""


class IntegrityError(OSError):
    """A downloaded file is not the content the hub lists, or the cache has a link leading out."""


# ---------------------------------------------------------------------------------------------
# Classification
# ---------------------------------------------------------------------------------------------

def _chain(error: BaseException):
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        # modelscope_hub's FileDownloadError carries the per-file errors beside it, not as a cause.
        failed = getattr(current, "failed_files", None)
        if isinstance(failed, dict):
            for item in failed.values():
                if isinstance(item, BaseException):
                    yield from _chain(item)
        current = current.__cause__ or current.__context__


def _status(error: BaseException) -> int | None:
    response = getattr(error, "response", None)
    # modelscope_hub's errors carry the status themselves (their response may be None).
    status = getattr(response, "status_code", getattr(error, "status_code", None))
    return status if isinstance(status, int) else None


def classify(error: BaseException) -> FetchReason:
    """The reason a fetch failed, from the error and the errors it was raised from."""

    for item in _chain(error):
        names = {cls.__name__ for cls in type(item).__mro__}
        if isinstance(item, OSError) and item.errno in (errno.ENOSPC, errno.EDQUOT):
            return FetchReason.DISK_FULL
        if isinstance(item, (ValidationError, MissingClientError)):
            return FetchReason.INVALID
        if isinstance(item, IntegrityError):
            return FetchReason.INTEGRITY
        if names & _UNAUTHORIZED_CLASSES:  # GatedRepoError is a RepositoryNotFoundError: first
            return FetchReason.UNAUTHORIZED
        status = _status(item)
        if status in (401, 403) and not names & _NOT_FOUND_CLASSES:
            return FetchReason.UNAUTHORIZED
        if names & _NOT_FOUND_CLASSES or status == 404:
            return FetchReason.NOT_FOUND
        if status is not None and (status >= 500 or status == 429):
            return FetchReason.NETWORK
        if names & _NETWORK_CLASSES or isinstance(item, (ConnectionError, TimeoutError)):
            return FetchReason.NETWORK
    return FetchReason.UNKNOWN


def describe(error: BaseException) -> str:
    text = " ".join(str(error).split()) or type(error).__name__
    return f"{type(error).__name__}: {text}"[:MESSAGE_LIMIT]


# ---------------------------------------------------------------------------------------------
# Progress
# ---------------------------------------------------------------------------------------------

class Progress:
    """The :class:`FetchProgress` of this fetch, shared by the fetch and the HTTP thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._value = FetchProgress()

    def get(self) -> FetchProgress:
        with self._lock:
            return self._value.model_copy()

    def update(self, **changes) -> None:
        with self._lock:
            self._value = self._value.model_copy(update=changes)


class ProgressServer:
    """``GET /progress`` (JSON :class:`FetchProgress`) on a daemon thread."""

    def __init__(self, progress: Progress, host: str, port: int) -> None:
        owner = progress

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
                if self.path.split("?")[0] != "/progress":
                    self.send_error(404, "only GET /progress is served here")
                    return
                body = owner.get().model_dump_json(by_alias=True).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *_: object) -> None:  # the operator polls; no log line per poll
                return

        self.httpd = http.server.ThreadingHTTPServer((host, port), Handler)
        self.port = self.httpd.server_address[1]
        self._thread = threading.Thread(target=self.httpd.serve_forever, name="progress", daemon=True)

    def __enter__(self) -> ProgressServer:
        self._thread.start()
        log.info("progress on port %d (GET /progress)", self.port)
        return self

    def __exit__(self, *_: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


class DiskPoller:
    """Counts the bytes on disk under the snapshot: finished files plus partial downloads
    (``*.incomplete``)."""

    def __init__(self, directory: Path, expected: dict[str, int], progress: Progress) -> None:
        self.directory = directory
        self.expected = expected
        self.progress = progress
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="disk-poller", daemon=True)

    def measure(self) -> tuple[int, int]:
        """(bytes on disk, expected files complete), the bytes capped at the expected total."""

        present = snapshot_files(self.directory, list(self.expected))
        done = [path for path, size in present.items() if self.expected.get(path) == size]
        partial = 0
        # huggingface_hub keeps partial files under the metadata folder, ModelScope beside the target.
        for parent, _, files in os.walk(self.directory):
            for name in files:
                if name.endswith(".incomplete"):
                    try:
                        partial += os.stat(os.path.join(parent, name)).st_size
                    except FileNotFoundError:
                        continue
        total = sum(self.expected.values())
        return min(sum(self.expected[path] for path in done) + partial, total), len(done)

    def _run(self) -> None:
        while not self._stop.wait(POLL_S):
            self.publish()

    def publish(self) -> None:
        done, files = self.measure()
        self.progress.update(bytes_done=done, files_done=files)

    def __enter__(self) -> DiskPoller:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()
        self.publish()


# ---------------------------------------------------------------------------------------------
# Hub clients
# ---------------------------------------------------------------------------------------------

@dataclass
class Listing:
    """The files a revision holds that the request fetches, and the commit it resolved to;
    ``hashes``: each file's content hash as the hub lists it, where it does."""

    commit: str | None
    files: dict[str, int]
    hashes: dict[str, tuple[ContentHash, str]] = field(default_factory=dict)

    def check(self, directory: Path) -> dict[str, str]:
        """Each listed file's sha256 in ``directory``; raises :class:`IntegrityError` for a file
        whose content is not what the hub lists."""

        digests: dict[str, str] = {}
        for path in sorted(self.files):
            actual = file_hashes(directory / path)
            digests[path] = actual[ContentHash.SHA256]
            expected = self.hashes.get(path)
            if expected is not None and actual[expected[0]] != expected[1].lower():
                raise IntegrityError(f"{path}: {expected[0].value} {actual[expected[0]]}, the hub lists "
                                     f"{expected[1]}; the download is corrupt or was altered")
        return digests

    def discard_altered(self, directory: Path) -> list[str]:
        """Delete the files in ``directory`` that are not the content the hub lists, with the
        client's record of them: ``huggingface_hub`` keeps a local file whose record matches the
        commit without reading it, so an altered file would never be downloaded again."""

        removed: list[str] = []
        for path, (kind, expected) in sorted(self.hashes.items()):
            target = directory / path
            if not target.is_file() or target.is_symlink():
                continue
            if file_hashes(target)[kind] != expected.lower():
                target.unlink()
                for record in (directory / CLIENT_METADATA_DIR).glob(f"**/{path}.*"):
                    record.unlink(missing_ok=True)
                removed.append(path)
        return removed


class HubClient(Protocol):
    def listing(self) -> Listing: ...
    def download(self, listing: Listing, local_dir: Path) -> None: ...


class HuggingFaceClient:
    """``huggingface_hub``: the file listing with sizes, then ``snapshot_download`` at that commit."""

    def __init__(self, request: FetchRequest, token: str | None) -> None:
        try:
            import huggingface_hub
        except ImportError as error:
            raise MissingClientError(
                "hub huggingface needs the huggingface_hub package in the fetch image "
                "(pip install huggingface_hub)"
            ) from error
        self.hub = huggingface_hub
        self.request = request
        self.token = token
        self.endpoint = request.endpoint  # None: huggingface_hub reads HF_ENDPOINT itself

    def listing(self) -> Listing:
        api = self.hub.HfApi(endpoint=self.endpoint, token=self.token)
        info = api.model_info(self.request.repo_id, revision=self.request.revision, files_metadata=True)
        patterns = self.request.patterns()
        siblings = [s for s in info.siblings or [] if matches(s.rfilename, patterns)]
        hashes: dict[str, tuple[ContentHash, str]] = {}
        for sibling in siblings:
            # LFS files: the content's sha256; files kept in git: the git blob id.
            lfs_sha256 = (sibling.lfs or {}).get("sha256")  # BlobLfsInfo is a dict too
            if lfs_sha256:
                hashes[sibling.rfilename] = (ContentHash.SHA256, lfs_sha256)
            elif sibling.blob_id:
                hashes[sibling.rfilename] = (ContentHash.GIT_SHA1, sibling.blob_id)
        return Listing(commit=info.sha, files={s.rfilename: int(s.size or 0) for s in siblings}, hashes=hashes)

    def download(self, listing: Listing, local_dir: Path) -> None:
        # At the listed commit: a branch that moves during the download cannot mix two revisions.
        self.hub.snapshot_download(
            self.request.repo_id, revision=listing.commit or self.request.revision, local_dir=str(local_dir),
            allow_patterns=self.request.patterns(), token=self.token, endpoint=self.endpoint,
        )


class ModelScopeClient:
    """ModelScope: the file listing with sizes (``modelscope_hub``'s ``HubApi.list_repo_files``,
    the client the ``modelscope`` package delegates to), then ``modelscope``'s ``snapshot_download``.

    ``endpoint`` is passed to both as ``endpoint=`` (a bare host gets ``https://``); absent, the
    client reads ``MODELSCOPE_ENDPOINT`` or ``MODELSCOPE_DOMAIN`` itself. The token goes in as
    ``token=`` (no ``login()``: that would store it under ``~/.modelscope``).
    """

    def __init__(self, request: FetchRequest, token: str | None) -> None:
        try:
            from modelscope.hub.snapshot_download import snapshot_download
            from modelscope_hub.api import HubApi
        except ImportError as error:
            raise MissingClientError(
                f"hub modelscope needs the modelscope package, {MODELSCOPE_REQUIREMENT} (it brings "
                f"modelscope-hub), in the fetch image (pip install '{MODELSCOPE_REQUIREMENT}'): {error}"
            ) from error
        self.request = request
        self.token = token
        self.endpoint = request.endpoint
        self.api = HubApi(token=token, endpoint=self.endpoint)
        self.snapshot_download = snapshot_download

    def listing(self) -> Listing:
        entries = self.api.list_repo_files(self.request.repo_id, "model", revision=self.request.revision,
                                           recursive=True)
        patterns = self.request.patterns()
        kept = [e for e in entries if e.type != "tree" and matches(e.path, patterns)]
        hashes = {e.path: (ContentHash.SHA256, e.sha256) for e in kept if getattr(e, "sha256", None)}
        # ModelScope's listing names no commit of the revision: the marker keeps the requested one.
        return Listing(commit=self.request.revision, files={e.path: int(e.size or 0) for e in kept},
                       hashes=hashes)

    def download(self, listing: Listing, local_dir: Path) -> None:
        # The client's file locks go below the snapshot's metadata folder, not under $HOME.
        self.snapshot_download(
            self.request.repo_id, revision=self.request.revision, local_dir=str(local_dir),
            cache_dir=str(local_dir / CLIENT_METADATA_DIR / "modelscope"),
            allow_patterns=self.request.patterns(), token=self.token, endpoint=self.endpoint,
        )


def make_client(request: FetchRequest, token: str | None) -> HubClient:
    if request.hub is Hub.MODELSCOPE:
        return ModelScopeClient(request, token)
    return HuggingFaceClient(request, token)


# ---------------------------------------------------------------------------------------------
# The fetch
# ---------------------------------------------------------------------------------------------

@dataclass
class FetchOptions:
    progress_host: str = "0.0.0.0"
    progress_port: int = DEFAULT_PROGRESS_PORT
    termination_log: str = DEFAULT_TERMINATION_LOG


def cached(request: FetchRequest) -> str | None:
    """Why the cache does not hold ``request`` yet (None when the marker and the files agree,
    every file's sha256 included: a marker alone is never trusted)."""

    path = Path(request.marker_path)
    try:
        marker = CacheMarker.model_validate_json(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return f"no marker at {path}"
    except (OSError, ValueError) as error:
        return f"marker {path} unreadable: {error}"
    return marker.mismatch(request) or marker.corrupt(request.model_dir, request.cache_root)


def refuse_links(request: FetchRequest) -> None:
    """Raise :class:`IntegrityError` where a link in the cache would send the fetch's writes out
    of the snapshot (a planted ``org`` or revision folder, or a file linked elsewhere)."""

    root, directory = Path(request.cache_root), Path(request.model_dir)
    while not directory.exists() and directory != root:
        directory = directory.parent  # the nearest folder that exists: what a mkdir would go through
    leaving = links_leaving(directory, root) if directory.exists() else []
    if leaving:
        raise IntegrityError(f"the model cache has links that leave it: {', '.join(leaving[:3])}; "
                             "remove them (nothing in the cache is a link)")


def write_marker(request: FetchRequest, marker: CacheMarker) -> None:
    path = Path(request.marker_path)
    partial = path.with_name(path.name + ".tmp")
    with open(partial, "w", encoding="utf-8") as stream:
        stream.write(marker.to_json())
        stream.flush()
        os.fsync(stream.fileno())
    os.replace(partial, path)  # a Job killed mid-write leaves no marker, never a partial one


class Fetcher:
    """One fetch: check, lock, check again, list, download, verify, mark."""

    def __init__(self, request: FetchRequest, options: FetchOptions,
                 env: Mapping[str, str] | None = None) -> None:
        self.request = request
        self.options = options
        self.env = os.environ if env is None else env
        self.progress = Progress()
        self.redactor = redact.Redactor.from_env({**self.env, redact.REDACT_ENV: ",".join(
            filter(None, [self.env.get(redact.REDACT_ENV, ""), request.default_token_env()]))})
        self.server: ProgressServer | None = None

    def run(self) -> FetchExit:
        try:
            options = self.options
            with ProgressServer(self.progress, options.progress_host, options.progress_port) as server:
                self.server = server
                return self._fetch()
        except Exception as error:  # noqa: BLE001 (every failure becomes a reason and an exit code)
            return self.fail(error)

    def _fetch(self) -> FetchExit:
        request = self.request
        refuse_links(request)
        if cached(request) is None:
            return self._already()
        Path(request.model_dir).parent.mkdir(parents=True, exist_ok=True)
        refuse_links(request)
        from filelock import FileLock  # huggingface_hub's own dependency

        with FileLock(str(lock_path(request.cache_root, request.hub, request.repo_id, request.revision))):
            why = cached(request)  # another Job may have finished while we waited
            if why is None:
                return self._already()
            log.info("fetching %s %s@%s into %s (%s)", request.hub.value, request.repo_id,
                     request.revision or "default", request.model_dir, why)
            token = self.env.get(request.default_token_env()) or None
            client = make_client(request, token)
            listing = client.listing()
            if not listing.files:
                raise NoMatchingFilesError(
                    f"{request.repo_id}@{request.revision or 'default'} has no file matching allowPatterns "
                    f"{request.patterns()}; list the files the engine loads (pickled weights: '*.bin')")
            self.progress.update(phase=FetchPhase.DOWNLOADING, commit=listing.commit,
                                 bytes_total=sum(listing.files.values()), files_total=len(listing.files))
            local_dir = Path(request.model_dir)
            local_dir.mkdir(parents=True, exist_ok=True)
            altered = listing.discard_altered(local_dir)
            if altered:
                log.warning("discarded %d cached files that are not the hub's: %s", len(altered),
                            ", ".join(altered[:5]))
            with DiskPoller(local_dir, listing.files, self.progress):
                client.download(listing, local_dir)
            refuse_links(request)
            present = snapshot_files(local_dir, request.patterns())
            missing = sorted(path for path, size in listing.files.items() if present.get(path) != size)
            if missing:
                raise OSError(f"the download ended without {len(missing)} listed files: "
                              f"{', '.join(missing[:5])}")
            digests = Listing(listing.commit, {path: present[path] for path in present},
                              listing.hashes).check(local_dir)
            marker = CacheMarker.now(request, listing.commit, len(present), sum(present.values()), digests)
            write_marker(request, marker)
        self.progress.update(phase=FetchPhase.COMPLETE)
        log.info("cached %d files, %d bytes, commit %s: %s", marker.files, marker.total_bytes, marker.commit,
                 request.marker_path)
        return FetchExit.OK

    def _already(self) -> FetchExit:
        marker = CacheMarker.model_validate_json(Path(self.request.marker_path).read_text(encoding="utf-8"))
        self.progress.update(phase=FetchPhase.COMPLETE, bytes_done=marker.total_bytes,
                             bytes_total=marker.total_bytes, files_done=marker.files,
                             files_total=marker.files,
                             commit=marker.commit)
        print(f"already cached: {self.request.marker_path} (commit {marker.commit})", flush=True)
        return FetchExit.OK

    def fail(self, error: BaseException) -> FetchExit:
        reason = classify(error)
        message = self.redactor.text(describe(error))
        self.progress.update(phase=FetchPhase.FAILED, reason=reason, message=message)
        log.error("fetch failed (%s): %s", reason.value, message)
        write_termination_message(self.options.termination_log, FetchFailure(reason=reason, message=message))
        return FetchExit.for_reason(reason)


def write_termination_message(path: str, failure: FetchFailure) -> None:
    try:
        with open(path, "w", encoding="utf-8") as stream:
            stream.write(failure.model_dump_json(by_alias=True) + "\n")
    except OSError as error:  # not in a pod, or a read-only path: the log line still says it
        log.warning("cannot write the termination message to %s: %s", path, error.strerror)


# ---------------------------------------------------------------------------------------------
# The command
# ---------------------------------------------------------------------------------------------

def run_from_args(args: argparse.Namespace) -> int:
    logging.basicConfig(level=os.environ.get("ASCEND_LLM_LOG_LEVEL", "INFO").upper(), stream=sys.stderr,
                        format="%(asctime)s ascend-llm fetch %(levelname)s %(name)s: %(message)s")
    redact.install()
    options = FetchOptions(args.progress_host, args.progress_port, args.termination_log)
    text = args.request_json if args.request_json is not None else os.environ.get("ASCEND_LLM_FETCH_REQUEST")
    try:
        if not text:
            raise ValueError("give the request: --request-json '<FetchRequest JSON>' "
                             "or $ASCEND_LLM_FETCH_REQUEST")
        request = FetchRequest.model_validate(json.loads(text))
    except (ValueError, ValidationError) as error:  # JSONDecodeError is a ValueError
        detail = error
        if isinstance(error, ValidationError):
            detail = ValueError("; ".join(f"{'.'.join(map(str, e['loc'])) or 'request'}: {e['msg']}"
                                          for e in error.errors()))
        message = f"invalid fetch request: {detail}"[:MESSAGE_LIMIT]
        failure = FetchFailure(reason=FetchReason.INVALID, message=message)
        print(f"ascend-llm fetch: {failure.message}", file=sys.stderr)
        write_termination_message(options.termination_log, failure)
        return int(FetchExit.INVALID)
    started = time.monotonic()
    code = Fetcher(request, options).run()
    log.info("fetch ended with %s in %.1f s", code.name, time.monotonic() - started)
    return int(code)
