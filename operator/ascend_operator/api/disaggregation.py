"""``spec.disaggregation`` (prefill/decode on separate pods) and ``spec.kvOffload`` (host-memory KV).

Each role has its own replicas, NPUs, parallelism and engine settings; what the roles share (the
model, the chip, placement, graph policy, warmup, health) stays at the top of the spec. The
connector's keys come from :mod:`ascend_runtime.kvtransfer` (its enums are the field types here),
which renders the engine's ``--kv-transfer-config`` for the vllm-ascend version in the pod.
"""

from __future__ import annotations

import enum
from typing import Annotated

from ascend_operator.api.base import DnsSubdomain, SpecModel
from ascend_operator.api.features import AutoscalingSpec
from ascend_operator.api.model import HOST_PATH_PATTERN, DataKey
from ascend_operator.api.replica import EngineSpec, ParallelismSpec, ResourcesSpec
from ascend_runtime.kvtransfer import Connector, Transport
from pydantic import Field, StringConstraints


class PdRoleName(str, enum.Enum):
    """The two roles, as the ``llm-d.ai/role`` label spells them."""

    PREFILL = "prefill"
    DECODE = "decode"


AbsolutePath = Annotated[str, StringConstraints(min_length=2, max_length=1024, pattern=HOST_PATH_PATTERN)]


class RoleNpuSpec(SpecModel):
    """NPUs of one role's pod (the chip, resource name and placement are spec.npu's)."""

    per_replica: int = Field(
        1, ge=1, le=16,
        description=(
            "NPUs per pod of this role (per node when nodesPerReplica > 1); nodesPerReplica x perReplica "
            "must equal the role's tensor x pipeline x data parallel. Default: 1."
        ),
    )


class RoleSpec(SpecModel):
    """One role (prefill or decode): its replicas, NPUs, parallelism and engine settings."""

    replicas: int = Field(1, ge=0, le=1024, description="Engine replicas of this role. Default: 1.")
    nodes_per_replica: int = Field(
        1, ge=1, le=16,
        description="Nodes (pods) per replica of this role; above 1 a LeaderWorkerSet (install LWS). Default: 1.",
    )
    npu: RoleNpuSpec = Field(default_factory=RoleNpuSpec, description="NPUs per pod of this role.")
    parallelism: ParallelismSpec = Field(
        default_factory=ParallelismSpec, description="Parallelism inside one replica of this role."
    )
    engine: EngineSpec | None = Field(
        None,
        description=(
            "Engine options of this role; each field set here replaces spec.engine's (extraArgs, env and "
            "envValueFrom as a whole). Default: spec.engine."
        ),
    )
    resources: ResourcesSpec | None = Field(
        None, description="CPU, memory and storage of this role's engine container. Default: spec.resources."
    )
    autoscaling: AutoscalingSpec | None = Field(
        None,
        description=(
            "This role's autoscaler, on its own workload (then the autoscaler, not replicas, sets the role's "
            "replicas). Signal left out: waitingRequestsPerReplica for prefill (queue length), kvCacheUsage for "
            "decode. Default: off (replicas is fixed)."
        ),
    )


#: Where the rank table from ``rankTableConfigMap`` is mounted when ``rankTablePath`` is not set.
RANK_TABLE_DIR = "/etc/ascend-llm/ranktable"


class RankTableConfigMap(SpecModel):
    """The ConfigMap in the resource's namespace that holds LLMDataDistCMgrConnector's rank table."""

    name: DnsSubdomain = Field(description="Name of the ConfigMap in the resource's namespace.")
    key: DataKey = Field("ranktable.json", description="Key holding the rank table's JSON. Default: ranktable.json.")


