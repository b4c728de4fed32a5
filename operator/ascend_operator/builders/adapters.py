"""LoRA adapters: the adapters ConfigMap and the volumes the adapters are read from (pure).

The adapter *set* lives in its own ConfigMap (``<name>-adapters``, key ``adapters.yaml``), which
the pod sees as ``/etc/ascend-llm/adapters/adapters.yaml`` through a projected volume (no
``subPath``), so the kubelet replaces the file in running pods and the runtime loads and
unloads adapters without a restart. Neither the set nor its ConfigMap is part of the pod
template or its config hash.

The adapters' *files* need volumes, and a new volume is a new pod template (a rollout). So each
distinct volume (one PVC, one node directory) is mounted once, read-only, at
``/mnt/adapters/<volume>``, named by a hash of what it is (not by position), and an adapter is a
directory inside it: adding or removing an adapter on a volume already mounted changes only the
ConfigMap; adding the first adapter of another volume, or removing the last one of a volume,
rolls the pods.

A hub adapter (``source.huggingFace`` / ``modelScope``) needs no volume of its own: its fetch Job
(:func:`ascend_operator.builders.modelcache.plan_adapter_fetches`) downloads it into the model
cache, which the serving pods mount at ``models/`` whenever LoRA is on. Its entry (the snapshot's
directory and its completion marker) enters the ConfigMap only once that Job has completed, so a
pod never tries to load a half-downloaded adapter; adding or removing one changes only the
ConfigMap.
"""

from __future__ import annotations

import enum
import posixpath
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import yaml
from ascend_runtime.config import (
    ADAPTERS_FILE_KEY,
    DEFAULT_ADAPTERS_PATH,
    Adapter,
    AdapterSet,
    ConfigError,
    parse_adapter_set,
)

from ascend_operator.api import AscendLLMDeploymentSpec, LoraAdapterSpec
from ascend_operator.builders.common import common_labels, content_hash, with_spec_hash
from ascend_operator.builders.modelcache import AdapterFetch

#: Where each adapter volume is mounted in the pod.
ADAPTERS_MOUNT_ROOT = "/mnt/adapters"
#: The component label of the adapters ConfigMap.
COMPONENT_ADAPTERS = "adapters"
#: The adapters file's directory inside the engine-config volume (``/etc/ascend-llm``).
ADAPTERS_SUBDIR = posixpath.basename(posixpath.dirname(DEFAULT_ADAPTERS_PATH))


class VolumeKind(str, enum.Enum):
    PVC = "pvc"
    HOST_PATH = "hostPath"


@dataclass(frozen=True)
class AdapterVolume:
    """One volume holding adapters: a PVC or a node directory, mounted once."""

    kind: VolumeKind
    #: The claim's name or the node directory.
    source: str

    @property
    def name(self) -> str:
        """The pod volume's name: stable for the same source wherever it is listed."""
        return f"lora-{content_hash([self.kind.value, self.source])[:10]}"

    @property
    def mount_path(self) -> str:
        return f"{ADAPTERS_MOUNT_ROOT}/{self.name}"

    def volume(self) -> dict[str, Any]:
        if self.kind == VolumeKind.PVC:
            return {"name": self.name, "persistentVolumeClaim": {"claimName": self.source, "readOnly": True}}
        return {"name": self.name, "hostPath": {"path": self.source, "type": "Directory"}}

    def mount(self) -> dict[str, Any]:
        return {"name": self.name, "mountPath": self.mount_path, "readOnly": True}


def _volume_and_dir(adapter: LoraAdapterSpec) -> tuple[AdapterVolume, str | None] | None:
    """The adapter's volume and directory inside it; None for a hub adapter (on the cache)."""
    source = adapter.source
    if source.pvc is not None:
        return AdapterVolume(VolumeKind.PVC, source.pvc.claim_name), source.pvc.sub_path
    if source.host_path is not None:
        return AdapterVolume(VolumeKind.HOST_PATH, source.host_path.path), source.host_path.sub_path
    return None


def lora_enabled(spec: AscendLLMDeploymentSpec) -> bool:
    """Whether the engine serves LoRA (``spec.lora`` present and enabled)."""
    return spec.lora is not None and spec.lora.enabled


def _adapters(spec: AscendLLMDeploymentSpec) -> list[LoraAdapterSpec]:
    return spec.lora.adapters if spec.lora is not None and spec.lora.enabled else []


def adapter_set(spec: AscendLLMDeploymentSpec,
                downloaded: Mapping[str, AdapterFetch] | None = None) -> AdapterSet:
    """The runtime's adapter set: each adapter's directory inside its volume's mount; a hub adapter's
    snapshot on the cache (with its marker) only when ``downloaded`` (adapter name -> its completed
    download) holds it, else it is left out."""
    downloaded = downloaded or {}
    adapters = []
    for adapter in _adapters(spec):
        placed = _volume_and_dir(adapter)
        if placed is None:
            fetch = downloaded.get(adapter.name)
            if fetch is not None:
                adapters.append(Adapter(name=adapter.name, path=str(fetch.request.model_dir),
                                        cache_marker=str(fetch.request.marker_path)))
            continue
        volume, sub_path = placed
        path = f"{volume.mount_path}/{sub_path}" if sub_path else volume.mount_path
        adapters.append(Adapter(name=adapter.name, path=path))
    return AdapterSet(adapters=adapters)


def adapter_volumes(spec: AscendLLMDeploymentSpec) -> list[AdapterVolume]:
    """The distinct volumes the adapters are on, sorted by name (so the order of the adapters
    in the spec never changes the pod template); hub adapters are on the cache volume."""
    volumes = {placed[0] for adapter in _adapters(spec) if (placed := _volume_and_dir(adapter)) is not None}
    return sorted(volumes, key=lambda volume: volume.name)


def build_adapters_configmap(
    name: str, namespace: str, configmap_name: str, spec: AscendLLMDeploymentSpec,
    downloaded: Mapping[str, AdapterFetch] | None = None,
) -> dict[str, Any]:
    """ConfigMap ``configmap_name`` with ``adapters.yaml`` = the adapter set (hub adapters: those
    in ``downloaded``)."""
    return with_spec_hash(
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {
                "name": configmap_name,
                "namespace": namespace,
                "labels": common_labels(name, COMPONENT_ADAPTERS),
            },
            "data": {ADAPTERS_FILE_KEY: adapter_set(spec, downloaded).to_yaml()},
        }
    )


def served_adapters(configmap: Mapping[str, Any] | None) -> dict[str, str]:
    """Adapter name -> path as a live adapters ConfigMap (:func:`build_adapters_configmap`'s)
    lists them; empty when there is none or it cannot be read."""
    text = ((configmap or {}).get("data") or {}).get(ADAPTERS_FILE_KEY)
    if not text:
        return {}
    try:
        return parse_adapter_set(yaml.safe_load(text)).paths()
    except (yaml.YAMLError, ConfigError):
        return {}
