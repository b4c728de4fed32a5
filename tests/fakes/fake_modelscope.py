"""A local ModelScope hub: the endpoints ``modelscope.hub.snapshot_download`` (1.40, on
``modelscope_hub`` 0.5) calls.

Serves :class:`fake_hub.FakeRepo` repos (``master`` is ModelScope's default branch) over HTTP
on 127.0.0.1, so the real ModelScope download code runs with no network:

- ``GET /api/v1/models/{repo}/repo/files?Revision=...&Recursive=True``: the file listing,
  ``{"Code": 200, "Data": {"Files": [{"Name", "Path", "Type", "Size", "Sha256", ...}]}}``, a
  ``Type: "tree"`` entry for each directory and ``"blob"`` for each file (what
  ``list_repo_files`` reads; the client checks each file's size and sha256).
- ``GET /api/v1/models/{repo}/repo?Revision=...&FilePath=...``: the file's bytes (``Range:
  bytes=N-`` too, which the client sends to resume a ``.incomplete`` file).
- ``GET /api/v1/models/{repo}``: the repo's metadata (``get_repo_info``).
- ``GET /api/v1/repos/internalAccelerationInfo``: 404, as outside Alibaba Cloud (the client
  probes it for an in-region mirror and falls back to the endpoint).

The client authenticates with ``Authorization: Bearer <token>`` and the cookie
``m_session_id=<token>``; either is accepted. Errors follow the client's own reading of them
(``modelscope/hub/errors.py`` ``handle_http_response``, ``modelscope_hub/errors.py``
``raise_for_status``): an unknown repo, revision or file is 404; a repo that needs a token
answers 403 without one or with a wrong one. The bodies are ModelScope's envelope
(``{"Code", "Message", "RequestId", "Success": false}``). Every request is recorded
(:attr:`FakeModelScope.requests`); requests to endpoints not listed above are in
:attr:`FakeModelScope.unknown`. :meth:`FakeModelScope.fail` makes every answer one status;
:meth:`FakeModelScope.hold` makes the GET of one file send half of it, then wait until the test
releases it.
"""

from __future__ import annotations

import hashlib
import http.cookies
import http.server
import json
import uuid
from urllib.parse import parse_qs, unquote, urlparse

from fake_hub import FakeRepo, LocalHubServer, Recorded

__all__ = ["FakeModelScope", "FakeRepo", "Recorded"]

_PREFIX = "/api/v1/models/"


