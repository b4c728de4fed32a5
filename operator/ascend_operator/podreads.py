"""Reads of what the pods themselves serve: a runtime's ``GET /state``, a fetch pod's ``GET /progress``.

A second client beside :class:`ascend_operator.k8s.Kube`: in a pod the operator reads each pod's
IP over plain HTTP; outside the cluster (``STATE_READ`` proxy) it reads through the API server's
pod proxy, which :meth:`Kube.proxy_get` sends (``k8s`` stays the one module that talks to the API
server). A read that fails for any reason (no pod IP yet, runtime not listening, timeout,
malformed answer) gives ``None`` ("unknown"), logged at debug.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping, Sequence
from typing import Any, TypeVar

import aiohttp
import urllib3
from ascend_runtime.cachelayout import DEFAULT_PROGRESS_PORT, FetchProgress
from ascend_runtime.config import DEFAULT_RUNTIME_PORT, RuntimeState
from kubernetes.client.exceptions import ApiException
from pydantic import BaseModel, ValidationError

from ascend_operator.k8s import Kube

logger = logging.getLogger(__name__)

#: The state document the runtime serves on its port (see ascend_runtime's server).
STATE_PATH = "state"
#: What a fetch Job's pod serves on its port (ascend_runtime.fetch).
PROGRESS_PATH = "progress"
_Doc = TypeVar("_Doc", bound=BaseModel)


class PodReader:
    """The runtime states and fetch progress of pods, read from their IPs or through the pod proxy."""

    def __init__(self, kube: Kube, *, timeout_s: float, via_proxy: bool = True) -> None:
        self._kube = kube
        self._timeout_s = timeout_s
        #: Read through the API server's pod proxy (True) or straight from the pod IP.
        self._via_proxy = via_proxy

    async def _get_direct(self, pod_ip: str, port: int, path: str = STATE_PATH) -> Any:
        """``GET http://<pod IP>:<port>/<path>`` (the runtime port serves plain HTTP inside the cluster)."""

        host = f"[{pod_ip}]" if ":" in pod_ip else pod_ip
        timeout = aiohttp.ClientTimeout(total=self._timeout_s)
        async with aiohttp.ClientSession(timeout=timeout) as session, \
                session.get(f"http://{host}:{port}/{path}") as response:
            response.raise_for_status()
            return await response.json(content_type=None)

    async def read_state(self, namespace: str, pod: str, port: int = DEFAULT_RUNTIME_PORT, *,
                         pod_ip: str | None = None) -> RuntimeState | None:
        """The runtime state of ``pod``, or ``None``: from ``pod_ip`` directly unless this reader
        reads through the API server's pod proxy (or the pod has no IP yet)."""
        return await self._read(RuntimeState, STATE_PATH, namespace, pod, port, pod_ip)

    async def read_progress(self, namespace: str, pod: Mapping[str, Any]) -> FetchProgress | None:
        """A fetch pod's ``GET /progress`` (``None`` when not readable), like :meth:`read_state`."""
        return await self._read(FetchProgress, PROGRESS_PATH, namespace, pod["metadata"]["name"],
                                DEFAULT_PROGRESS_PORT, (pod.get("status") or {}).get("podIP"))

    async def _read(self, model: type[_Doc], path: str, namespace: str, pod: str, port: int,
                    pod_ip: str | None) -> _Doc | None:
        try:
            if not self._via_proxy:
                if not pod_ip:
                    return None
                return model.model_validate(await self._get_direct(pod_ip, port, path))
            body = await self._kube.proxy_get(namespace, pod, port, path, timeout=self._timeout_s)
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
                          port: int = DEFAULT_RUNTIME_PORT) -> dict[str, RuntimeState | None]:
        """States of the running pods (concurrently); pods not running get ``None`` unasked."""

        names = [pod["metadata"]["name"] for pod in pods]
        running = [name for pod, name in zip(pods, names, strict=True)
                   if (pod.get("status") or {}).get("phase") == "Running"
                   and not pod["metadata"].get("deletionTimestamp")]
        ips = {pod["metadata"]["name"]: (pod.get("status") or {}).get("podIP") for pod in pods}
        states = await asyncio.gather(*(self.read_state(namespace, name, port, pod_ip=ips[name])
                                        for name in running))
        result: dict[str, RuntimeState | None] = dict.fromkeys(names)
        result.update(zip(running, states, strict=True))
        return result
