"""The engine's KV transfer wiring (prefill/decode disaggregation, host-memory KV offload) per version.

Pure (stdlib and ``packaging`` only), so the operator (pod env, mounts, admission refusals) and the
runtime (the command line, with the versions installed in the pod, a per-pod ``engine_id`` and the
model's geometry) render the same thing from one :class:`KvTransferInputs`. Every key, variable,
mount and refusal is taken from the vllm-ascend / vLLM source of the version named in
``docs/kv-transfer.md``; the engine refuses what :func:`render_kv_transfer` refuses, with the field
to change and the fix in the message.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from packaging.version import InvalidVersion, Version

__all__ = [
    "NIXL_MODULE",
    "Connector",
    "HostMount",
    "KvGeometry",
    "KvPlatform",
    "KvTransferError",
    "KvTransferInputs",
    "KvTransferPlan",
    "Parallelism",
    "PdRole",
    "Transport",
    "check_kv_transfer",
    "default_connector",
    "render_kv_transfer",
]


class KvPlatform(str, Enum):
    ASCEND = "ascend"
    CPU = "cpu"


class PdRole(str, Enum):
    PREFILL = "prefill"
    DECODE = "decode"


class Connector(str, Enum):
    """The ``kv_connector`` names, as each engine registers them."""

    MOONCAKE = "MooncakeConnectorV1"  # vllm-ascend >= 0.10.1rc1
    LLMDATADIST = "LLMDataDistCMgrConnector"  # vllm-ascend 0.9.1, 0.10.0rc1 .. 0.11.x
    NIXL = "NixlConnector"  # vLLM (CPU: kv_buffer_device cpu)
    EXAMPLE = "ExampleConnector"  # vLLM's shared-storage example (CPU demo)


class Transport(str, Enum):
    """How the Ascend transfer engine moves KV (the variables vllm-ascend documents per chip)."""

    DEFAULT = "default"  # nothing set
    FABRIC_MEM = "fabricMem"  # A3 HCCS: ASCEND_ENABLE_USE_FABRIC_MEM=1
    ROCE = "roce"  # A2/A3 RoCE: HCCL_INTRA_ROCE_ENABLE=1
    BUFFER_POOL = "bufferPool"  # ASCEND_BUFFER_POOL=4:8, removed in 0.23.0


#: vllm-ascend versions (docs/kv-transfer.md has the file and tag of each).
MOONCAKE_FROM = Version("0.10.1rc1")
LLMDATADIST_REMOVED = Version("0.12.0rc1")
LLMDATADIST_FROM = Version("0.10.0rc1")
#: The 0.9.1 branch (rc2, rc3, final) registers LLMDataDistCMgrConnector; 0.9.2rc1 (main) does not.
LLMDATADIST_0_9 = (Version("0.9.1rc2"), Version("0.9.2rc1"))
PP_SIZE_FROM = Version("0.12.0rc1")
OFFLOAD_FROM = Version("0.12.0rc1")
FABRIC_MEM_FROM = Version("0.16.0rc1")
BUFFER_POOL_REMOVED = Version("0.23.0")
#: The newest vllm-ascend release read for these rules; MLA + offload is refused up to it.
LAST_KNOWN = Version("0.25.1rc1")

#: AscendDirectTransport picks random ports in [20000, 20000 + NPUs per node x 1000).
TRANSFER_ENGINE_PORT_BASE = 20000
TRANSFER_ENGINE_PORTS_PER_NPU = 1000
NPU_OFFLOAD_SPEC = ("NPUOffloadingSpec", "vllm_ascend.kv_offload.npu")
OFFLOAD_BLOCK_SIZE = 128
NIXL_SIDE_CHANNEL_PORT = 5600

HCCN_CONF = "/etc/hccn.conf"
HCCN_TOOL = "/usr/local/Ascend/driver/tools/hccn_tool"


#: The module vLLM's NixlConnector imports its bindings from (``nixl._api``).
NIXL_MODULE = "nixl"


class KvTransferError(ValueError):
    """What the engine would refuse: the field to change and how."""

    def __init__(self, field_name: str, problem: str, fix: str):
        self.field = field_name
        self.problem = problem
        self.fix = fix
        super().__init__(f"{field_name}: {problem}; {fix}")


@dataclass(frozen=True)
class Parallelism:
    """One role's engine parallelism (what vLLM's --*-parallel-size flags get)."""

    tensor: int = 1
    data: int = 1
    pipeline: int = 1

    def as_extra(self, with_pp: bool) -> dict[str, int]:
        out = {"dp_size": self.data, "tp_size": self.tensor}
        if with_pp and self.pipeline > 1:
            out["pp_size"] = self.pipeline
        return out


@dataclass(frozen=True)
class KvGeometry:
    """What one token's KV costs: from the model's config.json (:meth:`from_hf_config`)."""

    layers: int
    kv_heads: int
    head_dim: int
    dtype_bytes: int = 2
    mla: bool = False

    @classmethod
    def from_hf_config(cls, config: dict[str, Any], dtype_bytes: int | None = None) -> KvGeometry:
        """Read a Hugging Face ``config.json`` (its ``text_config`` for multimodal models)."""
        text = config.get("text_config") or config
        heads = int(text["num_attention_heads"])
        head_dim = text.get("head_dim") or int(text["hidden_size"]) // heads
        if dtype_bytes is None:
            dtype = str(text.get("dtype") or text.get("torch_dtype") or config.get("torch_dtype") or "bfloat16")
            dtype_bytes = 4 if dtype in ("float32", "torch.float32") else 2
        return cls(
            layers=int(text["num_hidden_layers"]),
            kv_heads=int(text.get("num_key_value_heads") or heads),
            head_dim=int(head_dim),
            dtype_bytes=dtype_bytes,
            # DeepSeek-V2/V3, Kimi-K2, GLM-5: multi-head latent attention keeps a compressed KV.
            mla=text.get("kv_lora_rank") is not None,
        )

    def block_bytes(self, block_size: int, tensor: int) -> int:
        """Host bytes one offloaded block takes across all ``tensor`` ranks (K and V, every layer).

        KV heads are split across TP ranks and replicated when there are fewer heads than ranks.
        """
        heads_per_rank = max(1, self.kv_heads // tensor)
        return block_size * self.layers * 2 * heads_per_rank * tensor * self.head_dim * self.dtype_bytes


@dataclass(frozen=True)
class HostMount:
    """A host path the transfer needs inside the container (read-only)."""

    name: str
    path: str
    kind: str = "File"


@dataclass(frozen=True)
class KvTransferInputs:
    """Everything the wiring depends on, for one role of one deployment.

    ``role`` None: no disaggregation (offload alone). ``peer``: the other role's parallelism
    (required with a role). ``vllm_ascend``: the version in the pod (or the image tag), required on
    Ascend. ``engine_id``: unique per pod (the runtime passes the pod name); None keeps vLLM's
    random one. ``offload_gib``: host memory for KV offload, for the whole pod.
    """

    platform: KvPlatform
    role: PdRole | None = None
    parallel: Parallelism = Parallelism()
    peer: Parallelism | None = None
    vllm_ascend: str | None = None
    connector: Connector | None = None
    kv_port: int | None = None
    npus_per_node: int = 8
    engine_id: str | None = None
    transport: Transport = Transport.DEFAULT
    connect_timeout_ms: int | None = None
    transfer_timeout_ms: int | None = None
    rank_table_path: str | None = None
    shared_storage_path: str | None = None
    side_channel_port: int = NIXL_SIDE_CHANNEL_PORT
    offload_gib: float | None = None
    offload_block_size: int = OFFLOAD_BLOCK_SIZE
    geometry: KvGeometry | None = None


@dataclass(frozen=True)
class KvTransferPlan:
    """The result: the engine's ``--kv-transfer-config``, its environment and mounts.

    ``env_from_pod_ip`` lists variables the pod sets from its own IP (``status.podIP``);
    ``ports`` is the range of ports the connector listens on (first, last), if any.
    """

    kv_transfer_config: dict[str, Any] | None
    env: dict[str, str] = field(default_factory=dict)
    env_from_pod_ip: tuple[str, ...] = ()
    mounts: tuple[HostMount, ...] = ()
    ports: tuple[int, int] | None = None
    warnings: tuple[str, ...] = ()

    def args(self) -> list[str]:
        if self.kv_transfer_config is None:
            return []
        return ["--kv-transfer-config", json.dumps(self.kv_transfer_config, separators=(",", ":"))]


def _version(text: str | None) -> Version | None:
    if not text:
        return None
    try:
        return Version(text)  # a leading "v" (an image tag) is valid PEP 440
    except InvalidVersion:
        return None


def _has_llmdatadist(version: Version) -> bool:
    low, high = LLMDATADIST_0_9
    return low <= version < high or LLMDATADIST_FROM <= version < LLMDATADIST_REMOVED


def default_connector(platform: KvPlatform, vllm_ascend: str | None) -> Connector | None:
    """The PD connector used when none is chosen: Mooncake where it exists, else LLMDataDist."""
    if platform is KvPlatform.CPU:
        return Connector.NIXL
    version = _version(vllm_ascend)
    if version is None:
        return None
    if version >= MOONCAKE_FROM:
        return Connector.MOONCAKE
    return Connector.LLMDATADIST if _has_llmdatadist(version) else None


class _Checker:
    """Collects refusals; one job: say everything wrong with the inputs at once."""

    def __init__(self, inputs: KvTransferInputs, need_geometry: bool):
        self.inputs = inputs
        self.need_geometry = need_geometry
        self.errors: list[KvTransferError] = []
        self.version = _version(inputs.vllm_ascend)

    def refuse(self, field_name: str, problem: str, fix: str) -> None:
        self.errors.append(KvTransferError(field_name, problem, fix))

    def run(self) -> list[KvTransferError]:
        i = self.inputs
        for name, value in (("parallel", i.parallel), ("peer", i.peer)):
            if value is not None and min(value.tensor, value.data, value.pipeline) < 1:
                self.refuse(name, f"parallel sizes must be >= 1, got {value}", "set tensor, data and pipeline >= 1")
        if i.platform is KvPlatform.ASCEND and self.version is None:
            self.refuse(
                "vllmAscend",
                f"the vllm-ascend version {i.vllm_ascend!r} is unknown",
                "use an image whose tag names the vllm-ascend version (…-vllm-ascend-v0.23.0)",
            )
            return self.errors
        if i.role is not None:
            self._check_pd()
        if i.offload_gib is not None:
            self._check_offload()
        if i.role is None and i.offload_gib is None:
            self.refuse("disaggregation", "neither a prefill/decode role nor KV offload is set", "set one")
        return self.errors

    def connector(self) -> Connector | None:
        return self.inputs.connector or default_connector(self.inputs.platform, self.inputs.vllm_ascend)

    def _check_pd(self) -> None:
        i = self.inputs
        if i.peer is None:
            self.refuse("peer", "the other role's parallelism is missing", "pass the peer role's parallel sizes")
            return
        connector = self.connector()
        prefill, decode = (i.parallel, i.peer) if i.role is PdRole.PREFILL else (i.peer, i.parallel)
        if i.platform is KvPlatform.CPU:
            if connector not in (Connector.NIXL, Connector.EXAMPLE):
                self.refuse("connector", f"{connector} does not run on the CPU platform",
                            "use NixlConnector or ExampleConnector on CPU")
            elif connector is Connector.EXAMPLE and not i.shared_storage_path:
                self.refuse("sharedStoragePath", "ExampleConnector needs a directory both engines share",
                            "set a shared volume path")
            return
        assert self.version is not None
        if connector is None:
            self.refuse(
                "connector",
                f"vllm-ascend {i.vllm_ascend} has no prefill/decode connector this operator wires",
                "use vllm-ascend >= 0.10.1rc1 (MooncakeConnectorV1) or 0.9.1 / 0.10.x-0.11.x (LLMDataDistCMgrConnector)",
            )
            return
        if connector is Connector.MOONCAKE:
            if self.version < MOONCAKE_FROM:
                self.refuse("connector", f"vllm-ascend {i.vllm_ascend} has no MooncakeConnectorV1 (from 0.10.1rc1)",
                            "use an image with vllm-ascend >= 0.10.1rc1 or connector LLMDataDistCMgrConnector")
                return
            self._check_mooncake(prefill, decode)
        elif connector is Connector.LLMDATADIST:
            if not _has_llmdatadist(self.version):
                self.refuse(
                    "connector",
                    f"vllm-ascend {i.vllm_ascend} does not register LLMDataDistCMgrConnector "
                    "(0.9.1 and 0.10.0rc1-0.11.x only; removed in 0.12.0rc1)",
                    "use MooncakeConnectorV1 (vllm-ascend >= 0.10.1rc1)",
                )
                return
            if not i.rank_table_path:
                self.refuse(
                    "rankTablePath",
                    "LLMDataDistCMgrConnector reads a rank table (DISAGGREGATED_PREFILL_RANK_TABLE_PATH) of every "
                    "prefill and decode NPU's device IP",
                    "put the table made by vllm-ascend's gen_ranktable.sh in a ConfigMap and name it in "
                    "rankTableConfigMap (or give rankTablePath, a file in the image), or use "
                    "MooncakeConnectorV1 (vllm-ascend >= 0.10.1rc1), which needs none",
                )
        else:
            self.refuse("connector", f"{connector.value} is not an Ascend prefill/decode connector",
                        "use MooncakeConnectorV1 or LLMDataDistCMgrConnector")
        if i.transport is Transport.BUFFER_POOL and self.version >= BUFFER_POOL_REMOVED:
            self.refuse("transport", f"ASCEND_BUFFER_POOL was removed in vllm-ascend 0.23.0 ({i.vllm_ascend})",
                        "use transport fabricMem (A3 HCCS) or roce (A2/A3 RoCE)")
        if i.transport is Transport.FABRIC_MEM and self.version < FABRIC_MEM_FROM:
            self.refuse("transport", f"ASCEND_ENABLE_USE_FABRIC_MEM is documented from vllm-ascend 0.16.0rc1, "
                        f"not {i.vllm_ascend}", "use transport bufferPool or default")

    def _check_mooncake(self, prefill: Parallelism, decode: Parallelism) -> None:
        i = self.inputs
        assert self.version is not None
        if prefill.tensor < decode.tensor:
            self.refuse(
                "prefill.parallel.tensor",
                f"MooncakeConnectorV1 needs prefill TP >= decode TP, got prefill {prefill.tensor} < decode "
                f"{decode.tensor} (the worker raises ValueError)",
                f"raise prefill tensor parallel to >= {decode.tensor} or lower decode's",
            )
        if decode.pipeline > 1:
            self.refuse("decode.parallel.pipeline", "MooncakeConnectorV1 asserts decode pp size 1",
                        "use tensor or data parallel for decode")
        if prefill.pipeline > 1 and self.version < PP_SIZE_FROM:
            self.refuse("prefill.parallel.pipeline",
                        f"vllm-ascend {i.vllm_ascend} reads no prefill pp_size (from 0.12.0rc1)",
                        "use pipeline 1 or vllm-ascend >= 0.12.0rc1")
        if i.kv_port is not None:
            first, last = i.kv_port, i.kv_port + self.port_span() - 1
            reserved_end = TRANSFER_ENGINE_PORT_BASE + i.npus_per_node * TRANSFER_ENGINE_PORTS_PER_NPU
            if last > 65535 or first < 1024:
                self.refuse("kvPort", f"ports {first}-{last} are outside 1024-65535", "choose a lower kvPort")
            elif last >= TRANSFER_ENGINE_PORT_BASE and first < reserved_end:
                self.refuse(
                    "kvPort",
                    f"ports {first}-{last} overlap the transfer engine's random range "
                    f"[{TRANSFER_ENGINE_PORT_BASE}, {reserved_end}) for {i.npus_per_node} NPUs per node",
                    f"set kvPort >= {reserved_end}",
                )

    def port_span(self) -> int:
        """The handshake ports: kv_port + dp_rank x tp x pp + the rank's index, for every rank."""
        p = self.inputs.parallel
        return p.data * p.tensor * p.pipeline

    def _check_offload(self) -> None:
        i = self.inputs
        assert i.offload_gib is not None
        if i.offload_gib <= 0:
            self.refuse("offload.sizeGiB", f"must be > 0, got {i.offload_gib}", "set a positive size or drop it")
        if i.platform is KvPlatform.CPU:
            self.refuse(
                "offload.sizeGiB",
                "vLLM's CPU platform refuses KV offloading (\"CPU Offloading is currently only supported on "
                "CUDA-alike and XPU GPUs\", vllm/v1/kv_offload/cpu/spec.py)",
                "drop offload on platform CPU",
            )
            return
        assert self.version is not None
        if self.version < OFFLOAD_FROM:
            self.refuse("offload.sizeGiB",
                        f"vllm-ascend {i.vllm_ascend} has no NPUOffloadingSpec (vllm_ascend.kv_offload.npu, from 0.12.0rc1)",
                        "use vllm-ascend >= 0.12.0rc1 or drop offload")
        if i.offload_block_size % OFFLOAD_BLOCK_SIZE:
            self.refuse("offload.blockSize", f"{i.offload_block_size} is not a multiple of the NPU block size 128",
                        "use 128 or a multiple of it")
        if i.geometry is None:
            if self.need_geometry:
                self.refuse("geometry", "KV offload is sized in blocks, which needs the model's layers and KV heads",
                            "pass KvGeometry.from_hf_config(the model's config.json)")
            return
        if i.geometry.mla and self.version <= LAST_KNOWN:
            self.refuse("offload.sizeGiB",
                        f"vllm-ascend {i.vllm_ascend} fails with OffloadingConnector on MLA models "
                        "(vllm-ascend#7971, open)", "drop offload for this model")


