"""The operator-tier harness: run the real operator in the test's loop, and test helpers.

``OperatorRun`` runs ``ascend_operator.main``'s handlers (kopf's default registry) in the test's
event loop via ``kopf.spawn_tasks`` + ``kopf.run_tasks``, standalone, logging in through the
settings' ``api_server`` (the production login piggybacks on the kubernetes client instead).
The helpers create resources through the API, build pods as a kubelet would report them, and
wait for conditions. (A separate module, not conftest.py: test modules import from it, and other
test directories have their own conftest modules.)
"""

from __future__ import annotations

import asyncio
import copy
import time
from collections.abc import Callable
from typing import Any

import kopf
import pytest
from ascend_operator.api import API_VERSION, KIND, PLURAL
from ascend_operator.builders.common import (
    CONFIG_HASH_ANNOTATION,
    LWS_GROUP_INDEX_LABEL,
    LWS_WORKER_INDEX_LABEL,
    selector_labels,
)
from ascend_operator.settings import OperatorSettings
from k8s_emulator import RealisticEmulator

NAMESPACE = "llm"
#: Seconds between resyncs in tests: short, so pod changes reach the status quickly.
RESYNC_S = 0.25
#: The longest a test waits for the operator to converge (it normally takes well under a second).
CONVERGE_S = 10.0
#: The longest the operator may take to start (first client import, discovery); generous because
#: a loaded 2-core CI machine can be several times slower than a quiet one.
START_S = 30.0
#: The longest stopping may take: kopf gives a daemon in mid-pass its cancellation timeout (10 s)
#: and leftover tasks 5 s more; a normal stop takes a fraction of a second.
STOP_S = 30.0

DEPLOYMENTS = ("apps/v1", "deployments")
CONFIGMAPS = ("v1", "configmaps")
SERVICES = ("v1", "services")
PDBS = ("policy/v1", "poddisruptionbudgets")
PODS = ("v1", "pods")
LEADERWORKERSETS = ("leaderworkerset.x-k8s.io/v1", "leaderworkersets")
HPAS = ("autoscaling/v2", "horizontalpodautoscalers")
SCALED_OBJECTS = ("keda.sh/v1alpha1", "scaledobjects")
EVENTS = ("v1", "events")
RESOURCES = (API_VERSION, PLURAL)


def make_settings(url: str, **overrides: Any) -> OperatorSettings:
    # Discovery refreshes every resync in tests, so a test that serves or withholds an add-on API
    # sees the operator react within a pass or two.
    values: dict[str, Any] = {"standalone": True, "resync_interval_s": RESYNC_S, "status_read_timeout_s": 2.0,
                              "discovery_ttl_s": RESYNC_S, "progress_poll_interval_s": RESYNC_S,
                              # The tests' hostPath models (the default allows no host path).
                              "host_path_prefixes": ["/m", "/models"]}
    values.update(overrides)
    settings = OperatorSettings(**values)
    return settings.model_copy(update={"api_server": url})


class _NotTheOperators:
    """The tasks ``kopf.run_tasks`` must leave alone when it stops: those that existed before the
    operator started, the task stopping it, and the emulator's server-side connection tasks
    (aiohttp's), which end by themselves once the operator's clients disconnect."""

    def __init__(self) -> None:
        self.tasks: set[asyncio.Task[Any]] = set(asyncio.all_tasks())

    def __contains__(self, task: object) -> bool:
        if task in self.tasks:
            return True
        coro = task.get_coro() if isinstance(task, asyncio.Task) else None
        return type(coro).__name__ == "coroutine" and getattr(coro, "__qualname__", "").startswith(
            ("RequestHandler.", "RealisticEmulator.", "BaseProtocol."))

    def __iter__(self) -> Any:
        return iter(self.tasks)

    def __len__(self) -> int:
        return len(self.tasks)


