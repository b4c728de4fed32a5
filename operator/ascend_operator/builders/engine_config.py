"""Spec + operator settings -> the runtime's :class:`EngineConfig` (pure).

Also the start-up budget, which both the engine config (``runtime.readyTimeoutS``) and the
Deployment's startup probe derive from, and the key under which a working graph mode is
remembered.

Start-up budget (documented formula, all numbers from :class:`OperatorSettings`)::

    load    = startup_base_s + sizeGiB * (load_s_per_gib_hub if a hub source without model.cache
                                          else load_s_per_gib_local)
              + (nodesPerReplica - 1) * startup_s_per_extra_node   (cross-node HCCL init, workers joining)
    capture = 0 (eager) | capture_s_piecewise (piecewise) | capture_s_full (auto and FULL modes)
              + static_kernel_s when ascend.enableStaticKernel
    attempt = load + capture                    -> EngineConfig.runtime.ready_timeout_s
    rungs   = the longest ladder the runtime may climb for the policy on the chip, any supported
              version (ascend_runtime.ladder.longest_ladder): 1 without graph.fallback, with policy
              eager, with LoRA on CPU and for policies 310P cannot capture; 2 for piecewise, CPU and
              310P (FULL_DECODE_ONLY -> EAGER); 3 for the rest (-> PIECEWISE -> EAGER)
    total   = preflight + attempt * rungs + (rungs - 1) * deviceFreeWaitS + warmup timeout
              (preflight = attempt where it runs, on NPUs; deviceFreeWaitS on NPUs only;
              warmup when enabled)             -> startupProbe failureThreshold * periodSeconds

The whole ladder is budgeted: a rung whose capture hangs uses its whole attempt before it steps
down (the runtime's ``graph.captureTimeoutS`` / ``runtime.readyTimeoutS``), and the preflight may
wait up to one attempt for the chips. A remembered mode starts at the working rung; the rung a
pod reached survives its container restarts (``runtime.stateDir`` on an emptyDir,
:data:`STATE_DIR`), so a restarted container does not climb the ladder again.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from ascend_runtime.config import (
    DEFAULT_ENGINE_PORT,
    DEFAULT_RUNTIME_PORT,
    SCHEMA_VERSION,
    EngineConfig,
    GraphMode,
    GraphPolicy,
    RuntimeOptions,
    WarmupConfig,
)
from ascend_runtime.ladder import longest_ladder
from ascend_runtime.weightsload import WeightsStorage

from ascend_operator.api import (
    AscendLLMDeploymentSpec,
    PdRoleName,
    DistributedBackend,
    Dtype,
    Platform,
    display_model,
)
from ascend_operator.builders.adapters import lora_enabled
from ascend_operator.builders.common import content_hash
from ascend_operator.builders.modelcache import CACHE_DIR, CachePlan
from ascend_operator.settings import OperatorSettings

#: Where a PVC or hostPath model is mounted in the pod.
MODEL_DIR = "/mnt/model"
#: Hub download cache (HF_HOME / MODELSCOPE_CACHE live below it).
MODEL_CACHE_DIR = "/var/cache/ascend-llm"
#: The runtime's state that outlives its container (an emptyDir): the ladder's rung and reason.
STATE_DIR = "/var/lib/ascend-llm/state"
#: The annotation whose value, when changed, lets new pods try the top of the ladder again
#: (it is part of the remembered-mode key).
RETRY_GRAPH_ANNOTATION = "llm.ascend.dev/retry-graph-mode"
#: The decode engine's port behind the llm-d routing sidecar (which takes the serving port, 8000).
ROUTED_ENGINE_PORT = 8200
#: KV cache GiB on CPU when spec.engine.kvCacheSpaceGiB is absent.
DEFAULT_CPU_KVCACHE_GIB = 1


@dataclass(frozen=True)
class StartupBudget:
    """Seconds one engine start may take, and the whole start-up including fallback and warmup."""

    attempt_s: int
    total_s: int


def is_hub_source(spec: AscendLLMDeploymentSpec) -> bool:
    """Whether the weights are downloaded at start-up."""
    return spec.model.hugging_face is not None or spec.model.model_scope is not None


def startup_budget(spec: AscendLLMDeploymentSpec, settings: OperatorSettings) -> StartupBudget:
    """The start-up budget of one pod (formula in the module docstring)."""
    size = spec.model.size_gi_b or settings.default_model_size_gib
    # A cached hub model is on the volume before the pod starts (the fetch Job or init container
    # downloaded it): the pod only loads it.
    downloads = is_hub_source(spec) and spec.model.cache is None
    rate = settings.load_s_per_gib_hub if downloads else settings.load_s_per_gib_local
    load = settings.startup_base_s + size * rate
    load += (spec.nodes_per_replica - 1) * settings.startup_s_per_extra_node
    policy = spec.graph.policy
    if policy == GraphPolicy.EAGER:
        capture = 0
    elif policy == GraphPolicy.PIECEWISE:
        capture = settings.capture_s_piecewise
    else:
        capture = settings.capture_s_full
    if spec.ascend is not None and spec.ascend.enable_static_kernel:
        capture += settings.static_kernel_s
    attempt = math.ceil(load + capture)
    rungs = ladder_length(spec)
    npu = spec.platform != Platform.CPU
    preflight = attempt if npu else 0  # the runtime's preflight waits up to runtime.readyTimeoutS
    relaunch_wait = (rungs - 1) * RuntimeOptions().device_free_wait_s if npu else 0
    warmup = 0
    if spec.warmup.enabled:
        warmup = spec.warmup.timeout_seconds or WarmupConfig().timeout_s
    return StartupBudget(attempt_s=attempt, total_s=preflight + attempt * rungs + relaunch_wait + warmup)


def ladder_length(spec: AscendLLMDeploymentSpec) -> int:
    """The most rungs a start may climb down: the runtime's ladder for any supported version
    (:func:`ascend_runtime.ladder.longest_ladder`)."""
    chip = None if spec.platform == Platform.CPU else spec.npu.chip
    return longest_ladder(spec.graph.policy, spec.graph.fallback, chip, lora_enabled(spec))


def model_path(spec: AscendLLMDeploymentSpec) -> str:
    """What the engine's ``--model`` gets: the mount path, or the hub id."""
    hub = spec.model.hugging_face or spec.model.model_scope
    return hub.id if hub is not None else MODEL_DIR


