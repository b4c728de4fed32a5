"""The list-then-watch streams of the children and pods (ascend_operator.reflector), with a fake API.

Covered: scopes per watched namespace or one cluster-wide scope filtered by globs; a list fills
the cache and reports the objects a re-list lacks as deleted; the watch resumes from the last
version (bookmarks included) after the server ends it; a 410 lists again; a failure lists again
after a backoff; a kind the cluster does not serve is listed again later; events of namespaces
outside the scope are dropped; a cancelled reflector wakes its reading thread (socket shutdown)
and leaves the close to that thread, which ends quietly when the loop has closed before it.
The real API server runs the same streams in tests/cluster.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Iterator
from typing import Any

from ascend_operator.builders.common import RESOURCE_LABEL
from ascend_operator.k8s import DEPLOYMENT, POD, ListPage
from ascend_operator.reflector import Reflector, Reflectors, ReflectorTiming, Scope, scopes
from ascend_operator.watchcache import WatchCache
from kubernetes.client.exceptions import ApiException

FAST = ReflectorTiming(backoff_base_s=0.01, backoff_max_s=0.02, absent_recheck_s=0.01)


def pod(name: str, rv: int, namespace: str = "llm") -> dict[str, Any]:
    return {"kind": "Pod", "apiVersion": "v1",
            "metadata": {"name": name, "namespace": namespace, "resourceVersion": str(rv),
                         "labels": {RESOURCE_LABEL: "tiny"}}}


class FakeResponse:
    def __init__(self, events: list[dict[str, Any]]) -> None:
        self.lines = b"".join(json.dumps(e).encode() + b"\n" for e in events)
        self.closed = False

    def stream(self, amt: Any = None, decode_content: bool = False) -> Iterator[bytes]:
        # Split mid-line: the reader must join chunks.
        yield self.lines[:7]
        yield self.lines[7:]

    def close(self) -> None:
        self.closed = True

    def release_conn(self) -> None:
        pass


class FakeKube:
    """Lists from ``self.lists`` (one per call; None: not served) and watches from ``self.watches``
    (one per call: a list of events, or an exception). Records the versions watched from."""

    def __init__(self) -> None:
        self.lists: list[tuple[list[dict[str, Any]], str] | None | Exception] = []
        self.watches: list[list[dict[str, Any]] | Exception] = []
        self.watched_from: list[str] = []
        self.list_calls = 0
        self.finished = asyncio.Event()

    async def list_pages(self, kind: Any, namespace: Any, selector: str, page: int = 250) -> AsyncIterator[ListPage]:
        assert selector == RESOURCE_LABEL
        self.list_calls += 1
        found = self.lists.pop(0) if self.lists else ([], "1")
        if isinstance(found, Exception):
            raise found
        if found is None:
            return
        items, version = found
        yield ListPage(items[:1], version)
        if items[1:]:
            yield ListPage(items[1:], version)

    def watch_request(self, kind: Any, namespace: Any, selector: str, version: str, server_timeout_s: int,
                      request_timeout: Any) -> FakeResponse:
        self.watched_from.append(version)
        if not self.watches:
            self.finished.set()
            raise ApiException(status=503, reason="test over")
        found = self.watches.pop(0)
        if isinstance(found, Exception):
            raise found
        return FakeResponse(found)


class Recorder:
    def __init__(self, cache: WatchCache) -> None:
        self.cache = cache
        self.events: list[tuple[str | None, str]] = []

    def __call__(self, event_type: str | None, body: dict[str, Any]) -> None:
        meta = body["metadata"]
        self.events.append((event_type, meta["name"]))
        if event_type == "DELETED":
            self.cache.remove(body["kind"], meta["namespace"], meta["name"])
        else:
            self.cache.put(body)


async def run_until_done(reflector: Reflector, kube: FakeKube) -> None:
    task = asyncio.create_task(reflector.run())
    await asyncio.wait_for(kube.finished.wait(), 5)
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)


def test_one_scope_per_kind_and_namespace_or_one_cluster_wide_for_globs() -> None:
    assert [(s.kind, s.namespace) for s in scopes([POD, DEPLOYMENT], ["a", "b"])] == [
        (POD, "a"), (POD, "b"), (DEPLOYMENT, "a"), (DEPLOYMENT, "b")]
    assert [(s.kind, s.namespace) for s in scopes([POD], [])] == [(POD, None)]
    (glob,) = scopes([POD], ["op-*"])
    assert glob.namespace is None and glob.wants("op-1") and not glob.wants("other")
    assert Scope(POD, None).wants("anything") and not Scope(POD, "a").wants("b")


async def test_a_list_fills_the_cache_and_a_re_list_reports_what_it_lacks() -> None:
    cache, kube = WatchCache(), FakeKube()
    sink = Recorder(cache)
    cache.put(pod("elsewhere", 1, namespace="other"))  # another scope's: never touched
    kube.lists = [([pod("a", 5), pod("b", 6)], "10"), ([pod("b", 7)], "20")]
    reflector = Reflector(Scope(POD, "llm"), kube, cache, sink, FAST)  # type: ignore[arg-type]
    assert await reflector.list() and reflector.version == "10"
    assert sink.events == [(None, "a"), (None, "b")]
    assert await reflector.list() and reflector.version == "20"
    assert sink.events[2:] == [(None, "b"), ("DELETED", "a")]
    assert cache.version("Pod", "llm", "b") == 7 and cache.version("Pod", "llm", "a") is None
    assert cache.version("Pod", "other", "elsewhere") == 1


async def test_the_watch_resumes_from_the_last_version_and_bookmarks_move_it() -> None:
    cache, kube = WatchCache(), FakeKube()
    sink = Recorder(cache)
    kube.lists = [([pod("a", 5)], "10")]
    kube.watches = [
        [{"type": "MODIFIED", "object": pod("a", 11)}, {"type": "ADDED", "object": pod("c", 12)}],
        [{"type": "BOOKMARK", "object": {"kind": "Pod", "metadata": {"resourceVersion": "30"}}}],
        [{"type": "DELETED", "object": pod("c", 31)},
         {"type": "ADDED", "object": pod("x", 32, namespace="other")}],  # not this scope's
    ]
    reflector = Reflector(Scope(POD, "llm"), kube, cache, sink, FAST)  # type: ignore[arg-type]
    await reflector.list()
    await run_until_done(reflector, kube)
    assert kube.watched_from[:4] == ["10", "12", "30", "32"]
    assert sink.events == [(None, "a"), ("MODIFIED", "a"), ("ADDED", "c"), ("DELETED", "c")]
    assert kube.list_calls == 1  # resumed, never listed again until the failure at the end


async def test_a_gone_version_lists_again_at_once() -> None:
    cache, kube = WatchCache(), FakeKube()
    sink = Recorder(cache)
    kube.lists = [([pod("a", 5)], "10"), ([], "50")]
    kube.watches = [[{"type": "ERROR", "object": {"code": 410, "message": "too old resource version"}}],
                    [{"type": "ADDED", "object": pod("d", 51)}]]
    reflector = Reflector(Scope(POD, "llm"), kube, cache, sink, FAST)  # type: ignore[arg-type]
    await reflector.list()
    await run_until_done(reflector, kube)
    assert kube.watched_from[:2] == ["10", "50"]
    assert ("DELETED", "a") in sink.events and ("ADDED", "d") in sink.events


async def test_a_failed_watch_or_list_backs_off_and_lists_again() -> None:
    cache, kube = WatchCache(), FakeKube()
    sink = Recorder(cache)
    kube.lists = [([], "10"), ApiException(status=500, reason="etcd"), ([pod("e", 60)], "60")]
    kube.watches = [ConnectionResetError("reset"), [{"type": "ADDED", "object": pod("f", 61)}]]
    reflector = Reflector(Scope(POD, "llm"), kube, cache, sink, FAST)  # type: ignore[arg-type]
    await reflector.list()
    await run_until_done(reflector, kube)
    assert kube.watched_from[:2] == ["10", "60"]
    assert (None, "e") in sink.events and ("ADDED", "f") in sink.events


async def test_a_kind_not_served_is_listed_again_until_it_is() -> None:
    cache, kube = WatchCache(), FakeKube()
    sink = Recorder(cache)
    kube.lists = [None, None, ([pod("g", 70)], "70")]
    reflector = Reflector(Scope(POD, "llm"), kube, cache, sink, FAST)  # type: ignore[arg-type]
    assert not await reflector.list() and reflector.version is None
    await run_until_done(reflector, kube)
    assert kube.list_calls >= 3 and kube.watched_from[0] == "70" and (None, "g") in sink.events


async def test_a_failed_start_up_list_does_not_stop_the_others() -> None:
    cache, kube = WatchCache(), FakeKube()
    sink = Recorder(cache)
    kube.lists = [ApiException(status=403, reason="forbidden"), ([pod("h", 80)], "80")]
    group = Reflectors([Reflector(Scope(POD, "a"), kube, cache, sink, FAST),  # type: ignore[arg-type]
                        Reflector(Scope(POD, "llm"), kube, cache, sink, FAST)])  # type: ignore[arg-type]
    await group.list_all()
    assert [r.version for r in group.reflectors] == [None, "80"]
    assert sink.events == [(None, "h")]


class BlockingResponse:
    """A watch that waits for data until its socket is shut down; records which thread closes it."""

    def __init__(self) -> None:
        import threading

        self.woken = threading.Event()
        self.started = threading.Event()
        self.closed_in: str | None = None

    def stream(self, amt: Any = None, decode_content: bool = False) -> Iterator[bytes]:
        self.started.set()
        self.woken.wait(10)
        return iter(())

    def shutdown(self) -> None:
        self.woken.set()

    def close(self) -> None:
        import threading

        self.closed_in = threading.current_thread().name

    def release_conn(self) -> None:
        pass


async def test_a_cancelled_reflector_wakes_its_reader_and_never_closes_from_the_loop() -> None:
    cache, kube = WatchCache(), FakeKube()
    response = BlockingResponse()
    kube.watch_request = lambda *args, **kwargs: response  # type: ignore[method-assign]
    reflector = Reflector(Scope(POD, "llm"), kube, cache, Recorder(cache), FAST)  # type: ignore[arg-type]
    await reflector.list()
    task = asyncio.create_task(reflector.run())
    while not response.started.is_set():
        await asyncio.sleep(0.01)
    task.cancel()
    await asyncio.wait_for(asyncio.gather(task, return_exceptions=True), 2)
    assert response.woken.is_set()
    for _ in range(100):  # the reader closes it, in its own thread
        if response.closed_in is not None:
            break
        await asyncio.sleep(0.01)
    assert response.closed_in is not None and response.closed_in.startswith("watch ")


class LateResponse(BlockingResponse):
    """A watch whose reader ends only when the test says, whatever the socket's shutdown."""

    def __init__(self) -> None:
        import threading

        super().__init__()
        self.release = threading.Event()

    def stream(self, amt: Any = None, decode_content: bool = False) -> Iterator[bytes]:
        self.started.set()
        self.release.wait(10)
        return iter(())


def test_a_reader_that_ends_after_the_operators_loop_closed_ends_quietly(monkeypatch: Any) -> None:
    """At shutdown the loop may close before a watch thread returns: it must not raise
    "Event loop is closed" (an unhandled exception in the thread, printed on every stop)."""

    import threading

    raised: list[BaseException | None] = []
    monkeypatch.setattr(threading, "excepthook", lambda args: raised.append(args.exc_value))
    response = LateResponse()
    threads_before = set(threading.enumerate())

    async def main() -> None:
        cache, kube = WatchCache(), FakeKube()
        kube.watch_request = lambda *args, **kwargs: response  # type: ignore[method-assign]
        reflector = Reflector(Scope(POD, "llm"), kube, cache, Recorder(cache), FAST)  # type: ignore[arg-type]
        await reflector.list()
        asyncio.create_task(reflector.run())
        while not response.started.is_set():
            await asyncio.sleep(0.01)

    asyncio.run(main())  # cancels the reflector and closes the loop while the reader still reads
    (reader,) = [t for t in set(threading.enumerate()) - threads_before if t.name.startswith("watch ")]
    response.release.set()
    reader.join(5)
    assert not reader.is_alive() and raised == []