class OperatorRun:
    """The real operator in this event loop; start, stop and restart it."""

    def __init__(self, url: str, settings: OperatorSettings) -> None:
        import ascend_operator.main  # noqa: F401  (registers the handlers in kopf's default registry)

        self.url = url
        self.settings = settings
        self._task: asyncio.Task[None] | None = None
        self._stop: asyncio.Event | None = None

    async def start(self) -> None:
        from ascend_operator.handlers.handle_startup import SETTINGS_KEY

        self._ignored = _NotTheOperators()
        self._stop = asyncio.Event()
        ready = asyncio.Event()
        tasks = await kopf.spawn_tasks(
            clusterwide=True, standalone=True, ready_flag=ready, stop_flag=self._stop,
            memo=kopf.Memo({SETTINGS_KEY: self.settings}), settings=kopf.OperatorSettings(),
        )
        self._task = asyncio.create_task(kopf.run_tasks(tasks, ignored=self._ignored))
        await asyncio.wait_for(ready.wait(), START_S)

    async def stop(self) -> None:
        if self._task is None or self._stop is None:
            return
        current = asyncio.current_task()
        if current is not None:
            self._ignored.tasks.add(current)
        self._stop.set()
        await asyncio.wait_for(self._task, STOP_S)
        self._task = None

    async def restart(self) -> None:
        await self.stop()
        await self.start()


# ----------------------------------------------------------------------------- helpers


async def wait_for(check: Callable[[], Any], timeout: float = CONVERGE_S, what: str = "") -> Any:
    """Poll ``check`` until it returns something truthy; fail with ``what`` after ``timeout``."""

    deadline = time.monotonic() + timeout
    while True:
        result = check()
        if result:
            return result
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout}s waiting for {what or check}")
        await asyncio.sleep(0.02)


async def settle(emulator: RealisticEmulator, quiet: float = 3 * RESYNC_S, timeout: float = CONVERGE_S) -> None:
    """Wait until no write has been sent for ``quiet`` seconds (the operator has converged)."""

    deadline = time.monotonic() + timeout
    count, since = len(emulator.writes()), time.monotonic()
    while time.monotonic() - since < quiet:
        await asyncio.sleep(0.02)
        if len(emulator.writes()) != count:
            count, since = len(emulator.writes()), time.monotonic()
        if time.monotonic() > deadline:
            pytest.fail("the operator kept writing; it did not converge")


def resource(name: str, spec: dict[str, Any], namespace: str = NAMESPACE) -> dict[str, Any]:
    return {"apiVersion": API_VERSION, "kind": KIND, "metadata": {"name": name, "namespace": namespace},
            "spec": copy.deepcopy(spec)}


async def api(emulator: RealisticEmulator, method: str, path: str, body: Any = None,
              content_type: str = "application/merge-patch+json") -> Any:
    """One request through the emulator's HTTP API (as kubectl would send it)."""

    headers = {"Content-Type": content_type} if body is not None else {}
    async with emulator.request(method, path, json=body, headers=headers) as response:
        data = await response.json()
        assert response.status < 300, f"{method} {path}: {response.status} {data}"
        return data


def cr_path(name: str | None = None, namespace: str = NAMESPACE, subresource: str = "") -> str:
    group, version = API_VERSION.split("/")
    path = f"/apis/{group}/{version}/namespaces/{namespace}/{PLURAL}"
    if name:
        path += f"/{name}"
    if subresource:
        path += f"/{subresource}"
    return path


async def apply_resource(emulator: RealisticEmulator, name: str, spec: dict[str, Any],
                         namespace: str = NAMESPACE) -> dict[str, Any]:
    return await api(emulator, "POST", cr_path(namespace=namespace), resource(name, spec, namespace), "application/json")


def get_resource(emulator: RealisticEmulator, name: str, namespace: str = NAMESPACE) -> dict[str, Any] | None:
    return emulator.get(*RESOURCES, namespace, name)


