"""Reads of what the pods themselves serve: a runtime's ``GET /state``, a fetch pod's ``GET /progress``.

A second client beside :class:`ascend_operator.k8s.Kube`: in a pod the operator reads each pod's
IP over plain HTTP; outside the cluster (``STATE_READ`` proxy) it reads through the API server's
pod proxy, which :meth:`Kube.proxy_get` sends (``k8s`` stays the one module that talks to the API
server). A read that fails for any reason (no pod IP yet, runtime not listening, timeout,
malformed answer) gives ``None`` ("unknown"), logged at debug.
A pod whose state could not be read is not asked again until its pod object changes or its retry
is due (:class:`Unreadable`): a starting pod after the progress poll interval, doubling to
:data:`UNREADABLE_RETRY_MAX_S`; a Ready pod, whose runtime answered the kubelet's readiness probe
so that only the operator cannot reach it (a network policy, a proxy, kwok's containerless pods),
once more after the base delay and then at the maximum, or later when many are held: those
retries are spread so that together they make at most :data:`UNREADABLE_RETRY_RATE` reads a
second (10,000 Ready pods that do not answer: each every 1,000 s, not every 300 s). At 1,000
resources the resyncs' reads of runtimes that do not answer (through the pod proxy, every one a
request to the API server) were most of the operator's CPU while idle (bench/README.md). Direct
reads share one HTTP session and are conditional (:class:`Answers`): a runtime whose ``/state``
(read as ``?omit=health``, without the leak and hang samples that change every few seconds) is
as it was answers 304 and the state read last is used again, nothing decoded. The operator uses
no part of ``health``; it is dropped from a state that has it (a runtime older than ``omit``),
so that the skip check (:mod:`ascend_operator.lastpass`) sees a settled runtime as unchanged.
A skipped pass of a settled resource does not ask every runtime either (:class:`Settled`): a Ready
pod whose runtime answered unchanged is asked again after the base delay, doubling with each
unchanged answer up to ``settled_max_s`` (five resync intervals); a pod that changed (readiness,
a restart) is asked at once. A full pass that wrote a child (a new spec, drift repaired) asks every
runtime and starts the doubling again, so a runtime acting on what that pass wrote (an adapter)
is asked at each resync for minutes after it; a full pass that wrote nothing (a Deployment's
status changed) reads as a skipped pass does. At 10,000 settled resources the reads of every
runtime at every resync were most of the operator's idle CPU (bench/README.md).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import aiohttp
import urllib3
import yarl
from ascend_runtime.cachelayout import DEFAULT_PROGRESS_PORT, FetchProgress
from ascend_runtime.config import DEFAULT_RUNTIME_PORT, RuntimeState
from kubernetes.client.exceptions import ApiException
from pydantic import BaseModel, ValidationError

from ascend_operator.k8s import Kube

logger = logging.getLogger(__name__)

#: The state document the runtime serves on its port (see ascend_runtime's server).
STATE_PATH = "state"
#: Its query: without the leak and hang details (``health``), which the operator does not use.
STATE_QUERY = (("omit", "health"),)
#: What a fetch Job's pod serves on its port (ascend_runtime.fetch).
PROGRESS_PATH = "progress"
_Doc = TypeVar("_Doc", bound=BaseModel)
#: What a conditional read gives for a 304: the document read last stands.
NOT_MODIFIED = object()
#: The longest an unreadable pod's state goes unasked while its pod does not change (seconds).
UNREADABLE_RETRY_MAX_S = 300.0
#: The most retries a second of Ready pods that did not answer, all of them together.
UNREADABLE_RETRY_RATE = 10.0
#: The shortest time a direct read's connection is kept unused (seconds).
KEEPALIVE_MIN_S = 120.0
#: How long an answer is kept for a conditional read after it was last used (seconds).
ANSWER_KEEP_S = 3600.0


@dataclass(frozen=True)
class StateTarget:
    """A running pod whose runtime state a pass reads: its name, IP, ``resourceVersion`` and
    whether the kubelet counts it Ready."""

    name: str
    ip: str | None
    version: str | None
    ready: bool = False


def pod_ready(pod: Mapping[str, Any]) -> bool:
    """Whether the pod's ``Ready`` condition is ``True`` (its readiness probes pass)."""
    return any(condition.get("type") == "Ready" and condition.get("status") == "True"
               for condition in (pod.get("status") or {}).get("conditions") or ())