def check_kv_transfer(inputs: KvTransferInputs, *, need_geometry: bool = False) -> list[KvTransferError]:
    """Every refusal for ``inputs`` (empty when the engine would accept them).

    ``need_geometry`` False is for admission, before the model's config.json is read.
    """
    return _Checker(inputs, need_geometry).run()


def render_kv_transfer(inputs: KvTransferInputs) -> KvTransferPlan:
    """The plan for one role, or :class:`KvTransferError` (the first refusal; all are in its notes)."""
    checker = _Checker(inputs, need_geometry=True)
    errors = checker.run()
    if errors:
        first = errors[0]
        if len(errors) > 1:
            first.add_note("also: " + "; ".join(str(e) for e in errors[1:]))
        raise first
    env: dict[str, str] = {}
    pod_ip: list[str] = []
    mounts: tuple[HostMount, ...] = ()
    ports: tuple[int, int] | None = None
    pd: dict[str, Any] | None = None
    if inputs.role is not None:
        connector = checker.connector()
        assert connector is not None
        if inputs.platform is KvPlatform.CPU:
            pd, ports = _cpu_pd(inputs, connector, env, pod_ip)
        else:
            pd, ports = _ascend_pd(inputs, connector, checker, env, pod_ip)
            mounts = (HostMount("hccn-conf", HCCN_CONF), HostMount("hccn-tool", HCCN_TOOL))
    offload = _offload(inputs) if inputs.offload_gib is not None else None
    if pd is not None and offload is not None:
        config: dict[str, Any] | None = {
            "kv_connector": "MultiConnector",
            "kv_role": pd["kv_role"],
            "kv_connector_extra_config": {"connectors": [pd, offload]},
        }
    else:
        config = pd or offload
    return KvTransferPlan(config, env, tuple(pod_ip), mounts, ports)