def remembered_mode_key(spec: AscendLLMDeploymentSpec, image: str, retry: str | None = None) -> str:
    """Short hash of what a working graph mode depends on: image, model source, revision, parallelism.

    ``retry`` is the value of :data:`RETRY_GRAPH_ANNOTATION`: a new value is a new key, so the
    remembered mode is dropped and new pods try the top of the ladder again.
    """
    model = spec.model
    # Multi-node keys add the node count and backend; single-node keys stay what they were.
    topology = (
        {"nodes": spec.nodes_per_replica, "backend": spec.distributed.backend.value}
        if spec.nodes_per_replica > 1
        else {}
    )
    retried = {"retry": retry} if retry else {}  # keys without the annotation stay what they were
    return content_hash(
        {
            **topology,
            **retried,
            "image": image,
            "source": model.model_dump(
                mode="json",
                by_alias=True,
                include={"pvc", "host_path", "hugging_face", "model_scope"},
                exclude_none=True,
            ),
            "revision": model.revision,
            "parallelism": spec.parallelism.model_dump(mode="json", by_alias=True),
            "chip": None if spec.platform == Platform.CPU else spec.npu.chip.value,
        }
    )[:12]


def _dtype(spec: AscendLLMDeploymentSpec) -> str | None:
    if spec.engine.dtype is not None:
        return spec.engine.dtype.value
    if spec.platform == Platform.CPU:
        return Dtype.FLOAT32.value  # bf16 is emulated (slow) on most CPUs
    if spec.npu.chip.value == "310P":
        return Dtype.FLOAT16.value  # 310P has no bf16; "auto" would pick it for bf16 checkpoints
    return None


def _sorted(value: Any) -> Any:
    """``value`` with every mapping's keys in sorted order (recursively)."""
    if isinstance(value, dict):
        return {key: _sorted(value[key]) for key in sorted(value)}
    if isinstance(value, list):
        return [_sorted(item) for item in value]
    return value


def _set(mapping: dict[str, Any], **values: Any) -> dict[str, Any]:
    """``mapping`` plus the ``values`` that are not None (absent = the runtime's default)."""
    mapping.update({key: value for key, value in values.items() if value is not None})
    return mapping


def weights_storage(spec: AscendLLMDeploymentSpec) -> WeightsStorage:
    """Where the engine reads the weights from: a PersistentVolumeClaim (the model's own, or the
    model cache's for hub weights) counts as network storage, a host path or an emptyDir as local.

    A decision: claims are usually network file systems (ReadWriteMany needs one), where vLLM's
    mmap reads are slowest; a claim on a local disk pays only a sequential read-ahead for it.
    """
    model = spec.model
    if model.pvc is not None:
        return WeightsStorage.NETWORK
    if model.host_path is None and model.cache is not None and model.cache.host_path is None:
        return WeightsStorage.NETWORK
    return WeightsStorage.LOCAL