def state_targets(pods: Sequence[Mapping[str, Any]]) -> tuple[StateTarget, ...]:
    """The pods whose state is worth reading: running, not being deleted."""

    return tuple(StateTarget(pod["metadata"]["name"], (pod.get("status") or {}).get("podIP"),
                             pod["metadata"].get("resourceVersion"), pod_ready(pod))
                 for pod in pods
                 if (pod.get("status") or {}).get("phase") == "Running" and not pod["metadata"].get("deletionTimestamp"))


class Unreadable:
    """Pods whose state could not be read: (namespace, name) -> (pod version, failures, retry time)."""

    def __init__(self, base_s: float, max_s: float = UNREADABLE_RETRY_MAX_S,
                 clock: Callable[[], float] = time.monotonic, rate: float = UNREADABLE_RETRY_RATE) -> None:
        self._base_s, self._max_s, self._clock, self._rate = base_s, max_s, clock, rate
        self._held: dict[tuple[str, str], tuple[str | None, int, float]] = {}
        self._sweep_at = 1024

    def __len__(self) -> int:
        return len(self._held)

    def due(self, namespace: str, target: StateTarget) -> bool:
        """Whether to read the pod now: never failed, changed since, or its retry is due."""
        held = self._held.get((namespace, target.name))
        return held is None or held[0] != target.version or self._clock() >= held[2]

    def failed(self, namespace: str, target: StateTarget) -> None:
        now, key = self._clock(), (namespace, target.name)
        held = self._held.get(key)
        failures = held[1] + 1 if held is not None and held[0] == target.version else 1
        if target.ready and failures > 1:
            # The kubelet reaches this runtime and the operator does not, twice: that lasts until
            # something changes the pod (which asks again at once), so wait the longest; with
            # more held than the rate allows in that time, as long as the rate needs.
            delay = max(self._max_s, len(self._held) / self._rate)
        else:  # a starting runtime binds its port within seconds: ask soon, then less often
            delay = min(self._max_s, self._base_s * 2 ** min(failures - 1, 30))
        self._held[key] = (target.version, failures, now + delay)
        if len(self._held) >= self._sweep_at:  # pods gone since: their retry time is long past
            self._held = {k: v for k, v in self._held.items() if v[2] > now - 2 * self._max_s}
            self._sweep_at = 2 * len(self._held) + 1024

    def read(self, namespace: str, name: str) -> None:
        self._held.pop((namespace, name), None)


