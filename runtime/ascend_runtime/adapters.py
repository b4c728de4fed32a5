"""The LoRA adapter reconciler: the desired set (the adapters file) against the engine's loaded set.

The operator mounts the adapters ConfigMap as a directory, so kubelet replaces the file in place
when the list changes and no pod restarts. While the engine serves (and once before the pod turns
Ready), :class:`AdapterReconciler` reads the file (``lora.adaptersFile``, every
``lora.pollIntervalS``), asks the engine what it has loaded (``GET /v1/models``: adapters are the
entries with a ``parent``), and closes the gap through vLLM's runtime endpoints
(``POST /v1/load_lora_adapter``, ``POST /v1/unload_lora_adapter``, with the launch's adapter token:
:mod:`ascend_runtime.adaptergate` refuses them to anyone else): new names are loaded,
removed ones unloaded, a name whose path changed is unloaded and loaded again. A failed load
or unload is retried after ``lora.retryInitialS``, doubling per failure up to ``lora.retryMaxS``;
the engine is never restarted for it. An adapter downloaded into the model cache (its entry has
a ``cacheMarker``) is loaded only once that marker exists and the directory holds the files it
lists (:func:`download_problem`); until then it is Failed with the reason, and retried the same
way. A file that cannot be read or parsed leaves the last good set in force (``/state``'s
``adaptersError`` says why). Each adapter's state is published in
``/state`` (``adapters``) and as ``ascend_llm_lora_*`` metrics. Only the leader of a multi-node
group runs it: the engine's API server is there.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import hashlib
import json
import logging
import os
import stat
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import yaml

from ascend_runtime.adaptergate import token_headers
from ascend_runtime.cachelayout import CacheMarker
from ascend_runtime.config import (
    Adapter,
    AdapterPhase,
    AdapterSet,
    AdapterStatus,
    ConfigError,
    LoraConfig,
    parse_adapter_set,
)
from ascend_runtime.state import StateStore
from ascend_runtime.warmup import api_key_headers

log = logging.getLogger(__name__)

#: Seconds one load may take (the engine reads the adapter's weights from disk).
LOAD_TIMEOUT_S = 120.0
#: Seconds an unload or a /v1/models query may take.
QUERY_TIMEOUT_S = 10.0
#: Seconds after a load or unload ended during which the engine's log may still show its error.
ENGINE_CALL_LOG_GRACE_S = 2.0


class ActionKind(str, enum.Enum):
    LOAD = "load"
    UNLOAD = "unload"
    RELOAD = "reload"  # the path changed: unload, then load from the new path


@dataclass(frozen=True)
class Action:
    kind: ActionKind
    name: str
    path: str | None = None


def plan_actions(desired: Mapping[str, str], loaded: Mapping[str, str]) -> list[Action]:
    """What turns ``loaded`` into ``desired`` (both name -> path): unloads first, to free slots."""

    unloads = [Action(ActionKind.UNLOAD, name) for name in sorted(loaded) if name not in desired]
    reloads = [Action(ActionKind.RELOAD, name, path) for name, path in desired.items()
               if name in loaded and loaded[name] != path]
    loads = [Action(ActionKind.LOAD, name, path) for name, path in desired.items() if name not in loaded]
    return unloads + reloads + loads


@dataclass(frozen=True)
class Backoff:
    """Exponential retry delays: ``initial`` after the first failure, doubling, capped at ``maximum``."""

    initial: float
    maximum: float

    def delay(self, failures: int) -> float:
        if failures < 1:
            return 0.0
        return min(self.initial * 2.0 ** min(failures - 1, 62), self.maximum)


def _yaml(data: bytes, path: Path) -> object:
    """The parsed bytes (the ones hashed: kubelet may swap the file between two reads)."""

    try:
        return yaml.safe_load(data.decode("utf-8", errors="replace"))
    except yaml.YAMLError as error:
        raise ConfigError(f"{path}: not valid YAML: {error}") from None


class AdapterFile:
    """The desired set from the adapters file, parsed again only when its content changes."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._digest: str | None = None
        self.current = AdapterSet()
        self.error: str | None = None

    def read(self) -> AdapterSet:
        """The last good set; a bad file sets :attr:`error` and keeps the set before it."""

        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            data = b""  # no ConfigMap mounted: no adapters
        except OSError as error:
            self.error = f"{self.path}: cannot read the adapter set: {error.strerror}"
            return self.current
        digest = hashlib.sha256(data).hexdigest()
        if digest == self._digest:
            return self.current
        self._digest = digest
        try:
            self.current = parse_adapter_set(_yaml(data, self.path), str(self.path))
            self.error = None
            log.info("adapter set from %s: %s", self.path,
                     ", ".join(f"{a.name}={a.path}" for a in self.current.adapters) or "none")
        except ConfigError as error:
            self.error = f"{error}; keeping the previous set"
            log.warning("%s", self.error)
        return self.current