def _role_name(role: PdRole) -> str:
    return "kv_producer" if role is PdRole.PREFILL else "kv_consumer"


def _ascend_pd(
    inputs: KvTransferInputs, connector: Connector, checker: _Checker, env: dict[str, str], pod_ip: list[str]
) -> tuple[dict[str, Any], tuple[int, int] | None]:
    assert inputs.role is not None and inputs.peer is not None and checker.version is not None
    pod_ip.append("HCCL_IF_IP")
    config: dict[str, Any] = {
        "kv_connector": connector.value,
        "kv_role": _role_name(inputs.role),
        "kv_buffer_device": "npu",
    }
    if inputs.engine_id:
        config["engine_id"] = inputs.engine_id
    if connector is Connector.LLMDATADIST:
        assert inputs.rank_table_path
        env["DISAGGREGATED_PREFILL_RANK_TABLE_PATH"] = inputs.rank_table_path
        return config, None
    prefill, decode = (inputs.parallel, inputs.peer) if inputs.role is PdRole.PREFILL else (inputs.peer, inputs.parallel)
    kv_port = inputs.kv_port
    if kv_port is None:
        kv_port = TRANSFER_ENGINE_PORT_BASE + inputs.npus_per_node * TRANSFER_ENGINE_PORTS_PER_NPU
    with_pp = checker.version >= PP_SIZE_FROM
    config["kv_port"] = kv_port
    config["kv_connector_extra_config"] = {"prefill": prefill.as_extra(with_pp), "decode": decode.as_extra(with_pp)}
    if inputs.connect_timeout_ms is not None:
        env["ASCEND_CONNECT_TIMEOUT"] = str(inputs.connect_timeout_ms)
    if inputs.transfer_timeout_ms is not None:
        env["ASCEND_TRANSFER_TIMEOUT"] = str(inputs.transfer_timeout_ms)
    transport_env = {
        Transport.FABRIC_MEM: ("ASCEND_ENABLE_USE_FABRIC_MEM", "1"),
        Transport.ROCE: ("HCCL_INTRA_ROCE_ENABLE", "1"),
        Transport.BUFFER_POOL: ("ASCEND_BUFFER_POOL", "4:8"),
    }.get(inputs.transport)
    if transport_env:
        env[transport_env[0]] = transport_env[1]
    return config, (kv_port, kv_port + checker.port_span() - 1)


