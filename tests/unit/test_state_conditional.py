"""Conditional reads of a runtime's ``GET /state`` (ascend_runtime.server, ascend_operator.podreads).

Covered, against the runtime's real HTTP app on a local port: every answer carries a strong ETag
that changes when the state does; ``If-None-Match`` with the current tag (or ``*``) gives 304 and
no body; ``?omit=health`` leaves out the leak and hang samples so its tag stays while only they
change, and an unknown ``omit`` is a 400 naming the parameter and what it takes. The operator's
direct reads ask conditionally: a settled runtime answers 304 and the state read last is used
again (the same object, nothing decoded), a change is read in full; a runtime that neither tags
nor knows ``omit`` is read in full each time with its ``health`` dropped, so the skip check
(``lastpass.same_states``) sees it unchanged; answers not used for ``ANSWER_KEEP_S`` are swept.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from ascend_operator.lastpass import same_states
from ascend_operator.podreads import ANSWER_KEEP_S, Answers, PodReader, direct_url
from ascend_runtime.config import RuntimePhase, RuntimeState
from ascend_runtime.server import build_app, start_server
from ascend_runtime.state import StateStore


async def no_metrics() -> str | None:
    return None


class Served:
    """A runtime's app on 127.0.0.1 with the status of every answer it gave."""

    def __init__(self, app: web.Application) -> None:
        self.statuses: list[int] = []

        @web.middleware
        async def record(request: web.Request, handler: Any) -> web.StreamResponse:
            response = await handler(request)
            self.statuses.append(response.status)
            return response

        app.middlewares.append(record)
        self.app = app
        self.port = 0
        self._runner: web.AppRunner | None = None

    async def start(self) -> None:
        self._runner = await start_server(self.app, "127.0.0.1", 0)
        self.port = self._runner.addresses[0][1]

    async def stop(self) -> None:
        assert self._runner is not None
        await self._runner.cleanup()


@pytest.fixture
def store() -> StateStore:
    store = StateStore(clock=lambda: 1000.0)
    store.set_phase(RuntimePhase.READY)
    store.state.health = {"memory": {"host": {"used_mb": 100.0}}}
    return store


@pytest.fixture
async def served(store: StateStore) -> AsyncIterator[Served]:
    served = Served(build_app(store, no_metrics))
    await served.start()
    yield served
    await served.stop()


async def get(port: int, query: str = "", etag: str | None = None) -> tuple[int, str | None, bytes]:
    headers = {"If-None-Match": etag} if etag else {}
    async with aiohttp.ClientSession() as session, \
            session.get(f"http://127.0.0.1:{port}/state{query}", headers=headers) as response:
        return response.status, response.headers.get("ETag"), await response.read()


async def test_state_answers_carry_a_tag_and_a_matching_ask_gets_304_without_a_body(
        served: Served, store: StateStore) -> None:
    status, etag, body = await get(served.port)
    assert status == 200 and etag and etag.startswith('"') and b'"phase": "Ready"' in body

    assert (await get(served.port, etag=etag))[0::2] == (304, b"")
    assert (await get(served.port, etag="*"))[0] == 304
    assert (await get(served.port, etag='"other", ' + etag))[0] == 304

    store.set_phase(RuntimePhase.DEGRADED, "one engine slow")
    status, changed, body = await get(served.port, etag=etag)
    assert status == 200 and changed != etag and b"Degraded" in body


async def test_omit_health_keeps_its_tag_while_only_the_health_samples_change(
        served: Served, store: StateStore) -> None:
    _, full_tag, full = await get(served.port)
    _, tag, body = await get(served.port, "?omit=health")
    assert b'"health"' in full and b'"health"' not in body and b'"phase"' in body

    store.state.health = {"memory": {"host": {"used_mb": 101.5}}}  # a new sample
    assert (await get(served.port, etag=full_tag))[0] == 200
    assert (await get(served.port, "?omit=health", etag=tag))[0] == 304

    store.state.leak_suspected = True
    assert (await get(served.port, "?omit=health", etag=tag))[0] == 200


async def test_an_unknown_omit_is_refused_naming_the_parameter(served: Served) -> None:
    status, _, body = await get(served.port, "?omit=phase")
    assert status == 400
    assert b"omit=phase" in body and b"omit takes: health" in body