def download_problem(adapter: Adapter) -> str | None:
    """Why a downloaded adapter cannot be loaded yet: no completion marker, or its directory does
    not hold what the marker lists; None when it can (or it is no download)."""

    if adapter.cache_marker is None:
        return None
    try:
        marker = CacheMarker.model_validate_json(Path(adapter.cache_marker).read_text(encoding="utf-8"))
    except FileNotFoundError:
        return f"the adapter's download is not complete: no marker at {adapter.cache_marker}"
    except (OSError, ValueError) as error:
        first = str(error).splitlines()[0] if str(error) else type(error).__name__
        return f"the adapter's cache marker {adapter.cache_marker} cannot be used: {first}"
    incomplete = marker.incomplete(adapter.path)
    return f"the adapter's download is incomplete: {incomplete}" if incomplete is not None else None


def _readable(path: str) -> bool:
    return os.access(path, os.R_OK)


def access_problem(adapter: Adapter, readable: Callable[[str], bool] = _readable) -> str | None:
    """Files in the adapter's directory that this process (the engine's user) cannot read, which
    vLLM reports as "No adapter found"; None when all can be read or the directory is not there
    (vLLM's own error names the path then)."""

    try:
        files = sorted((entry.name, entry.path) for entry in os.scandir(adapter.path) if entry.is_file())
    except FileNotFoundError:
        return None
    except OSError as error:
        return f"the adapter directory {adapter.path} cannot be listed by the engine's user (uid {os.getuid()}): " \
               f"{error.strerror}"
    unreadable = [(name, path) for name, path in files if not readable(path)]
    if not unreadable:
        return None
    info = os.stat(unreadable[0][1])
    return (f"{', '.join(name for name, _ in unreadable)} in {adapter.path} not readable by the engine's user "
            f"(uid {os.getuid()}; {unreadable[0][0]}: mode {stat.S_IMODE(info.st_mode):04o}, owner uid {info.st_uid}): "
            "make the adapter's files readable by that user, e.g. mode 0644")


class AdapterRequestError(RuntimeError):
    """The engine refused or failed a load or unload; the message is the engine's."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


def _error_message(status: int, text: str) -> str:
    """vLLM's error body is ``{"error": {"message": ...}}``; fall back to the raw text."""

    try:
        body = json.loads(text)
        message = body.get("error", {}).get("message") if isinstance(body, dict) else None
    except (ValueError, AttributeError):
        message = None
    return f"HTTP {status}: {message or text.strip()[:300]}"


