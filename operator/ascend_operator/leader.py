"""Leader election of operator replicas with a ``coordination.k8s.io`` Lease.

Every replica runs kopf (standalone) and watches, so its store stays current and its liveness
endpoint answers; only the replica holding the Lease runs reconciles (its work queue is paused
until then). A leader that cannot renew the Lease stops the process, as controller-runtime's
managers do: the kubelet restarts it as a standby, and no two replicas ever write at once.

The election itself is the ``kubernetes`` client's (``kubernetes.leaderelection``, a LeaseLock
with the usual 15 s lease, 10 s renew deadline, 2 s retry); it runs in its own thread and hands
its two events to the event loop.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass

import kubernetes
from kubernetes.leaderelection import electionconfig, leaderelection
from kubernetes.leaderelection.resourcelock.leaselock import LeaseLock

logger = logging.getLogger(__name__)

#: Where a pod's namespace is, when POD_NAMESPACE is not set (every pod has this file).
SERVICE_ACCOUNT_NAMESPACE = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"


@dataclass(frozen=True)
class LeaseTiming:
    lease_duration_s: int = 15  # the Lease stores whole seconds
    renew_deadline_s: float = 10.0
    retry_period_s: float = 2.0


def own_namespace(explicit: str | None) -> str:
    """The Lease's namespace: the setting, else POD_NAMESPACE, else the pod's own namespace."""

    if explicit:
        return explicit
    if os.environ.get("POD_NAMESPACE"):
        return os.environ["POD_NAMESPACE"]
    try:
        with open(SERVICE_ACCOUNT_NAMESPACE, encoding="utf-8") as file:
            return file.read().strip()
    except OSError:
        raise ValueError("leader election needs the Lease's namespace: set ASCEND_LLM_OPERATOR_LEASE_NAMESPACE "
                         "or POD_NAMESPACE (the chart sets it)") from None


def identity() -> str:
    """This replica's holder identity: the pod name and a random suffix (a restarted container is
    a new candidate; the Lease shows which pod leads)."""

    pod = os.environ.get("POD_ID") or os.environ.get("HOSTNAME") or "ascend-llm-operator"
    return f"{pod}_{uuid.uuid4().hex[:8]}"


class LeaderElector:
    """Runs the election in a thread; calls ``on_leading`` in the loop when this replica leads,
    and stops the process (SIGTERM to itself) when it loses the Lease."""

    def __init__(self, api_client: kubernetes.client.ApiClient, name: str, namespace: str,
                 on_leading: Callable[[], None], timing: LeaseTiming | None = None) -> None:
        self._client = api_client
        self._name, self._namespace = name, namespace
        self._on_leading = on_leading
        self._timing = timing or LeaseTiming()
        self.identity = identity()
        self._loop: asyncio.AbstractEventLoop | None = None

    def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        # The library logs every retry of a standby at INFO; its warnings are what matters.
        logging.getLogger("leaderelection").setLevel(logging.WARNING)
        threading.Thread(target=self._run, name="ascend-llm-leader-election", daemon=True).start()
        logger.info("leader election: candidate %s for Lease %s/%s", self.identity, self._namespace, self._name)

    def _run(self) -> None:
        try:
            lock = LeaseLock(self._name, self._namespace, self.identity)
            lock.api_instance = kubernetes.client.CoordinationV1Api(self._client)
            config = electionconfig.Config(
                lock, self._timing.lease_duration_s, self._timing.renew_deadline_s, self._timing.retry_period_s,
                onstarted_leading=self._started, onstopped_leading=self._stopped)
            leaderelection.LeaderElection(config).run()
        except BaseException as error:  # the library ends its thread with sys.exit on bad timing
            logger.error("leader election failed (%s: %s); stopping", type(error).__name__, error)
            os.kill(os.getpid(), signal.SIGTERM)

    def _started(self) -> None:
        logger.info("leader election: %s leads; reconciling", self.identity)
        assert self._loop is not None
        self._loop.call_soon_threadsafe(self._on_leading)

    def _stopped(self) -> None:
        logger.error("leader election: %s lost the Lease %s/%s; stopping so that another replica leads",
                     self.identity, self._namespace, self._name)
        os.kill(os.getpid(), signal.SIGTERM)
