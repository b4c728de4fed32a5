"""A local Hugging Face hub: the endpoints ``huggingface_hub.snapshot_download`` (2.x) calls.

Serves repos from memory over HTTP on 127.0.0.1 (or another address: the real-node tier serves
its pods from the host's side of the node's link), so the real download code runs with no network:

- ``GET /api/models/{repo}`` and ``GET /api/models/{repo}/revision/{rev}``: model info (``sha``,
  ``siblings``; with ``?blobs=True`` each sibling has its ``size``), what ``HfApi.model_info``
  and ``repo_info`` read.
- ``GET /api/models/{repo}/tree/{rev}``: the recursive file listing (``type``, ``path``, ``size``,
  ``oid``), what ``list_repo_tree`` reads.
- ``HEAD`` / ``GET /{repo}/resolve/{rev}/{path}``: ``X-Repo-Commit``, ``ETag`` and
  ``Content-Length`` (what ``get_hf_file_metadata`` reads), the bytes (``Range: bytes=N-`` too,
  which huggingface_hub sends to resume a partial file).

Errors as the real hub sends them (``huggingface_hub.utils.hf_raise_for_status`` maps them):
unknown repo 404 ``X-Error-Code: RepoNotFound``; unknown revision 404 ``RevisionNotFound``; a
wrong token 401 ``X-Error-Message: Invalid credentials in Authorization header``; no token for a
repo that needs one 401 ``X-Error-Code: GatedRepo``. Every request is recorded
(:attr:`FakeHub.requests`) so a test can count them. :meth:`FakeHub.hold` makes the GET of one
file send half of it, then wait until the test releases it (a download in progress).
"""

from __future__ import annotations

import hashlib
import http.server
import json
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Self
from urllib.parse import parse_qs, unquote, urlparse


#: Files the real hub keeps in LFS (their listing gives ``lfs.sha256``); others are kept in git.
LFS_SUFFIXES = (".safetensors", ".bin", ".gguf")


def git_blob_id(data: bytes) -> str:
    """Git's object id of a blob: what the hub lists as ``blobId`` / ``oid`` for a file in git."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def lfs_pointer(data: bytes) -> bytes:
    return (f"version https://git-lfs.github.com/spec/v1\noid sha256:{hashlib.sha256(data).hexdigest()}\n"
            f"size {len(data)}\n").encode()


def listed(name: str, data: bytes) -> dict:
    """A sibling's blob fields as the hub lists them with ``?blobs=True``."""
    if name.endswith(LFS_SUFFIXES):
        pointer = lfs_pointer(data)
        return {"size": len(data), "blobId": git_blob_id(pointer),
                "lfs": {"size": len(data), "sha256": hashlib.sha256(data).hexdigest(), "pointerSize": len(pointer)}}
    return {"size": len(data), "blobId": git_blob_id(data)}


def tree_entry(name: str, data: bytes) -> dict:
    """A file of ``/tree`` as the hub lists it: the tree API names the LFS sha256 ``oid``."""
    fields = listed(name, data)
    entry = {"type": "file", "path": name, "size": len(data), "oid": fields["blobId"]}
    if "lfs" in fields:
        entry["lfs"] = {"oid": fields["lfs"]["sha256"], "size": len(data), "pointerSize": fields["lfs"]["pointerSize"]}
    return entry


def commit_of(files: dict[str, bytes], salt: str = "") -> str:
    digest = hashlib.sha1(salt.encode())
    for path in sorted(files):
        digest.update(path.encode() + b"\0" + hashlib.sha1(files[path]).digest())
    return digest.hexdigest()


