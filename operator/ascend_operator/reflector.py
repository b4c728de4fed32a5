"""List-then-watch streams of the children and pods, feeding the watch cache (client-go's reflector).

Why not kopf's watches: kopf runs a worker task per watched object and builds a cause for every
event, which at 1,000 resources (about 7,000 children and pods, several events each while pods
start) was the largest part of the operator's CPU (bench/README.md). A reflector per kind and
namespace does only what the cache needs: list in pages (the list's ``resourceVersion``), then
watch from that version with bookmarks. The server ends each watch after
:attr:`ReflectorTiming.server_timeout_s` and the stream resumes from the last version seen; a
``410 Gone`` (the version is too old) or any other failure lists again (after a backoff for
failures), and an object the new list lacks is reported deleted. A kind the cluster does not
serve (its CRD is not installed) is listed again every :attr:`ReflectorTiming.absent_recheck_s`.

The watch's HTTP response is read in a daemon thread of its own (the ``kubernetes`` client is
synchronous); each event is parsed there and handed to the event loop in order, where the sink
(``handle_events.child_event``) runs.
"""

from __future__ import annotations

import asyncio
import fnmatch
import json
import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kubernetes.client.exceptions import ApiException
from kubernetes.watch.watch import iter_resp_lines

from ascend_operator.builders.common import RESOURCE_LABEL
from ascend_operator.k8s import ChildKind, Kube
from ascend_operator.watchcache import WatchCache

logger = logging.getLogger(__name__)

#: ``sink(event_type, body)``: ``ADDED``, ``MODIFIED``, ``DELETED``, or ``None`` for a listed object.
Sink = Callable[[str | None, Mapping[str, Any]], None]
HTTP_GONE = 410


@dataclass(frozen=True)
class ReflectorTiming:
    #: The server ends a watch after this long (``timeoutSeconds``); the stream then resumes.
    server_timeout_s: int = 300
    #: The client gives up on a silent connection (a dropped NAT entry) this much later.
    client_grace_s: float = 30.0
    connect_timeout_s: float = 30.0
    #: Backoff after a failed list or watch: doubling from ``backoff_base_s`` to ``backoff_max_s``.
    backoff_base_s: float = 1.0
    backoff_max_s: float = 60.0
    #: How often a kind the cluster does not serve is listed again (a CRD installed later).
    absent_recheck_s: float = 30.0
    #: Objects per page of a list.
    page: int = 250


@dataclass(frozen=True)
class Scope:
    """What one reflector lists and watches: a kind in one namespace, or in every namespace
    (``namespace`` None) filtered by the operator's namespace globs (none: all)."""

    kind: ChildKind
    namespace: str | None
    patterns: tuple[str, ...] = ()

    def wants(self, namespace: str | None) -> bool:
        if not namespace:
            return False
        if self.namespace is not None:
            return namespace == self.namespace
        return not self.patterns or any(fnmatch.fnmatchcase(namespace, p) for p in self.patterns)

    def __str__(self) -> str:
        return f"{self.kind.plural}{f' in {self.namespace}' if self.namespace else ''}"


def scopes(kinds: Sequence[ChildKind], patterns: Sequence[str]) -> list[Scope]:
    """One scope per kind and watched namespace; one per kind for the whole cluster when the
    operator watches every namespace or a glob (kopf's namespace patterns)."""

    if not patterns or any(set(p) & set("*?[!") for p in patterns):
        return [Scope(kind, None, tuple(patterns)) for kind in kinds]
    return [Scope(kind, namespace) for kind in kinds for namespace in patterns]


class Gone(Exception):
    """The watch's ``resourceVersion`` is too old (HTTP 410): list again."""