class EngineAdapters:
    """vLLM's adapter endpoints on the engine's API server; ``token`` is the launch's adapter token
    (:mod:`ascend_runtime.adaptergate`), sent with every load and unload."""

    def __init__(self, base_url: str, token: str | None = None) -> None:
        self.base_url = base_url
        self.token = token

    async def loaded(self) -> dict[str, str]:
        """Loaded adapters, name -> path: the ``/v1/models`` entries that have a ``parent``."""

        timeout = aiohttp.ClientTimeout(total=QUERY_TIMEOUT_S)
        async with aiohttp.ClientSession(timeout=timeout, headers=api_key_headers()) as session:
            async with session.get(f"{self.base_url}/v1/models") as response:
                text = await response.text()
                if response.status != 200:
                    raise AdapterRequestError(_error_message(response.status, text), response.status)
                body = await response.json(content_type=None)
        return {card["id"]: str(card.get("root") or "") for card in body.get("data", [])
                if isinstance(card, dict) and card.get("parent")}

    async def load(self, name: str, path: str) -> None:
        await self._post("/v1/load_lora_adapter", {"lora_name": name, "lora_path": path}, LOAD_TIMEOUT_S)

    async def unload(self, name: str) -> None:
        await self._post("/v1/unload_lora_adapter", {"lora_name": name}, QUERY_TIMEOUT_S)

    async def _post(self, route: str, body: dict, seconds: float) -> None:
        timeout = aiohttp.ClientTimeout(total=seconds)
        try:
            headers = {**api_key_headers(), **token_headers(self.token)}
            async with aiohttp.ClientSession(timeout=timeout, headers=headers) as session:
                async with session.post(f"{self.base_url}{route}", json=body) as response:
                    if response.status != 200:
                        raise AdapterRequestError(_error_message(response.status, await response.text()),
                                                  response.status)
        except asyncio.TimeoutError:
            raise AdapterRequestError(f"{route} did not answer within {seconds:g} s") from None
        except aiohttp.ClientError as error:
            raise AdapterRequestError(f"{route} failed: {error.__class__.__name__}: {error}") from None