def _cpu_pd(
    inputs: KvTransferInputs, connector: Connector, env: dict[str, str], pod_ip: list[str]
) -> tuple[dict[str, Any], tuple[int, int] | None]:
    assert inputs.role is not None
    if connector is Connector.EXAMPLE:
        return {
            "kv_connector": connector.value,
            "kv_role": _role_name(inputs.role),
            "kv_connector_extra_config": {"shared_storage_path": inputs.shared_storage_path},
        }, None
    # NIXL: the decode side pulls from the address the prefill response names. vLLM 0.32 warns that
    # kv_both with NixlConnector is deprecated: producer and consumer, as on Ascend.
    pod_ip.append("VLLM_NIXL_SIDE_CHANNEL_HOST")
    env["VLLM_NIXL_SIDE_CHANNEL_PORT"] = str(inputs.side_channel_port)
    config: dict[str, Any] = {"kv_connector": connector.value, "kv_role": _role_name(inputs.role),
                              "kv_buffer_device": "cpu"}
    if inputs.engine_id:
        config["engine_id"] = inputs.engine_id
    span = inputs.parallel.data * inputs.parallel.tensor
    return config, (inputs.side_channel_port, inputs.side_channel_port + span - 1)


def _offload(inputs: KvTransferInputs) -> dict[str, Any]:
    assert inputs.geometry is not None and inputs.offload_gib is not None
    block = inputs.geometry.block_bytes(inputs.offload_block_size, inputs.parallel.tensor)
    blocks = math.floor(inputs.offload_gib * 2**30 / block)
    spec_name, spec_module = NPU_OFFLOAD_SPEC
    return {
        "kv_connector": "OffloadingConnector",
        "kv_role": "kv_both",
        "kv_connector_extra_config": {
            "num_cpu_blocks": max(1, blocks),
            "block_size": inputs.offload_block_size,
            "spec_name": spec_name,
            "spec_module_path": spec_module,
        },
    }


