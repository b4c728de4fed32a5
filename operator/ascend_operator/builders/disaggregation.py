"""The children of a disaggregated resource: one workload per role (pure).

Each role (``spec.disaggregation.prefill`` / ``.decode``) is built by the ordinary builders from
:func:`role_spec`, the resource's spec with the role's replicas, NPUs, parallelism and engine
settings, under the role's names (:meth:`ascend_operator.names.ChildNames.for_role`). Then
:func:`wire_role` adds what the KV connector needs, from :mod:`ascend_runtime.kvtransfer` for the
vllm-ascend version the image's tag names:

- the labels ``llm-d.ai/role: prefill|decode`` (what the llm-d router selects on) and
  :data:`PD_ROLE_LABEL`, also in the Deployment's selector, so the two roles' workloads never
  select each other's pods;
- ``POD_NAME`` from the downward API (the runtime makes it the connector's ``engine_id``: replicas
  must not share one), and the plan's pod-IP variables (``HCCL_IF_IP``) as ``status.podIP``
  fieldRefs; the plan's other variables are the runtime's to set (it renders the flag with the
  version installed in the pod);
- the plan's host files (``/etc/hccn.conf``, ``hccn_tool``) read-only; ExampleConnector's shared
  directory (hostPath).

The Service ``<name>`` selects the decode pods (an OpenAI client reaching it gets whole answers:
a decode engine prefills a request that brought no ``kv_transfer_params`` itself);
``<name>-prefill`` selects the prefill pods, for a router or client that runs the two steps.
"""

from __future__ import annotations

import copy
from dataclasses import KW_ONLY, dataclass
from typing import Any

from ascend_runtime.kvtransfer import (
    LAST_KNOWN,
    Connector,
    KvPlatform,
    KvTransferInputs,
    KvTransferPlan,
    Parallelism,
    PdRole,
    Transport,
    render_kv_transfer,
)

from ascend_operator.api import (
    AscendLLMDeploymentSpec,
    AutoscalingSignal,
    AutoscalingSpec,
    EngineSpec,
    PdRoleName,
    Platform,
    RoleSpec,
)
from ascend_operator.builders.common import LLMD_ROLE_LABEL, PD_ROLE_LABEL, with_spec_hash
from ascend_operator.builders.engine_config import node_npus
from ascend_operator.builders.imagetag import image_vllm_ascend

#: The variable the runtime reads the connector's engine_id from (ascend_runtime.flags.POD_NAME_ENV).
POD_NAME_ENV = "POD_NAME"
SHARED_KV_VOLUME = "kv-shared"
RANK_TABLE_VOLUME = "rank-table"


@dataclass(frozen=True)
class RankTableMount:
    """``spec.disaggregation.rankTableConfigMap`` in the pods: the ConfigMap's ``key`` at ``path``;
    ``whole_dir``: the volume fills ``path``'s directory (the default place, so the kubelet keeps
    the file current), else a ``subPath`` mount of the one file at the user's ``rankTablePath``."""

    config_map: str
    key: str
    path: str
    whole_dir: bool

    @classmethod
    def of(cls, spec: AscendLLMDeploymentSpec) -> RankTableMount | None:
        d = spec.disaggregation
        if d is None or d.rank_table_config_map is None:
            return None
        path = d.rank_table_file
        assert path is not None
        return cls(d.rank_table_config_map.name, d.rank_table_config_map.key, path, d.rank_table_path is None)

    def volume(self) -> dict[str, Any]:
        file = self.path.rsplit("/", 1)[1]
        return {"name": RANK_TABLE_VOLUME, "configMap": {"name": self.config_map,
                                                         "items": [{"key": self.key, "path": file}]}}

    def mount(self) -> dict[str, Any]:
        directory, file = self.path.rsplit("/", 1)
        if self.whole_dir:
            return {"name": RANK_TABLE_VOLUME, "mountPath": directory, "readOnly": True}
        return {"name": RANK_TABLE_VOLUME, "mountPath": self.path, "subPath": file, "readOnly": True}


def role_of(spec: AscendLLMDeploymentSpec, role: PdRoleName) -> RoleSpec:
    assert spec.disaggregation is not None
    return spec.disaggregation.prefill if role is PdRoleName.PREFILL else spec.disaggregation.decode


def _merged_engine(base: EngineSpec, over: EngineSpec | None) -> EngineSpec:
    """``base`` with every field ``over`` sets replaced (maps and lists as a whole)."""
    if over is None:
        return base
    return base.model_copy(update={field: getattr(over, field) for field in over.model_fields_set})