class Reflector:
    """Keeps the cache's objects of one :class:`Scope` current and tells the sink of each change."""

    def __init__(self, scope: Scope, kube: Kube, cache: WatchCache, sink: Sink,
                 timing: ReflectorTiming | None = None) -> None:
        self.scope = scope
        self._kube, self._cache, self._sink = kube, cache, sink
        self._timing = timing or ReflectorTiming()
        #: The version to watch from; None until a list succeeded (or the kind is not served).
        self.version: str | None = None
        self._response: Any = None
        self._failures = 0

    # ------------------------------------------------------------------ listing

    async def list(self) -> bool:
        """List the scope into the cache (objects it lacks are reported deleted); whether the kind
        is served. Raises what the API raised (the caller backs off)."""

        seen: set[tuple[str, str]] = set()
        version: str | None = None
        served = False
        async for page in self._kube.list_pages(self.scope.kind, self.scope.namespace, RESOURCE_LABEL,
                                                page=self._timing.page):
            served = True
            version = page.resource_version or version
            for item in page.items:
                meta = item.get("metadata") or {}
                if not self.scope.wants(meta.get("namespace")):
                    continue
                seen.add((meta["namespace"], meta.get("name") or ""))
                self._sink(None, item)
        for namespace, name, label in self._cache.entries(self.scope.kind.kind):
            if self.scope.wants(namespace) and (namespace, name) not in seen:
                self._sink("DELETED", {"kind": self.scope.kind.kind, "apiVersion": self.scope.kind.api_version,
                                       "metadata": {"namespace": namespace, "name": name,
                                                    "labels": {RESOURCE_LABEL: label}}})
        self.version = version if served else None
        return served

    # ------------------------------------------------------------------ watching

    async def run(self) -> None:
        """Watch until cancelled: resume after each server timeout, list again after a 410 or a
        failure. Call :meth:`list` first (the start-up prefill), or it lists first."""

        while True:
            try:
                if self.version is None and not await self.list():
                    await asyncio.sleep(self._timing.absent_recheck_s)
                    continue
                self.version = await self._watch_in_thread(self.version or "")
                self._failures = 0
            except asyncio.CancelledError:
                self._interrupt()
                raise
            except Gone:
                logger.debug("watch of %s: version too old; listing again", self.scope)
                self.version = None
            except Exception as error:  # noqa: BLE001  (any failure: back off, list again)
                self._failures += 1
                delay = min(self._timing.backoff_max_s, self._timing.backoff_base_s * 2 ** (self._failures - 1))
                logger.warning("watch of %s failed (%s: %s); listing again in %.0fs",
                               self.scope, type(error).__name__, _brief(error), delay)
                self.version = None
                await asyncio.sleep(delay)

    async def _watch_in_thread(self, version: str) -> str:
        loop = asyncio.get_running_loop()
        done: asyncio.Future[str] = loop.create_future()

        def settle(result: str | None, error: BaseException | None) -> None:
            if done.done():
                return
            if error is not None:
                done.set_exception(error)
            else:
                done.set_result(result or version)

        def post(callback: Callable[..., None], *args: Any) -> None:
            try:
                loop.call_soon_threadsafe(callback, *args)
            except RuntimeError:  # the loop closed (the operator stopped): nothing waits for it now
                pass

        def target() -> None:
            try:
                result = self._stream(version, lambda kind, body: loop.call_soon_threadsafe(self._deliver, kind, body))
            except BaseException as error:  # noqa: BLE001  (handed to the event loop)
                post(settle, None, error)
            else:
                post(settle, result, None)

        threading.Thread(target=target, daemon=True, name=f"watch {self.scope}").start()
        return await done

    def _deliver(self, event_type: str, body: Mapping[str, Any]) -> None:
        if self.scope.wants((body.get("metadata") or {}).get("namespace")):
            self._sink(event_type, body)

    def _stream(self, version: str, deliver: Callable[[str, dict[str, Any]], Any]) -> str:
        """One watch request, read to its end (in the thread); the last version seen."""

        timing = self._timing
        response = self._kube.watch_request(
            self.scope.kind, self.scope.namespace, RESOURCE_LABEL, version, timing.server_timeout_s,
            (timing.connect_timeout_s, timing.server_timeout_s + timing.client_grace_s))
        self._response = response
        try:
            for line in iter_resp_lines(response):
                if not line:
                    continue
                event = json.loads(line)
                event_type, body = event.get("type"), event.get("object") or {}
                if event_type == "ERROR":
                    if body.get("code") == HTTP_GONE:
                        raise Gone(body.get("message"))
                    raise ApiException(status=body.get("code") or 0, reason=body.get("message"))
                version = (body.get("metadata") or {}).get("resourceVersion") or version
                if event_type in ("ADDED", "MODIFIED", "DELETED"):
                    body.setdefault("kind", self.scope.kind.kind)
                    body.setdefault("apiVersion", self.scope.kind.api_version)
                    deliver(event_type, body)
        finally:
            self._close()
        return version

    def _interrupt(self) -> None:
        """Wake the thread reading the stream (the reflector is cancelled): shut its socket down.
        Closing the response here instead would wait for the reader's buffer lock, which the
        thread holds while it waits for data: the event loop would hang until the next event."""

        response = self._response
        if response is not None:
            try:
                response.shutdown()
            except Exception:  # noqa: BLE001,S110  (already closed)
                pass

    def _close(self) -> None:
        """Close the response (in the reading thread)."""

        response, self._response = self._response, None
        if response is not None:
            try:
                response.close()
                response.release_conn()
            except Exception:  # noqa: BLE001,S110  (closing a dead connection)
                pass


def _brief(error: BaseException) -> str:
    if isinstance(error, ApiException):
        return f"HTTP {error.status} {error.reason}"
    return str(error)


class Reflectors:
    """Every scope's reflector: listed together at start-up, then watched, each as a task."""

    def __init__(self, reflectors: Sequence[Reflector]) -> None:
        self.reflectors = list(reflectors)
        self._tasks: list[asyncio.Task[None]] = []

    async def list_all(self) -> None:
        """The start-up prefill: every scope listed once (a list that fails is retried by its
        reflector's run, after a backoff; meanwhile a pass reads a missing child from the API)."""

        for reflector in self.reflectors:
            try:
                await reflector.list()
            except Exception as error:  # noqa: BLE001
                logger.warning("listing %s at start-up failed (%s); retrying in the background",
                               reflector.scope, _brief(error))

    def start(self) -> None:
        self._tasks = [asyncio.create_task(r.run(), name=f"reflector {r.scope}") for r in self.reflectors]

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks = []
