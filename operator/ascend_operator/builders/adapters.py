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
"""

from __future__ import annotations

import enum
import posixpath
from dataclasses import dataclass
from typing import Any

from ascend_runtime.config import ADAPTERS_FILE_KEY, DEFAULT_ADAPTERS_PATH, Adapter, AdapterSet

from ascend_operator.api import AscendLLMDeploymentSpec, LoraAdapterSpec
from ascend_operator.builders.common import common_labels, content_hash, with_spec_hash

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


def _volume_and_dir(adapter: LoraAdapterSpec) -> tuple[AdapterVolume, str | None]:
    source = adapter.source
    if source.pvc is not None:
        return AdapterVolume(VolumeKind.PVC, source.pvc.claim_name), source.pvc.sub_path
    assert source.host_path is not None  # the model's rule: exactly one source
    return AdapterVolume(VolumeKind.HOST_PATH, source.host_path.path), source.host_path.sub_path


def lora_enabled(spec: AscendLLMDeploymentSpec) -> bool:
    """Whether the engine serves LoRA (``spec.lora`` present and enabled)."""
    return spec.lora is not None and spec.lora.enabled


def _adapters(spec: AscendLLMDeploymentSpec) -> list[LoraAdapterSpec]:
    return spec.lora.adapters if spec.lora is not None and spec.lora.enabled else []


def adapter_set(spec: AscendLLMDeploymentSpec) -> AdapterSet:
    """The runtime's adapter set: each adapter's directory inside its volume's mount."""
    adapters = []
    for adapter in _adapters(spec):
        volume, sub_path = _volume_and_dir(adapter)
        path = f"{volume.mount_path}/{sub_path}" if sub_path else volume.mount_path
        adapters.append(Adapter(name=adapter.name, path=path))
    return AdapterSet(adapters=adapters)


def adapter_volumes(spec: AscendLLMDeploymentSpec) -> list[AdapterVolume]:
    """The distinct volumes the adapters are on, sorted by name (so the order of the adapters
    in the spec never changes the pod template)."""
    volumes = {_volume_and_dir(adapter)[0] for adapter in _adapters(spec)}
    return sorted(volumes, key=lambda volume: volume.name)


def build_adapters_configmap(
    name: str, namespace: str, configmap_name: str, spec: AscendLLMDeploymentSpec
) -> dict[str, Any]:
    """ConfigMap ``configmap_name`` with ``adapters.yaml`` = the adapter set."""
    return with_spec_hash(
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {
                "name": configmap_name,
                "namespace": namespace,
                "labels": common_labels(name, COMPONENT_ADAPTERS),
            },
            "data": {ADAPTERS_FILE_KEY: adapter_set(spec).to_yaml()},
        }
    )