def role_autoscaling(spec: AscendLLMDeploymentSpec, role: PdRoleName) -> AutoscalingSpec | None:
    """The role's autoscaling, enabled, with its signal's default: the queue (waiting requests) for
    prefill, which grows while prompts wait for a prefill slot; KV cache use for decode, whose
    batch is bounded by the KV cache its running requests hold."""
    auto = role_of(spec, role).autoscaling
    if auto is None or not auto.enabled:
        return None
    if "signal" not in auto.model_fields_set:
        signal = AutoscalingSignal.WAITING if role is PdRoleName.PREFILL else AutoscalingSignal.KV_CACHE
        auto = auto.model_copy(update={"signal": signal})
    return auto


def role_spec(spec: AscendLLMDeploymentSpec, role: PdRoleName) -> AscendLLMDeploymentSpec:
    """The spec one role's workload is built from (the role's replicas, NPUs, parallelism, engine,
    resources and autoscaling over the resource's)."""
    r = role_of(spec, role)
    return spec.model_copy(update={
        "replicas": r.replicas,
        "nodes_per_replica": r.nodes_per_replica,
        "npu": spec.npu.model_copy(update={"per_replica": r.npu.per_replica}),
        "parallelism": r.parallelism,
        "engine": _merged_engine(spec.engine, r.engine),
        "resources": r.resources if r.resources is not None else spec.resources,
        "autoscaling": role_autoscaling(spec, role),
    })


def image_version(image: str) -> str:
    """The vllm-ascend version the pods are wired for: the image tag's, else the newest read."""
    return image_vllm_ascend(image) or str(LAST_KNOWN)


def _sizes(r: RoleSpec) -> Parallelism:
    p = r.parallelism
    return Parallelism(tensor=p.tensor, data=p.data, pipeline=p.pipeline)


def kv_inputs(spec: AscendLLMDeploymentSpec, role: PdRoleName, image: str, *,
              with_offload: bool = False) -> KvTransferInputs:
    """The renderer's inputs for ``role`` (no engine_id: the runtime adds the pod's)."""
    d = spec.disaggregation
    assert d is not None
    pd_role = PdRole(role.value)
    mine, peer = role_of(spec, role), role_of(spec, PdRoleName.DECODE if role is PdRoleName.PREFILL
                                              else PdRoleName.PREFILL)
    cpu = spec.platform == Platform.CPU
    return KvTransferInputs(
        platform=KvPlatform.CPU if cpu else KvPlatform.ASCEND,
        role=pd_role,
        parallel=_sizes(mine),
        peer=_sizes(peer),
        vllm_ascend=None if cpu else image_version(image),
        connector=Connector(d.connector.value) if d.connector is not None else None,
        kv_port=d.kv_port,
        npus_per_node=8 if cpu else node_npus(spec),
        transport=Transport(d.transport.value),
        connect_timeout_ms=d.connect_timeout_ms,
        transfer_timeout_ms=d.transfer_timeout_ms,
        rank_table_path=d.rank_table_file,
        shared_storage_path=d.shared_storage_path,
        offload_gib=spec.kv_offload.size_gi_b if with_offload and spec.kv_offload is not None else None,
    )


def role_plan(spec: AscendLLMDeploymentSpec, role: PdRoleName, image: str) -> KvTransferPlan:
    """The role's pod wiring (environment, mounts); raises ``KvTransferError`` naming the field."""
    return render_kv_transfer(kv_inputs(spec, role, image))


#: The llm-d routing sidecar's --kv-connector for each engine connector: vllm-ascend's
#: MooncakeConnectorV1 and LLMDataDistCMgrConnector speak the NIXL-shaped two-step protocol
#: (do_remote_decode, then the returned kv_transfer_params), which the sidecar calls nixlv2; its
#: own "mooncake" is upstream vLLM's bootstrap-port MooncakeConnector, a different protocol.
SIDECAR_KV_CONNECTORS = {
    Connector.MOONCAKE: "nixlv2",
    Connector.LLMDATADIST: "nixlv2",
    Connector.NIXL: "nixlv2",
    Connector.EXAMPLE: "shared-storage",
}
SIDECAR_PORT = 8000


def routing_sidecar(image: str, connector: Connector, engine_port: int) -> dict[str, Any]:
    """The llm-d routing sidecar of a decode pod (its flags as the pinned llm-d router's
    ``pkg/sidecar/proxy/options.go`` has them): it takes the serving port, runs the prefill leg on
    the pod the endpoint picker names in ``x-prefiller-host-port``, then decode on the local engine."""
    return {
        "name": "routing-sidecar",
        "image": image,
        "imagePullPolicy": "IfNotPresent",
        "args": [f"--port={SIDECAR_PORT}", f"--vllm-port={engine_port}",
                 f"--kv-connector={SIDECAR_KV_CONNECTORS[connector]}", "--secure-proxy=false"],
        "ports": [{"name": "http", "containerPort": SIDECAR_PORT, "protocol": "TCP"}],
        "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}},
        "securityContext": {"allowPrivilegeEscalation": False, "privileged": False, "capabilities": {"drop": ["ALL"]}},
    }