class Answers:
    """The last document each pod answered with an ETag: (namespace, pod, path) -> (ETag, document,
    last use), for the next read's ``If-None-Match``. Kept :data:`ANSWER_KEEP_S` after its last use
    (a settled pod is read at every resync; a pod gone is swept)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic, keep_s: float = ANSWER_KEEP_S) -> None:
        self._clock, self._keep_s = clock, keep_s
        self._held: dict[tuple[str, str, str], tuple[str, BaseModel, float]] = {}
        self._sweep_at = 1024

    def __len__(self) -> int:
        return len(self._held)

    def etag(self, key: tuple[str, str, str]) -> str | None:
        held = self._held.get(key)
        return held[0] if held is not None else None

    def reuse(self, key: tuple[str, str, str]) -> BaseModel | None:
        """The document a 304 for ``key`` stands for (None: not held)."""
        held = self._held.get(key)
        if held is None:
            return None
        self._held[key] = (held[0], held[1], self._clock())
        return held[1]

    def put(self, key: tuple[str, str, str], etag: str | None, doc: BaseModel) -> None:
        now = self._clock()
        if etag is None:  # the server does not tag its answers: nothing to ask conditionally
            self._held.pop(key, None)
            return
        self._held[key] = (etag, doc, now)
        if len(self._held) >= self._sweep_at:
            self._held = {k: v for k, v in self._held.items() if v[2] > now - self._keep_s}
            self._sweep_at = 2 * len(self._held) + 1024

    def forget(self, key: tuple[str, str, str]) -> None:
        self._held.pop(key, None)


class Settled:
    """Ready pods whose runtime answered unchanged: (namespace, name) -> (pod version, state,
    unchanged answers, next read). A skipped pass uses the state held until the next read is due."""

    def __init__(self, base_s: float, max_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        self._base_s, self._max_s, self._clock = base_s, max_s, clock
        self._held: dict[tuple[str, str], tuple[str | None, RuntimeState, int, float]] = {}
        self._sweep_at = 1024

    def __len__(self) -> int:
        return len(self._held)

    def held(self, namespace: str, target: StateTarget) -> RuntimeState | None:
        """The state to use without asking: a Ready pod not changed since, before its next read."""
        held = self._held.get((namespace, target.name))
        if held is None or not target.ready or held[0] != target.version or self._clock() >= held[3]:
            return None
        return held[1]

    def answered(self, namespace: str, target: StateTarget, state: RuntimeState | None, *,
                 settled: bool = True) -> None:
        """What a read gave: the same state again in a skipped pass (``settled``) doubles the wait;
        a change, a failure, a pod that is not Ready or a full pass (which may have written what
        the runtimes act on: an adapter, a spec) starts again: asked at the next pass."""
        key, now = (namespace, target.name), self._clock()
        before = self._held.get(key)
        if state is None or not target.ready:
            self._held.pop(key, None)
            return
        same = before is not None and before[0] == target.version and (before[1] is state or before[1] == state)
        unchanged = before[2] + 1 if settled and same and before is not None else 0
        wait = min(self._max_s, self._base_s * 2 ** min(unchanged, 30)) if unchanged else 0.0
        self._held[key] = (target.version, state, unchanged, now + wait)
        if len(self._held) >= self._sweep_at:  # pods gone since: their next read is long past
            self._held = {k: v for k, v in self._held.items() if v[3] > now - 2 * self._max_s}
            self._sweep_at = 2 * len(self._held) + 1024


@functools.lru_cache(maxsize=32768)
def direct_url(pod_ip: str, port: int, path: str, query: tuple[tuple[str, str], ...] = ()) -> yarl.URL:
    """``http://<pod IP>:<port>/<path>?<query>``, built once per pod and not parsed again at each
    read (aiohttp takes a URL as it is)."""
    host = f"[{pod_ip}]" if ":" in pod_ip else pod_ip
    return yarl.URL(f"http://{host}:{port}/{path}").with_query(query)


class PodReader:
    """The runtime states and fetch progress of pods, read from their IPs or through the pod proxy."""

    def __init__(self, kube: Kube, *, timeout_s: float, via_proxy: bool = True, retry_base_s: float = 5.0,
                 settled_max_s: float = UNREADABLE_RETRY_MAX_S, clock: Callable[[], float] = time.monotonic) -> None:
        self._kube = kube
        #: Ready pods whose runtime answered unchanged: a skipped pass asks them less often.
        self.settled = Settled(retry_base_s, settled_max_s, clock=clock)
        #: Pods whose state could not be read, asked again after ``retry_base_s``, doubling.
        self.unreadable = Unreadable(retry_base_s, clock=clock)
        #: What each pod answered last with an ETag (direct reads ask with ``If-None-Match``).
        self.answers = Answers(clock=clock)
        self._timeout_s = timeout_s
        #: How long a direct read's connection is kept unused: past a settled runtime's next read.
        self.keepalive_s = max(KEEPALIVE_MIN_S, 2 * settled_max_s)
        #: Read through the API server's pod proxy (True) or straight from the pod IP.
        self._via_proxy = via_proxy
        self._session: aiohttp.ClientSession | None = None

    def _direct_session(self) -> aiohttp.ClientSession:
        # One session for every direct read: its connector keeps each runtime's connection alive
        # between resyncs, instead of a new session, connector and connection per read. Kept
        # past a settled runtime's longest wait and the resync that follows it (twice that wait):
        # at 120 s every settled read made a new connection, which costs the operator 2.2x the
        # CPU of a read on a kept one (bench/read_connections.py).
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(
                timeout=aiohttp.ClientTimeout(total=self._timeout_s),
                connector=aiohttp.TCPConnector(limit=0, keepalive_timeout=self.keepalive_s))
        return self._session

    async def close(self) -> None:
        """Close the direct reads' session (at the operator's shutdown)."""
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def _get_direct(self, pod_ip: str, port: int, path: str, query: Sequence[tuple[str, str]] = (),
                          etag: str | None = None) -> tuple[str | None, Any]:
        """``GET http://<pod IP>:<port>/<path>`` (the runtime port serves plain HTTP inside the
        cluster): the answer's ETag and JSON body; the body is :data:`NOT_MODIFIED` when ``etag``
        still matches (HTTP 304)."""

        headers = {"If-None-Match": etag} if etag else None
        async with self._direct_session().get(direct_url(pod_ip, port, path, tuple(query)),
                                              headers=headers) as response:
            if response.status == 304 and etag:
                return etag, NOT_MODIFIED
            response.raise_for_status()
            return response.headers.get("ETag"), await response.json(content_type=None)

    async def read_state(self, namespace: str, pod: str, port: int = DEFAULT_RUNTIME_PORT, *,
                         pod_ip: str | None = None) -> RuntimeState | None:
        """The runtime state of ``pod``, or ``None``: from ``pod_ip`` directly unless this reader
        reads through the API server's pod proxy (or the pod has no IP yet)."""
        state = await self._read(RuntimeState, STATE_PATH, namespace, pod, port, pod_ip, STATE_QUERY)
        if state is not None and state.health:  # a runtime that does not know ?omit=health
            state = state.model_copy(update={"health": {}})
        return state

    async def read_progress(self, namespace: str, pod: Mapping[str, Any]) -> FetchProgress | None:
        """A fetch pod's ``GET /progress`` (``None`` when not readable), like :meth:`read_state`."""
        return await self._read(FetchProgress, PROGRESS_PATH, namespace, pod["metadata"]["name"],
                                DEFAULT_PROGRESS_PORT, (pod.get("status") or {}).get("podIP"))

    async def _read(self, model: type[_Doc], path: str, namespace: str, pod: str, port: int,
                    pod_ip: str | None, query: Sequence[tuple[str, str]] = ()) -> _Doc | None:
        try:
            if not self._via_proxy:
                if not pod_ip:
                    return None
                key = (namespace, pod, path)
                etag, body = await self._get_direct(pod_ip, port, path, query, self.answers.etag(key))
                if body is NOT_MODIFIED:
                    held = self.answers.reuse(key)
                    if isinstance(held, model):
                        return held
                    self.answers.forget(key)  # cannot happen unless two models share a path
                    return None
                doc = model.model_validate(body)
                self.answers.put(key, etag, doc)
                return doc
            body = await self._kube.proxy_get(namespace, pod, port, path, query=query, timeout=self._timeout_s)
            return model.model_validate(body)
        except (aiohttp.ClientError, asyncio.TimeoutError) as error:
            logger.debug("%s of pod %s/%s not readable at %s: %s", path, namespace, pod, pod_ip, error)
        except ApiException as error:
            logger.debug("%s of pod %s/%s not readable: HTTP %s %s", path, namespace, pod, error.status,
                         error.reason)
        except urllib3.exceptions.HTTPError as error:
            logger.debug("%s of pod %s/%s not readable: %s", path, namespace, pod, error)
        except (ValueError, ValidationError) as error:  # JSONDecodeError is a ValueError
            logger.debug("%s of pod %s/%s is not a %s: %s", path, namespace, pod, model.__name__, error)
        return None

    async def read_states(self, namespace: str, pods: Sequence[Mapping[str, Any]],
                          port: int = DEFAULT_RUNTIME_PORT, *, settled: bool = False) -> dict[str, RuntimeState | None]:
        """States of the running pods (concurrently); pods not running get ``None`` unasked.
        ``settled``: as :meth:`read_targets`."""

        result: dict[str, RuntimeState | None] = dict.fromkeys(pod["metadata"]["name"] for pod in pods)
        result.update(await self.read_targets(namespace, state_targets(pods), port, settled=settled))
        return result

    async def read_targets(self, namespace: str, targets: Sequence[StateTarget],
                           port: int = DEFAULT_RUNTIME_PORT, *, settled: bool = False) -> dict[str, RuntimeState | None]:
        """States of ``targets`` (concurrently); ``None`` for one that fails, or that failed before
        and is not due again (:class:`Unreadable`). ``settled`` (a pass skipped because nothing
        changed, or a full pass that wrote nothing): a settled runtime not due again gives the
        state it gave last (:class:`Settled`)."""

        result: dict[str, RuntimeState | None] = {target.name: None for target in targets}
        due: list[StateTarget] = []
        for target in targets:
            held = self.settled.held(namespace, target) if settled else None
            if held is not None:
                result[target.name] = held
            elif self.unreadable.due(namespace, target):
                due.append(target)
        if len(due) == 1:  # most passes (one replica, or one due): no task to gather
            states = [await self.read_state(namespace, due[0].name, port, pod_ip=due[0].ip)]
        else:
            states = await asyncio.gather(*(self.read_state(namespace, target.name, port, pod_ip=target.ip)
                                            for target in due))
        for target, state in zip(due, states, strict=True):
            if state is None:
                self.unreadable.failed(namespace, target)
            else:
                self.unreadable.read(namespace, target.name)
            self.settled.answered(namespace, target, state, settled=settled)
            result[target.name] = state
        return result