def _non_default(value: Any, default: Any) -> Any:
    return None if value == default else value


def build_engine_config(
    name: str,
    spec: AscendLLMDeploymentSpec,
    settings: OperatorSettings,
    *,
    image: str,
    cache_plan: CachePlan | None,
    start_mode: GraphMode | None = None,
    namespace: str | None = None,
    role: PdRoleName | None = None,
) -> EngineConfig:
    """The engine config for resource ``name`` (``cache_plan``: what
    :func:`ascend_operator.builders.modelcache.plan_cache` made of the spec);
    ``start_mode`` (a remembered working mode) becomes ``graph.startMode``; ``role``: the
    disaggregation role this config is for (``spec`` is then that role's, :func:`role_spec`)."""
    cpu = spec.platform == Platform.CPU
    engine = spec.engine
    # Sorted, so the order a user wrote a map in never changes the ConfigMap (and rolls pods).
    env = dict(sorted(engine.env.items()))
    if cpu:
        env["VLLM_CPU_KVCACHE_SPACE"] = str(engine.kv_cache_space_gi_b or DEFAULT_CPU_KVCACHE_GIB)
    engine_options = _set(
        {
            "host": "0.0.0.0",  # the pod's Service reaches the engine directly
            "port": ROUTED_ENGINE_PORT if _behind_sidecar(spec, role) else DEFAULT_ENGINE_PORT,
            "parallel": spec.parallelism.model_dump(),
            "extra_args": list(engine.extra_args),
            "env": env,
        },
        max_model_len=engine.max_model_len,
        max_num_seqs=engine.max_num_seqs,
        gpu_memory_utilization=engine.gpu_memory_utilization,
        enable_prefix_caching=engine.prefix_caching,
        dtype=_dtype(spec),
        quantization=engine.quantization,
        shutdown_timeout_s=engine.shutdown_timeout_seconds,
        # Left out when unset (the runtime's default, on): existing ConfigMaps stay byte-identical.
        tuned_defaults=engine.tuned_defaults,
        weights_loader=engine.weights_loader,
        weights_storage=_non_default(weights_storage(spec), WeightsStorage.LOCAL),
    )
    graph = _set(
        {"policy": spec.graph.policy, "fallback": spec.graph.fallback},
        capture_sizes=spec.graph.capture_sizes,
        max_capture_size=spec.graph.max_capture_size,
        start_mode=start_mode,
    )
    ascend: dict[str, Any] = {"chip": None if cpu else spec.npu.chip}
    if spec.ascend is not None:
        _set(
            ascend,
            multistream_overlap_shared_expert=spec.ascend.multistream_overlap_shared_expert,
            enable_static_kernel=spec.ascend.enable_static_kernel,
            additional_config=_sorted(spec.ascend.additional_config) or None,
        )
    warmup = _set(
        {"enabled": spec.warmup.enabled},
        prompt_lengths=spec.warmup.prompt_lengths,
        concurrency=spec.warmup.concurrency,
        max_tokens=spec.warmup.max_tokens,
        timeout_s=spec.warmup.timeout_seconds,
        chat=spec.warmup.chat,
    )
    health: dict[str, Any] = _set({}, hang_timeout_s=spec.health.hang_timeout_seconds)
    if spec.health.leak is not None:
        leak = spec.health.leak
        health["leak"] = _set(
            {"enabled": leak.enabled},
            host_growth_mb_per_hour=leak.host_growth_mb_per_hour,
            device_growth_mb_per_hour=leak.device_growth_mb_per_hour,
            min_time_to_exhaustion_s=leak.min_time_to_exhaustion_seconds,
            min_headroom_mb=leak.min_headroom_mb,
            window_s=leak.window_seconds,
            grace_s=leak.grace_seconds,
            sample_interval_s=leak.sample_interval_seconds,
        )
    distributed: dict[str, Any] = {}
    if spec.nodes_per_replica > 1:
        # One ConfigMap serves leader and workers: role, leader address and worker index are
        # left unset; the runtime reads them from the env LWS sets (LWS_LEADER_ADDRESS,
        # LWS_WORKER_INDEX, LWS_GROUP_SIZE). HCCL settings go here, not into pod env: the
        # runtime exports them (and HCCL_IF_IP from POD_IP) for the engine and Ray.
        wanted = spec.distributed
        hccl = wanted.hccl
        ray = wanted.backend == DistributedBackend.RAY
        distributed = _set(
            {
                "nodes": spec.nodes_per_replica,
                "backend": wanted.backend.value,
                "npus_per_node": spec.npu.per_replica,
                "socket_ifname": hccl.socket_ifname or settings.hccl_socket_ifname,
                "hccl_buffsize_mb": hccl.buffer_size_mb or settings.hccl_buffer_size_mb,
                "hccl_connect_timeout_s": hccl.connect_timeout_seconds or settings.hccl_connect_timeout_s,
            },
            hccl_exec_timeout_s=hccl.exec_timeout_seconds,
            hccl_op_expansion_mode=hccl.op_expansion_mode,
            rpc_port=None if ray else wanted.leader_port,
            ray_port=wanted.leader_port if ray else None,
        )
    lora: dict[str, Any] = {}
    if spec.lora is not None and spec.lora.enabled:
        # Engine flags only: the adapter set is the adapters ConfigMap's, read while serving.
        lora = _set(
            {"enabled": True, "max_rank": spec.lora.max_rank, "max_loras": spec.lora.max_loras},
            max_cpu_loras=spec.lora.max_cpu_loras,
        )
    snapshot = cache_plan.model_path if cache_plan is not None else None
    compile_cache = cache_plan is not None and cache_plan.spec.compile_cache
    return EngineConfig.model_validate(
        {
            "schema_version": SCHEMA_VERSION,
            **({"distributed": distributed} if distributed else {}),
            **({"lora": lora} if lora else {}),
            # The namespace is part of every compile key: one tenant never loads another's kernels.
            **({"compile_cache": {"root": CACHE_DIR, "namespace": namespace}} if compile_cache else {}),
            **({"kv_transfer": kv} if (kv := kv_transfer_config(spec, role)) else {}),
            "name": name,
            "image": image,
            "model": _set(
                {
                    "path": snapshot or model_path(spec),
                    "served_name": display_model(spec, name),
                    "trust_remote_code": spec.model.trust_remote_code,
                },
                # The snapshot on the cache is that revision already.
                revision=None if snapshot else spec.model.revision,
                cache_marker=cache_plan.marker if cache_plan is not None else None,
            ),
            "engine": engine_options,
            "graph": graph,
            "ascend": ascend,
            "warmup": warmup,
            "health": health,
            "runtime": {
                "port": DEFAULT_RUNTIME_PORT,
                "host": "0.0.0.0",
                "ready_timeout_s": startup_budget(spec, settings).attempt_s,
                # No NPU to check on CPU; the preflight looks for devices and free memory.
                "preflight": not cpu,
                "state_dir": STATE_DIR,
            },
        }
    )