@dataclass
class FakeRepo:
    """Commits (40-hex sha -> files) and refs (branch or tag -> sha); ``main`` is the default."""

    commits: dict[str, dict[str, bytes]] = field(default_factory=dict)
    refs: dict[str, str] = field(default_factory=dict)
    token: str | None = None  # when set, every request must carry it
    #: Files whose downloads send other bytes (same length) than the listing's hashes describe.
    corrupt: set[str] = field(default_factory=set)

    def add(self, files: dict[str, bytes], *refs: str) -> str:
        sha = commit_of(files, salt=str(len(self.commits)))
        self.commits[sha] = dict(files)
        for ref in refs or ("main",):
            self.refs[ref] = sha
        return sha

    def resolve(self, revision: str) -> str | None:
        if revision in self.commits:
            return revision
        return self.refs.get(revision)

    @classmethod
    def from_dir(cls, directory: Path, token: str | None = None) -> FakeRepo:
        files = {p.relative_to(directory).as_posix(): p.read_bytes()
                 for p in sorted(directory.rglob("*")) if p.is_file()}
        repo = cls(token=token)
        repo.add(files)
        return repo


@dataclass
class Recorded:
    method: str
    path: str
    authorization: str | None


class LocalHubServer:
    """A threading HTTP server on ``host`` (127.0.0.1 unless told) that hands each GET / HEAD to
    ``self._handle`` (the fake hubs' shared part); ``with`` starts and stops it, ``url`` is its address."""

    def __init__(self, repos: dict[str, FakeRepo], host: str = "127.0.0.1") -> None:
        self.repos = repos
        self.requests: list[Recorded] = []
        self._lock = threading.Lock()
        self._held: dict[str, threading.Event] = {}
        hub = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self) -> None:  # noqa: N802
                hub._handle(self, body=True)

            def do_HEAD(self) -> None:  # noqa: N802
                hub._handle(self, body=False)

            def log_message(self, *_: object) -> None:
                return

        self.httpd = http.server.ThreadingHTTPServer((host, 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://{host}:{self.httpd.server_address[1]}"
        self._thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def _handle(self, request: http.server.BaseHTTPRequestHandler, *, body: bool) -> None:
        raise NotImplementedError

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def hold(self, filename: str) -> threading.Event:
        """GETs of ``filename`` send half its bytes, then wait for the returned event."""
        event = threading.Event()
        self._held[filename] = event
        return event

    def count(self) -> int:
        with self._lock:
            return len(self.requests)

    def _send(self, handler, status: int, payload: bytes = b"", headers: dict[str, str] | None = None,
              body: bool = True) -> None:
        handler.send_response(status)
        for name, value in (headers or {}).items():
            handler.send_header(name, value)
        handler.send_header("Content-Length", str(len(payload)))
        handler.end_headers()
        if body and payload:
            handler.wfile.write(payload)

    def _send_held(self, handler, status: int, payload: bytes, headers: dict[str, str],
                   held: threading.Event) -> None:
        """Half of ``payload``, then the rest once ``held`` is set (a download caught mid-way)."""
        handler.send_response(status)
        for name, value in headers.items():
            handler.send_header(name, value)
        handler.send_header("Content-Length", str(len(payload)))
        handler.end_headers()
        half = len(payload) // 2
        handler.wfile.write(payload[:half])
        handler.wfile.flush()
        held.wait(timeout=60)
        handler.wfile.write(payload[half:])


class FakeHub(LocalHubServer):
    """``with FakeHub({"org/name": FakeRepo(...)}) as hub:`` then use ``hub.url`` as the endpoint."""


    # -- what tests read ------------------------------------------------------------------
    def file_downloads(self) -> list[Recorded]:
        """The GETs of file contents (``/resolve/``)."""
        with self._lock:
            return [r for r in self.requests if r.method == "GET" and "/resolve/" in r.path]


    # -- serving --------------------------------------------------------------------------
    def _error(self, handler, status: int, code: str | None, message: str, body: bool) -> None:
        headers = {"Content-Type": "application/json", "X-Error-Message": message}
        if code:
            headers["X-Error-Code"] = code
        self._send(handler, status, json.dumps({"error": message}).encode(), headers, body)

    def _handle(self, handler, body: bool) -> None:
        parsed = urlparse(handler.path)
        path = unquote(parsed.path)
        with self._lock:
            self.requests.append(Recorded(handler.command, path, handler.headers.get("authorization")))
        query = parse_qs(parsed.query)
        if path.startswith("/api/models/"):
            self._api(handler, path[len("/api/models/"):], query, body)
        elif "/resolve/" in path:
            repo_id, rest = path.lstrip("/").split("/resolve/", 1)
            revision, _, filename = rest.partition("/")
            self._resolve(handler, repo_id, revision, filename, body)
        else:
            self._error(handler, 404, None, f"no such endpoint {path}", body)

    def _repo(self, handler, repo_id: str, body: bool) -> FakeRepo | None:
        repo = self.repos.get(repo_id)
        if repo is None:
            self._error(handler, 404, "RepoNotFound", "Repository not found", body)
            return None
        if repo.token is not None:
            sent = handler.headers.get("authorization")
            if sent is None:
                self._error(handler, 401, "GatedRepo", f"Access to model {repo_id} is restricted.", body)
                return None
            if sent != f"Bearer {repo.token}":
                self._error(handler, 401, None, "Invalid credentials in Authorization header", body)
                return None
        return repo

    def _api(self, handler, rest: str, query: dict, body: bool) -> None:
        parts = rest.split("/")
        repo_id, tail = "/".join(parts[:2]), parts[2:]
        repo = self._repo(handler, repo_id, body)
        if repo is None:
            return
        kind = tail[0] if tail else "revision"
        revision = "/".join(tail[1:]) if len(tail) > 1 else "main"
        sha = repo.resolve(revision)
        if sha is None:
            self._error(handler, 404, "RevisionNotFound", f"Invalid rev id: {revision}", body)
            return
        files = repo.commits[sha]
        if kind == "tree":
            payload = [
                tree_entry(name, data) for name, data in sorted(files.items())
            ]
        elif kind == "revision":
            blobs = query.get("blobs", ["false"])[0].lower() == "true"
            siblings = [{"rfilename": name, **(listed(name, data) if blobs else {})}
                        for name, data in sorted(files.items())]
            payload = {"id": repo_id, "modelId": repo_id, "sha": sha, "private": repo.token is not None,
                       "siblings": siblings, "tags": [], "downloads": 0, "likes": 0}
        else:
            self._error(handler, 404, None, f"no such endpoint {kind}", body)
            return
        self._send(handler, 200, json.dumps(payload).encode(), {"Content-Type": "application/json"}, body)

    def _resolve(self, handler, repo_id: str, revision: str, filename: str, body: bool) -> None:
        repo = self._repo(handler, repo_id, body)
        if repo is None:
            return
        sha = repo.resolve(revision)
        if sha is None:
            self._error(handler, 404, "RevisionNotFound", f"Invalid rev id: {revision}", body)
            return
        data = repo.commits[sha].get(filename)
        if data is None:
            self._error(handler, 404, "EntryNotFound", f"{filename} does not exist on {revision}", body)
            return
        fields = listed(filename, data)
        etag = fields["lfs"]["sha256"] if "lfs" in fields else fields["blobId"]
        if filename in repo.corrupt:
            data = bytes(b ^ 0xFF for b in data)
        headers = {"X-Repo-Commit": sha, "ETag": f'"{etag}"',
                   "Content-Type": "application/octet-stream", "Accept-Ranges": "bytes"}
        status, payload = 200, data
        ranged = handler.headers.get("range", "")
        if ranged.startswith("bytes=") and ranged.endswith("-"):
            start = int(ranged[len("bytes="):-1])
            status, payload = 206, data[start:]
            headers["Content-Range"] = f"bytes {start}-{len(data) - 1}/{len(data)}"
        if not body:  # HEAD: the size of the whole file, no body
            handler.send_response(200)
            for name, value in headers.items():
                handler.send_header(name, value)
            handler.send_header("Content-Length", str(len(data)))
            handler.end_headers()
            return
        held = self._held.get(filename)
        if held is None:
            self._send(handler, status, payload, headers, body)
            return
        self._send_held(handler, status, payload, headers, held)