async def test_direct_reads_reuse_the_state_while_the_runtime_answers_304(served: Served, store: StateStore) -> None:
    reader = PodReader(None, timeout_s=5, via_proxy=False)  # type: ignore[arg-type]
    try:
        first = await reader.read_state("llm", "tiny-0", served.port, pod_ip="127.0.0.1")
        store.state.health = {"memory": {"host": {"used_mb": 250.0}}}  # only the samples move
        second = await reader.read_state("llm", "tiny-0", served.port, pod_ip="127.0.0.1")
        assert first is not None and first.phase is RuntimePhase.READY and first.health == {}
        assert second is first and served.statuses == [200, 304]
        assert same_states({"tiny-0": first}, {"tiny-0": second})

        store.set_phase(RuntimePhase.DRAINING, "SIGTERM")
        third = await reader.read_state("llm", "tiny-0", served.port, pod_ip="127.0.0.1")
        assert third is not None and third.phase is RuntimePhase.DRAINING and served.statuses[-1] == 200
        assert not same_states({"tiny-0": second}, {"tiny-0": third})

        other = await reader.read_state("llm", "tiny-1", served.port, pod_ip="127.0.0.1")
        assert other is not None and served.statuses[-1] == 200  # each pod has its own tag
    finally:
        await reader.close()


async def test_a_runtime_without_tags_or_omit_is_read_in_full_and_its_health_dropped() -> None:
    samples = iter(range(100))

    async def old_state(_: web.Request) -> web.Response:
        return web.json_response(RuntimeState(phase=RuntimePhase.READY, ready=True,
                                              health={"memory": {"used_mb": next(samples)}})
                                 .model_dump(mode="json", by_alias=True))

    app = web.Application()
    app.router.add_get("/state", old_state)
    served = Served(app)
    await served.start()
    reader = PodReader(None, timeout_s=5, via_proxy=False)  # type: ignore[arg-type]
    try:
        first = await reader.read_state("llm", "old-0", served.port, pod_ip="127.0.0.1")
        second = await reader.read_state("llm", "old-0", served.port, pod_ip="127.0.0.1")
        assert served.statuses == [200, 200] and len(reader.answers) == 0
        assert first is not None and second is not None and first.health == {} == second.health
        assert same_states({"old-0": first}, {"old-0": second})
    finally:
        await reader.close()
        await served.stop()


def test_answers_not_used_for_the_keep_time_are_swept() -> None:
    now = [0.0]
    answers = Answers(clock=lambda: now[0])
    state = RuntimeState()
    answers.put(("llm", "kept", "state"), "a", state)
    for index in range(1022):
        answers.put(("llm", f"gone-{index}", "state"), "b", state)
    now[0] = ANSWER_KEEP_S - 1
    assert answers.reuse(("llm", "kept", "state")) is state  # used: its keep time starts again
    now[0] = ANSWER_KEEP_S + 1
    answers.put(("llm", "new", "state"), "c", state)  # the 1,024th: a sweep
    assert len(answers) == 2
    assert answers.etag(("llm", "kept", "state")) == "a" and answers.etag(("llm", "gone-0", "state")) is None
    answers.put(("llm", "kept", "state"), None, state)  # an untagged answer: nothing to ask with
    assert answers.etag(("llm", "kept", "state")) is None


def test_direct_urls_bracket_ipv6_pods_and_carry_the_query() -> None:
    assert str(direct_url("10.1.2.3", 8080, "state", (("omit", "health"),))) == "http://10.1.2.3:8080/state?omit=health"
    assert str(direct_url("fd00::7", 8081, "progress")) == "http://[fd00::7]:8081/progress"
    assert direct_url("10.1.2.3", 8080, "state", (("omit", "health"),)) is direct_url(
        "10.1.2.3", 8080, "state", (("omit", "health"),))  # built once per pod


async def test_direct_read_connections_outlive_a_settled_runtimes_longest_wait() -> None:
    # A settled runtime is read again after up to settled_max_s and then at the next resync: its
    # connection must still be there, or every such read opens a new one.
    reader = PodReader(None, timeout_s=5, via_proxy=False, settled_max_s=300.0)  # type: ignore[arg-type]
    try:
        assert reader.keepalive_s == 600.0
        assert reader._direct_session().connector._keepalive_timeout == 600.0  # type: ignore[union-attr]
    finally:
        await reader.close()
    assert PodReader(None, timeout_s=5, settled_max_s=10.0).keepalive_s == 120.0  # type: ignore[arg-type]