def pod(
    owner: str,
    index: int,
    emulator: RealisticEmulator,
    *,
    namespace: str = NAMESPACE,
    phase: str = "Running",
    ready: bool = True,
    scheduled: tuple[str, str] | None = None,
    waiting: str | None = None,
    current: bool = True,
) -> dict[str, Any]:
    """A pod of resource ``owner`` as the Deployment controller and kubelet would report it.

    ``scheduled=(reason, message)`` makes it unschedulable; ``waiting`` sets a container waiting
    reason (CrashLoopBackOff); ``current=False`` gives it an outdated template hash.
    """

    deployment = emulator.get(*DEPLOYMENTS, namespace, owner) or {}
    template = (deployment.get("spec") or {}).get("template") or {}
    labels = (template.get("metadata") or {}).get("labels") or selector_labels(owner)  # as the ReplicaSet copies them
    return _pod_from_template(template, f"{owner}-{index}", labels, namespace=namespace,
                              phase=phase, ready=ready, scheduled=scheduled, waiting=waiting, current=current)


def lws_pod(owner: str, group: int, worker: int, emulator: RealisticEmulator, *, namespace: str = NAMESPACE,
            **kwargs: Any) -> dict[str, Any]:
    """A pod of group ``group`` of the resource's LeaderWorkerSet as LWS names and labels it:
    ``<lws>-<group>`` for the leader (worker 0), ``<lws>-<group>-<worker>`` for the workers."""

    lws_name = f"{owner}-lws"
    lws = emulator.get(*LEADERWORKERSETS, namespace, lws_name) or {}
    role = "leaderTemplate" if worker == 0 else "workerTemplate"
    template = ((lws.get("spec") or {}).get("leaderWorkerTemplate") or {}).get(role) or {}
    name = f"{lws_name}-{group}" if worker == 0 else f"{lws_name}-{group}-{worker}"
    labels = {**((template.get("metadata") or {}).get("labels") or selector_labels(owner)),
              LWS_GROUP_INDEX_LABEL: str(group), LWS_WORKER_INDEX_LABEL: str(worker)}
    return _pod_from_template(template, name, labels, namespace=namespace, **kwargs)


def _pod_from_template(
    template: dict[str, Any],
    name: str,
    labels: dict[str, str],
    *,
    namespace: str = NAMESPACE,
    phase: str = "Running",
    ready: bool = True,
    scheduled: tuple[str, str] | None = None,
    waiting: str | None = None,
    current: bool = True,
) -> dict[str, Any]:
    config_hash = (template.get("metadata") or {}).get("annotations", {}).get(CONFIG_HASH_ANNOTATION, "")
    container = ((template.get("spec") or {}).get("containers") or [{}])[0]
    image = container.get("image", "runtime:test")
    conditions = [{"type": "PodScheduled", "status": "True"}]
    if scheduled is not None:
        conditions = [{"type": "PodScheduled", "status": "False", "reason": scheduled[0], "message": scheduled[1]}]
        phase, ready = "Pending", False
    conditions.append({"type": "Ready", "status": "True" if ready else "False"})
    container_status: dict[str, Any] = {"name": "engine", "ready": ready, "restartCount": 0, "image": image,
                                        "state": {"running": {"startedAt": "2026-12-01T00:00:00Z"}}}
    if waiting:
        container_status["state"] = {"waiting": {"reason": waiting, "message": "back-off restarting"}}
    spec_container: dict[str, Any] = {"name": "engine", "image": image}
    if container.get("resources"):  # what the scheduler (and the status's NPU count) looks at
        spec_container["resources"] = copy.deepcopy(container["resources"])
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {
            "name": name, "namespace": namespace,
            "labels": dict(labels),
            "annotations": {CONFIG_HASH_ANNOTATION: config_hash if current else "outdated"},
        },
        "spec": {"containers": [spec_container]},
        "status": {"phase": phase, "conditions": conditions,
                   "containerStatuses": [container_status] if scheduled is None else []},
    }