def node_npus(spec: AscendLLMDeploymentSpec) -> int:
    """NPUs of one node of the chip (the transfer engine's port range): A3 16 dies, else 8."""
    return 16 if spec.npu.chip.value == "A3" else 8


def kv_transfer_config(spec: AscendLLMDeploymentSpec, role: PdRoleName | None) -> dict[str, Any] | None:
    """The engine config's ``kv_transfer`` section (:class:`ascend_runtime.config.KvTransferConfig`),
    or None without disaggregation and offload. ``role`` None with disaggregation: None too (the
    roles' configs carry it)."""
    d, offload = spec.disaggregation, spec.kv_offload
    if d is None and offload is None:
        return None
    if d is not None and role is None:
        return None
    out: dict[str, Any] = {}
    if offload is not None:
        out["offload_gib"] = offload.size_gi_b
    if d is not None and role is not None:
        def sizes(r: Any) -> dict[str, int]:
            p = r.parallelism
            return {"tensor": p.tensor, "pipeline": p.pipeline, "data": p.data}

        _set(
            out,
            role=role.value,
            prefill=sizes(d.prefill),
            decode=sizes(d.decode),
            connector=d.connector.value if d.connector is not None else None,
            kv_port=d.kv_port,
            npus_per_node=None if spec.platform == Platform.CPU else node_npus(spec),
            transport=d.transport.value if d.transport.value != "default" else None,
            connect_timeout_ms=d.connect_timeout_ms,
            transfer_timeout_ms=d.transfer_timeout_ms,
            rank_table_path=d.rank_table_file,
            shared_storage_path=d.shared_storage_path,
        )
    return out


def _behind_sidecar(spec: AscendLLMDeploymentSpec, role: PdRoleName | None) -> bool:
    """Whether this engine is a decode engine behind the routing sidecar (spec.routing on)."""
    return role is PdRoleName.DECODE and spec.routing is not None and spec.routing.enabled