class FakeModelScope(LocalHubServer):
    """``with FakeModelScope({"org/name": FakeRepo(...)}) as hub:`` then ``hub.url`` is the endpoint."""

    def __init__(self, repos: dict[str, FakeRepo]) -> None:
        super().__init__(repos)
        self.unknown: list[str] = []
        self._failing: int | None = None

    def fail(self, status: int | None) -> None:
        """Answer every request with ``status`` (a hub outage: 503, say); None serves again."""
        self._failing = status


    # -- what tests read ------------------------------------------------------------------
    def file_downloads(self) -> list[Recorded]:
        """The GETs of file contents (``/repo?FilePath=``), recorded as ``.../repo/<FilePath>``."""
        with self._lock:
            return [r for r in self.requests if r.method == "GET" and "/repo/@file/" in r.path]

    def listings(self) -> list[Recorded]:
        with self._lock:
            return [r for r in self.requests if r.path.endswith("/repo/files")]


    # -- serving --------------------------------------------------------------------------
    def _json(self, handler, status: int, data: object, message: str, body: bool) -> None:
        envelope = {"Code": 200 if status == 200 else status, "Message": message,
                    "RequestId": uuid.uuid4().hex, "Success": status == 200}
        if status == 200:
            envelope["Data"] = data
        self._send(handler, status, json.dumps(envelope).encode(), {"Content-Type": "application/json"}, body)

    def _handle(self, handler, body: bool) -> None:
        parsed = urlparse(handler.path)
        path = unquote(parsed.path)
        query = {k: v[0] for k, v in parse_qs(parsed.query).items()}
        recorded = path
        if path.endswith("/repo") and "FilePath" in query:
            recorded = f"{path}/@file/{query['FilePath']}"
        with self._lock:
            self.requests.append(Recorded(handler.command, recorded, handler.headers.get("authorization")))
        if self._failing is not None:
            self._json(handler, self._failing, None, "the service is temporarily unavailable", body)
            return
        if not path.startswith(_PREFIX):
            if path != "/api/v1/repos/internalAccelerationInfo":
                self.unknown.append(path)
            self._json(handler, 404, None, f"no such endpoint {path}", body)
            return
        parts = path[len(_PREFIX):].split("/")
        repo_id, tail = "/".join(parts[:2]), "/".join(parts[2:])
        repo = self._repo(handler, repo_id, body)
        if repo is None:
            return
        if tail == "":
            self._json(handler, 200, {"Id": 1, "Path": repo_id.split("/")[0], "Name": repo_id.split("/")[1],
                                      "Visibility": 1 if repo.token else 5}, "success", body)
            return
        revision = query.get("Revision", "master")
        sha = repo.resolve(revision)
        if tail not in ("repo/files", "repo"):
            self.unknown.append(path)
            self._json(handler, 404, None, f"no such endpoint {path}", body)
            return
        if sha is None:
            self._json(handler, 404, None, f"revision {revision} of {repo_id} does not exist", body)
            return
        files = repo.commits[sha]
        if tail == "repo/files":
            directories = sorted({name.rsplit("/", 1)[0] for name in files if "/" in name})
            entries = [{"Name": name.rsplit("/", 1)[-1], "Path": name, "Type": "tree", "Size": 0,
                        "Sha256": "", "Revision": sha, "IsLFS": False, "Mode": "40000"}
                       for name in directories]
            entries += [{"Name": name.rsplit("/", 1)[-1], "Path": name, "Type": "blob", "Size": len(data),
                         "Sha256": hashlib.sha256(data).hexdigest(), "Revision": sha, "IsLFS": False,
                         "Mode": "100644", "CommitMessage": "add", "CommittedDate": 1700000000}
                        for name, data in sorted(files.items())]
            self._json(handler, 200, {"Files": entries, "IsVisual": 0}, "success", body)
            return
        filename = query.get("FilePath", "")
        data = files.get(filename)
        if data is None:
            self._json(handler, 404, None, f"file {filename} does not exist on {revision}", body)
            return
        self._file(handler, filename, data, body)

    def _repo(self, handler, repo_id: str, body: bool) -> FakeRepo | None:
        repo = self.repos.get(repo_id)
        if repo is None:
            self._json(handler, 404, None, f"model {repo_id} does not exist", body)
            return None
        if repo.token is None:
            return repo
        authorization = handler.headers.get("authorization")
        cookies = http.cookies.SimpleCookie(handler.headers.get("cookie", ""))
        sent = [authorization] if authorization else []
        if "m_session_id" in cookies:
            sent.append(f"Bearer {cookies['m_session_id'].value}")
        if not sent:
            self._json(handler, 403, None, f"user not logged in: no access to private model {repo_id}", body)
            return None
        if f"Bearer {repo.token}" not in sent:
            self._json(handler, 403, None, f"no permission: the token cannot access {repo_id}", body)
            return None
        return repo

    def _file(self, handler, filename: str, data: bytes, body: bool) -> None:
        headers = {"Content-Type": "application/octet-stream", "Accept-Ranges": "bytes",
                   "ETag": f'"{hashlib.sha1(data).hexdigest()}"'}
        status, payload = 200, data
        ranged = handler.headers.get("range", "")
        if ranged.startswith("bytes=") and ranged.endswith("-"):
            start = int(ranged[len("bytes="):-1])
            if start >= len(data):
                self._send(handler, 416, b"", {"Content-Range": f"bytes */{len(data)}"}, body)
                return
            status, payload = 206, data[start:]
            headers["Content-Range"] = f"bytes {start}-{len(data) - 1}/{len(data)}"
        held = self._held.get(filename)
        if not body or held is None:
            self._send(handler, status, payload, headers, body)
            return
        self._send_held(handler, status, payload, headers, held)