class DisaggregationSpec(SpecModel):
    """Prefill on some pods, decode on others, the KV cache moved between them by a connector."""

    prefill: RoleSpec = Field(description="The prefill role (kv_producer).")
    decode: RoleSpec = Field(description="The decode role (kv_consumer); the Service selects its pods.")
    connector: Connector | None = Field(
        None,
        description=(
            "kv_connector. Ascend: MooncakeConnectorV1 (vllm-ascend >= 0.10.1rc1) or LLMDataDistCMgrConnector "
            "(0.9.1, 0.10.x-0.11.x; needs rankTablePath); CPU: NixlConnector or ExampleConnector (needs "
            "sharedStoragePath). Default: MooncakeConnectorV1 where the image's vllm-ascend has it, else "
            "LLMDataDistCMgrConnector; NixlConnector on platform CPU."
        ),
    )
    kv_port: int | None = Field(
        None, ge=1024, le=65535,
        description=(
            "MooncakeConnectorV1's first handshake port (each rank of a pod takes the next one); must be clear "
            "of the transfer engine's random ports [20000, 20000 + NPUs per node x 1000). Default: 20000 + "
            "NPUs per node x 1000 (28000 on 910B nodes, 36000 on A3)."
        ),
    )
    transport: Transport = Field(
        Transport.DEFAULT,
        description=(
            "How the transfer engine moves KV: default (nothing set), fabricMem (A3 HCCS, "
            "ASCEND_ENABLE_USE_FABRIC_MEM=1, vllm-ascend >= 0.16.0rc1), roce (HCCL_INTRA_ROCE_ENABLE=1) or "
            "bufferPool (ASCEND_BUFFER_POOL=4:8, removed in vllm-ascend 0.23.0). Default: default."
        ),
    )
    connect_timeout_ms: int | None = Field(
        None, ge=1, le=3600000, description="ASCEND_CONNECT_TIMEOUT (ms). Default: the transfer engine's."
    )
    transfer_timeout_ms: int | None = Field(
        None, ge=1, le=3600000,
        description="ASCEND_TRANSFER_TIMEOUT (ms). Default: vllm-ascend derives it from HCCL_RDMA_TIMEOUT.",
    )
    rank_table_path: AbsolutePath | None = Field(
        None,
        description=(
            "LLMDataDistCMgrConnector only: the rank table in the pods (DISAGGREGATED_PREFILL_RANK_TABLE_PATH), "
            "made by vllm-ascend's gen_ranktable.sh. With rankTableConfigMap: where its key is mounted (default "
            f"{RANK_TABLE_DIR}/<key>); without: a file the image itself holds."
        ),
    )
    rank_table_config_map: RankTableConfigMap | None = Field(
        None,
        description=(
            "LLMDataDistCMgrConnector only: a ConfigMap of this namespace whose key holds the rank table; both "
            "roles' engine containers mount it read-only at rankTablePath."
        ),
    )
    shared_storage_path: AbsolutePath | None = Field(
        None,
        description=(
            "ExampleConnector only: the directory both roles' pods mount at this path: a node directory under "
            "an allowed cache prefix (operator setting CACHE_HOST_PATH_PREFIXES), namespaced like a node cache "
            "(<prefix>/<namespace>/<rest>), so both roles must run on that node."
        ),
    )

    @property
    def rank_table_file(self) -> str | None:
        """The rank table's path in the pods: rankTablePath, else where rankTableConfigMap is mounted."""
        if self.rank_table_path is not None:
            return self.rank_table_path
        if self.rank_table_config_map is not None:
            return f"{RANK_TABLE_DIR}/{self.rank_table_config_map.key}"
        return None


class KvOffloadSpec(SpecModel):
    """Host-memory KV offload (vllm-ascend's OffloadingConnector with its NPU offloading spec)."""

    size_gi_b: float = Field(
        alias="sizeGiB", gt=0, le=4096,
        description=(
            "Host memory per pod for offloaded KV blocks, in GiB (num_cpu_blocks is derived from the model's "
            "config.json). Needs vllm-ascend >= 0.12.0rc1 and a model without MLA; not on platform CPU."
        ),
    )