class AdapterReconciler:
    """One job: make the engine's loaded adapters the desired set (module docstring)."""

    def __init__(self, lora: LoraConfig, engine: EngineAdapters, store: StateStore, base_names: list[str],
                 *, clock: Callable[[], float] = time.time, monotonic: Callable[[], float] = time.monotonic) -> None:
        self.lora = lora
        self.engine = engine
        self.store = store
        self.base_names = base_names
        self.file = AdapterFile(lora.adapters_file)
        self.backoff = Backoff(lora.retry_initial_s, lora.retry_max_s)
        self.clock = clock
        self.monotonic = monotonic
        self.statuses: dict[str, AdapterStatus] = {}
        self._retry_at: dict[str, float] = {}  # name -> monotonic time of the next attempt
        self._calls_in_flight = 0
        self._last_call_ended = float("-inf")

    def engine_call_recent(self) -> bool:
        """A load or unload is under way or just ended (within :data:`ENGINE_CALL_LOG_GRACE_S`).

        vLLM logs a refused load as a worker exception ("WorkerProc hit an exception", then
        "Invocation of add_lora method failed") and keeps serving: the leader does not take such
        a line for an engine failure then (a dead engine still fails its /health).
        """

        return self._calls_in_flight > 0 or self.monotonic() - self._last_call_ended < ENGINE_CALL_LOG_GRACE_S

    @contextlib.contextmanager
    def _engine_call(self) -> Iterator[None]:
        self._calls_in_flight += 1
        try:
            yield
        finally:
            self._calls_in_flight -= 1
            self._last_call_ended = self.monotonic()

    async def run(self) -> None:
        """Reconcile every ``lora.pollIntervalS`` until cancelled."""

        while True:
            await asyncio.sleep(self.lora.poll_interval_s)
            await self.round()

    async def round(self) -> None:
        """One :meth:`reconcile_once` whose unexpected failure is logged, never raised: the
        serving engine must not be stopped for an adapter, and the next round tries again."""

        try:
            await self.reconcile_once()
        except asyncio.CancelledError:
            raise
        except Exception as error:  # noqa: BLE001
            log.warning("adapter reconcile round failed: %r", error)

    async def reconcile_once(self) -> None:
        desired_set = self.file.read()
        desired = desired_set.paths()
        for name in [name for name in desired if name in self.base_names]:
            # vLLM refuses it (400); a standing conflict is retried with backoff like any failure.
            self._fail(name, desired.pop(name), f"adapter name {name!r} is the base model's served name; "
                       "rename the adapter")
        try:
            loaded = await self.engine.loaded()
        except (AdapterRequestError, aiohttp.ClientError, asyncio.TimeoutError, ValueError) as error:
            log.warning("cannot list the engine's adapters (%s); trying again in %g s", error,
                        self.lora.poll_interval_s)
            self._publish(desired_set)
            return
        for name, path in loaded.items():
            if desired.get(name) == path:
                self._mark_loaded(name, path, first_seen=True)
        entries = {adapter.name: adapter for adapter in desired_set.adapters}
        for action in plan_actions(desired, loaded):
            if self._retry_at.get(action.name, 0.0) > self.monotonic():
                continue
            problem = (download_problem(entries[action.name]) or access_problem(entries[action.name])
                       if action.kind is not ActionKind.UNLOAD else None)
            if problem is not None:
                self._fail(action.name, action.path, problem)
                continue
            await self._execute(action, loaded)
        in_file = {adapter.name for adapter in desired_set.adapters}
        for name in [name for name in self.statuses if name not in in_file and name not in loaded]:
            self.statuses.pop(name)  # gone from the file and from the engine
            self._retry_at.pop(name, None)
        self._publish(desired_set)

    async def _execute(self, action: Action, loaded: Mapping[str, str]) -> None:
        name = action.name
        if action.kind in (ActionKind.UNLOAD, ActionKind.RELOAD):
            self._set(name, loaded.get(name), AdapterPhase.UNLOADING)
            try:
                with self._engine_call():
                    await self.engine.unload(name)
            except AdapterRequestError as error:
                if error.status != 404:  # 404: not loaded any more, which is what was wanted
                    self.store.metrics.lora_operations.labels("unload", "failure").inc()
                    self._fail(name, loaded.get(name), f"unload failed: {error}", AdapterPhase.UNLOADING)
                    return
            self.store.metrics.lora_operations.labels("unload", "success").inc()
            log.info("LoRA adapter %s unloaded", name)
            if action.kind is ActionKind.UNLOAD:
                self.statuses.pop(name, None)
                self._retry_at.pop(name, None)
                return
        assert action.path is not None
        self._set(name, action.path, AdapterPhase.LOADING)
        self._publish_current()
        try:
            with self._engine_call():
                await self.engine.load(name, action.path)
        except AdapterRequestError as error:
            self.store.metrics.lora_operations.labels("load", "failure").inc()
            self._fail(name, action.path, f"load failed: {error}")
            return
        self.store.metrics.lora_operations.labels("load", "success").inc()
        log.info("LoRA adapter %s loaded from %s", name, action.path)
        self._mark_loaded(name, action.path)

    # -- statuses ------------------------------------------------------------------------
    def _set(self, name: str, path: str | None, state: AdapterPhase) -> AdapterStatus:
        status = self.statuses.get(name)
        if status is None:
            status = self.statuses[name] = AdapterStatus(name=name, path=path, state=state)
        status.state = state
        if path is not None:
            status.path = path
        return status

    def _mark_loaded(self, name: str, path: str, first_seen: bool = False) -> None:
        status = self.statuses.get(name)
        if first_seen and status is not None and status.state is AdapterPhase.LOADED and status.path == path:
            return
        status = self._set(name, path, AdapterPhase.LOADED)
        status.loaded_at = self.clock()
        status.last_error = None
        status.failures = 0
        status.next_retry_at = None
        self._retry_at.pop(name, None)

    def _fail(self, name: str, path: str | None, message: str, state: AdapterPhase = AdapterPhase.FAILED) -> None:
        status = self._set(name, path, state)
        if status.last_error == message and name in self._retry_at and self._retry_at[name] > self.monotonic():
            return  # a standing conflict, already counted
        status.last_error = message
        status.failures += 1
        delay = self.backoff.delay(status.failures)
        self._retry_at[name] = self.monotonic() + delay
        status.next_retry_at = self.clock() + delay
        log.warning("LoRA adapter %s: %s (attempt %d; next in %.1f s)", name, message, status.failures, delay)

    def _publish(self, desired_set: AdapterSet) -> None:
        self.store.set_adapters(self._ordered(desired_set), self.file.error)

    def _publish_current(self) -> None:
        self.store.set_adapters(self._ordered(self.file.current), self.file.error)

    def _ordered(self, desired_set: AdapterSet) -> list[AdapterStatus]:
        """Desired adapters in file order, then any still being unloaded."""

        names = [a.name for a in desired_set.adapters if a.name in self.statuses]
        names += sorted(name for name in self.statuses if name not in names)
        return [self.statuses[name].model_copy() for name in names]