@dataclass(frozen=True)
class RoleWiring:
    """What :func:`wire_role` adds to a role's pod templates (``sidecar``: the decode pods' routing
    sidecar with spec.routing, its engine moved to ``engine_port``)."""

    role: PdRoleName
    plan: KvTransferPlan
    _: KW_ONLY
    shared_storage_path: str | None = None
    sidecar: dict[str, Any] | None = None
    engine_port: int | None = None
    #: The node directory behind ``shared_storage_path`` (namespaced like a node cache).
    shared_storage_host: str | None = None
    rank_table: RankTableMount | None = None

    def labels(self) -> dict[str, str]:
        return {LLMD_ROLE_LABEL: self.role.value, PD_ROLE_LABEL: self.role.value}

    def env(self) -> list[dict[str, Any]]:
        env = [{"name": POD_NAME_ENV, "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}]
        env += [{"name": var, "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}
                for var in self.plan.env_from_pod_ip]
        return env

    def volumes(self) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        volumes = [{"name": m.name, "hostPath": {"path": m.path, "type": m.kind}} for m in self.plan.mounts]
        mounts = [{"name": m.name, "mountPath": m.path, "readOnly": True} for m in self.plan.mounts]
        if self.shared_storage_path:
            volumes.append({"name": SHARED_KV_VOLUME, "hostPath": {
                "path": self.shared_storage_host or self.shared_storage_path, "type": "DirectoryOrCreate"}})
            mounts.append({"name": SHARED_KV_VOLUME, "mountPath": self.shared_storage_path})
        if self.rank_table is not None:
            volumes.append(self.rank_table.volume())
            mounts.append(self.rank_table.mount())
        return volumes, mounts


def _wire_template(template: dict[str, Any], wiring: RoleWiring) -> None:
    template["metadata"].setdefault("labels", {}).update(wiring.labels())
    spec = template["spec"]
    volumes, mounts = wiring.volumes()
    spec["volumes"] = [*spec.get("volumes", []), *volumes]
    container = spec["containers"][0]
    container["env"] = [*container.get("env", []), *wiring.env()]
    container["volumeMounts"] = [*container.get("volumeMounts", []), *mounts]
    if wiring.sidecar is not None:
        # The sidecar serves the pod's "http" port; the engine keeps its own under another name.
        container["ports"] = [{**port, "name": "engine", "containerPort": wiring.engine_port}
                              if port["name"] == "http" else port for port in container["ports"]]
        spec["containers"] = [container, copy.deepcopy(wiring.sidecar)]


def wire_role(workload: dict[str, Any], wiring: RoleWiring, *, autoscaled: bool = False) -> dict[str, Any]:
    """A copy of a role's Deployment or LeaderWorkerSet with the role's labels, selector and KV
    wiring in every pod template (the spec hash made again); ``autoscaled``: without
    ``spec.replicas``, which the role's autoscaler then owns (one writer per field)."""
    out = copy.deepcopy(workload)
    if autoscaled:
        del out["spec"]["replicas"]
    out["metadata"].setdefault("labels", {}).update(wiring.labels())
    spec = out["spec"]
    if out["kind"] == "Deployment":
        spec["selector"]["matchLabels"][PD_ROLE_LABEL] = wiring.role.value
        _wire_template(spec["template"], wiring)
    else:
        lwt = spec["leaderWorkerTemplate"]
        for key in ("leaderTemplate", "workerTemplate"):
            if key in lwt:
                _wire_template(lwt[key], wiring)
    return with_spec_hash(out)


def select_role(service: dict[str, Any], role: PdRoleName) -> dict[str, Any]:
    """A copy of a Service that selects only ``role``'s pods."""
    out = copy.deepcopy(service)
    out["spec"]["selector"][PD_ROLE_LABEL] = role.value
    out["metadata"].setdefault("labels", {})[PD_ROLE_LABEL] = role.value
    return with_spec_hash(out)


def workload_ref(workload: dict[str, Any]) -> dict[str, str]:
    """An autoscaler's ``scaleTargetRef`` to a role's workload (Deployment or LeaderWorkerSet)."""
    return {"apiVersion": workload["apiVersion"], "kind": workload["kind"], "name": workload["metadata"]["name"]}