# --------------------------------------------------------------------------------------------
# The client's half of the two-step protocol (what a router's sidecar does; a client without one)
# --------------------------------------------------------------------------------------------

#: The prefill leg's params, as vllm-ascend's proxy example sends them (docs/kv-transfer.md).
PREFILL_KV_PARAMS = {
    "do_remote_decode": True,
    "do_remote_prefill": False,
    "remote_engine_id": None,
    "remote_block_ids": None,
    "remote_host": None,
    "remote_port": None,
}


def prefill_request(body: dict[str, Any]) -> dict[str, Any]:
    """The prefill leg of an OpenAI request: KV kept for a remote decode, one token, no stream."""
    out = {k: v for k, v in body.items() if k not in ("stream", "stream_options")}
    out["kv_transfer_params"] = dict(PREFILL_KV_PARAMS)
    out["max_tokens"] = 1
    if "max_completion_tokens" in out:
        out["max_completion_tokens"] = 1
    return out


def decode_request(body: dict[str, Any], prefill_response: dict[str, Any]) -> dict[str, Any]:
    """The decode leg: the original request plus the prefill response's ``kv_transfer_params``.

    Raises ``ValueError`` when the prefill engine returned none (its connector kept no KV for
    this request, e.g. it is not a producer): the decode engine would silently prefill again.
    """
    params = prefill_response.get("kv_transfer_params")
    if not params:
        raise ValueError(
            "the prefill response has no kv_transfer_params: the prefill engine kept no KV for a remote decode; "
            "check that it runs with kv_role kv_producer and a connector that supports the protocol (NIXL, Mooncake)"
        )
    return {**body, "kv_transfer_params": params}
