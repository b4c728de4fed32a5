"""Render the engine command line for the installed vLLM / vllm-ascend, per graph-mode rung.

Pure: :func:`graph_ladder` and :func:`render_engine_command` read an :class:`EngineConfig` and a
from ascend_runtime.adaptergate import MIDDLEWARE as ADAPTER_GATE_MIDDLEWARE
:class:`~ascend_runtime.versions.Versions` and return data; nothing is executed or read. The
graph-mode eras per version and chip, how each rung is rendered, the demotion order, and what
is done where the engine gives no guidance (unknown ``additional_config`` keys,
``ASCEND_LAUNCH_BLOCKING``, owned flags in ``engine.extra_args``, the engine env, multi-node and
LoRA flags, ``--shutdown-timeout``) are in ``docs/engine-flags.md``, with their sources.
"""

from __future__ import annotations

import json
from pathlib import Path
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from packaging.version import Version

from ascend_runtime.adaptergate import MIDDLEWARE as ADAPTER_GATE_MIDDLEWARE
from ascend_runtime.config import Chip, EngineConfig, GraphMode, KvTransferConfig
from ascend_runtime.kvtransfer import (
    Connector,
    KvGeometry,
    KvPlatform,
    KvTransferInputs,
    KvTransferPlan,
    Parallelism,
    PdRole,
    Transport,
    render_kv_transfer,
)
from ascend_runtime.ladder import ALL_MODES, MODES_310P, MODES_EAGER, MODES_PIECEWISE, ladder
from ascend_runtime.ladder import effective as effective_mode
from ascend_runtime.lora_support import check_lora_support
from ascend_runtime.versions import Versions, parse_version
from ascend_runtime.weightsload import LoaderChoice, WeightsLoader, WeightsStorage
from ascend_runtime.weightsload import resolve as resolve_loader

__all__ = [
    "ADDITIONAL_CONFIG_KEYS",
    "DISTRIBUTED_OWNED_FLAGS",
    "LORA_OWNED_FLAGS",
    "LORA_RUNTIME_UPDATING_ENV",
    "EngineCommand",
    "engine_era",
    "graph_ladder",
    "known_additional_config_keys",
    "loader_choice",
    "render_engine_command",
    "supported_modes",
]

# --------------------------------------------------------------------------------------------
# Eras and supported modes
# --------------------------------------------------------------------------------------------

V0_9 = Version("0.9.0")
V0_10 = Version("0.10.0rc1")
V0_11 = Version("0.11.0rc0")
V0_12 = Version("0.12.0rc1")
V0_14 = Version("0.14.0")
V0_18 = Version("0.18.0")
V0_23 = Version("0.23.0")
#: vLLM versions gating flags and keys.
VLLM_SHUTDOWN_TIMEOUT = Version("0.18.0")
VLLM_CUDAGRAPH_MODE = Version("0.10.2")
VLLM_FULL_AND_PIECEWISE_DEFAULT = Version("0.11.0")
VLLM_MAX_CAPTURE_SIZE = Version("0.12.0")

ERA_ENABLE_GRAPH_MODE = "enable_graph_mode"
ERA_TORCHAIR = "torchair"
ERA_ACLGRAPH = "aclgraph"
ERA_CPU = "cpu"
ERA_CUDA = "cuda"

def _ascend_version(versions: Versions) -> Version:
    parsed = parse_version(versions.vllm_ascend)
    if parsed is None:
        raise ValueError(
            f"platform is ascend but the vllm-ascend version {versions.vllm_ascend!r} is unknown; "
            "install vllm-ascend or pass --vllm-ascend-version"
        )
    return parsed


def engine_era(versions: Versions) -> str:
    """Which flag dialect the installed engine speaks (one of the ``ERA_*`` names)."""
    if versions.platform == "ascend":
        version = _ascend_version(versions)
        if version < V0_9:
            return ERA_ENABLE_GRAPH_MODE
        return ERA_TORCHAIR if version < V0_12 else ERA_ACLGRAPH
    return ERA_CUDA if versions.platform == "cuda" else ERA_CPU


def _lora_on(config: EngineConfig) -> bool:
    return config.lora is not None and config.lora.enabled


def _is_310p(config: EngineConfig, versions: Versions) -> bool:
    return config.ascend.chip is Chip.P310 or versions.is_310p


def supported_modes(config: EngineConfig, versions: Versions) -> tuple[tuple[GraphMode, ...], GraphMode]:
    """The rungs the installed engine (and chip) can run, and the one it defaults to."""
    era = engine_era(versions)
    if era in (ERA_ENABLE_GRAPH_MODE, ERA_TORCHAIR, ERA_ACLGRAPH) and _is_310p(config, versions):
        if era == ERA_ACLGRAPH and _ascend_version(versions) >= V0_18:
            return MODES_310P, GraphMode.FULL_DECODE_ONLY
        return MODES_EAGER, GraphMode.EAGER
    if era == ERA_ENABLE_GRAPH_MODE:
        return MODES_PIECEWISE, GraphMode.EAGER
    if era == ERA_CPU and _lora_on(config):
        return MODES_EAGER, GraphMode.EAGER
    if era in (ERA_TORCHAIR, ERA_CPU):
        return MODES_PIECEWISE, GraphMode.PIECEWISE
    if era == ERA_ACLGRAPH:
        if _ascend_version(versions) >= V0_23:
            return ALL_MODES, GraphMode.FULL_AND_PIECEWISE
        return tuple(m for m in ALL_MODES if m is not GraphMode.FULL_AND_PIECEWISE), GraphMode.PIECEWISE
    vllm = parse_version(versions.vllm)
    if vllm is not None and vllm >= VLLM_CUDAGRAPH_MODE:
        default = (
            GraphMode.FULL_AND_PIECEWISE if vllm >= VLLM_FULL_AND_PIECEWISE_DEFAULT else GraphMode.PIECEWISE
        )
        return ALL_MODES, default
    return MODES_PIECEWISE, GraphMode.PIECEWISE


def graph_ladder(config: EngineConfig, versions: Versions) -> list[GraphMode]:
    """The rungs to try, in order: policy's start (or the remembered start mode) down to EAGER
    (the rule: :func:`ascend_runtime.ladder.ladder`, which the operator budgets with)."""
    graph = config.graph
    return ladder(graph.policy, graph.fallback, *supported_modes(config, versions), graph.start_mode)


# --------------------------------------------------------------------------------------------
# --additional-config keys per vllm-ascend version
# --------------------------------------------------------------------------------------------

#: v0.8.x: only the graph switch is verified (vllm_ascend/platform.py ``_handle_graph_mode``).
_KEYS_0_8 = frozenset({"enable_graph_mode"})
#: v0.9.x: two ascend_config.py snapshots of that era plus the v0.9 additional_config docs.
_KEYS_0_9 = frozenset(
    {
        "torchair_graph_config",
        "ascend_scheduler_config",
        "expert_map_path",
        "chunked_prefill_for_mla",
        "enable_shared_expert_dp",
        "refresh",
        "dynamic_eplb",
        "num_iterations_eplb_update",
        "gate_eplb",
        "num_wait_worker_iterations",
        "enable_weight_nz_layout",
        "enable_prefill_optimizations",
        "enable_cpu_binding",
        "lmhead_tp_size",
        "expert_tensor_parallel_size",
        "kv_cache_dtype",
        "enable_prefetch",
    }
)
#: v0.10.0rc1 .. v0.11.x: reconstructed (0.9 keys, expert_tensor_parallel_size removed in
#: 0.10.0rc1, plus keys of the first ACL-graph-era snapshot that 0.11 already documented).
_KEYS_0_10 = (_KEYS_0_9 - {"expert_tensor_parallel_size"}) | {
    "weight_prefetch_config",
    "lmhead_tensor_parallel_size",
    "oproj_tensor_parallel_size",
    "recompute_scheduler_enable",
    "eplb_policy_type",
    "expert_map_record_path",
    "init_redundancy_expert",
    "xlite_graph_config",
}
#: v0.12.0rc1 .. v0.13.x: an ascend_config.py snapshot without TorchAir (``ascend_compilation_config``
#: with ``enable_quantization_fusion``, ``xlite_graph_config``, ``dump_config``).
_KEYS_0_12 = frozenset(
    {
        "xlite_graph_config",
        "ascend_compilation_config",
        "dump_config",
        "weight_prefetch_config",
        "expert_map_path",
        "eplb_policy_type",
        "expert_map_record_path",
        "init_redundancy_expert",
        "dynamic_eplb",
        "num_iterations_eplb_update",
        "gate_eplb",
        "num_wait_worker_iterations",
        "chunked_prefill_for_mla",
        "enable_shared_expert_dp",
        "multistream_overlap_shared_expert",
        "recompute_scheduler_enable",
        "lmhead_tensor_parallel_size",
        "oproj_tensor_parallel_size",
        "enable_cpu_binding",
        "SLO_limits_for_dynamic_batch",
        "refresh",
    }
)
#: v0.23.0: vllm-ascend-0.23.0-additional-config-keys.tsv (top-level keys) plus scheduler_config.
_KEYS_0_23 = frozenset(
    {
        "xlite_graph_config",
        "ascend_compilation_config",
        "ascend_fusion_config",
        "finegrained_tp_config",
        "eplb_config",
        "weight_prefetch_config",
        "profiling_chunk_config",
        "enable_balance_scheduling",
        "enable_flashcomm1",
        "ascend_log_path",
        "layer_sharding",
        "multistream_overlap_shared_expert",
        "multistream_overlap_gate",
        "recompute_scheduler_enable",
        "enable_cpu_binding",
        "enable_sleep_mode_extra_cleanup",
        "multistream_dsv4_dsa_overlap",
        "enable_matmul_allreduce",
        "enable_fused_mc2",
        "enable_mlapo",
        "enable_flashcomm2_parallel_size",
        "msmonitor_use_daemon",
        "enable_transpose_kv_cache_by_block",
        "SLO_limits_for_dynamic_batch",
        "pa_shape_list",
        "weight_nz_mode",
        "enable_kv_nz",
        "enable_mc2_hierarchy_comm",
        "mega_moe_max_tokens",
        "dp_allreduce_on_npu",
        "enable_reduce_sample",
        "mix_placement",
        "hamming_sparse",
        "rejection_sampler_config",
        "dump_config_path",
        "dump_config",
        "refresh",
        "enable_shared_expert_dp",
        "enable_prefill_mc2",
        "enable_sparse_sfa_c8",
        "enable_sparse_li_c8",
        "c8_enable_reshape_optim",
        "enable_async_exponential",
        "enable_hamming_sparse",
        "scheduler_config",
    }
)

#: (lowest version, key table); the last entry whose version is <= the installed one applies.
ADDITIONAL_CONFIG_KEYS: tuple[tuple[Version, frozenset[str]], ...] = (
    (Version("0"), _KEYS_0_8),
    (V0_9, _KEYS_0_9),
    (V0_10, _KEYS_0_10),
    (V0_11, _KEYS_0_10 | {"multistream_overlap_shared_expert"}),
    (V0_12, _KEYS_0_12),
    (V0_14, _KEYS_0_12 | _KEYS_0_23),
    (V0_23, _KEYS_0_23),
)

_EPLB = "moved into eplb_config (eplb_config.{key})"
_FINE_TP = "moved into finegrained_tp_config (finegrained_tp_config.{key})"
#: key -> (version from which it is no longer read, what replaced it).
REPLACED_KEYS: dict[str, tuple[Version, str]] = {
    "enable_graph_mode": (V0_9, "graph mode is the default from v0.9.0; choose the mode with graph.policy"),
    "expert_tensor_parallel_size": (V0_10, "use engine.parallel.expert (--enable-expert-parallel)"),
    "torchair_graph_config": (
        V0_12,
        "TorchAir was replaced by ACL graph; choose the mode with graph.policy "
        "(rendered as --compilation-config cudagraph_mode)",
    ),
    "ascend_scheduler_config": (
        V0_12,
        "vLLM's own scheduler is used; pass scheduler flags in engine.extraArgs",
    ),
    "lmhead_tensor_parallel_size": (V0_23, _FINE_TP),
    "oproj_tensor_parallel_size": (V0_23, _FINE_TP),
    "dynamic_eplb": (V0_23, _EPLB),
    "expert_map_path": (V0_23, _EPLB),
    "expert_map_record_path": (V0_23, _EPLB),
    "eplb_policy_type": (V0_23, _EPLB),
}


def known_additional_config_keys(vllm_ascend: str) -> frozenset[str]:
    """Top-level ``--additional-config`` keys the given vllm-ascend version reads."""
    version = parse_version(vllm_ascend)
    if version is None:
        raise ValueError(f"vllm-ascend version {vllm_ascend!r} is not a PEP 440 version")
    keys = ADDITIONAL_CONFIG_KEYS[0][1]
    for since, table in ADDITIONAL_CONFIG_KEYS:
        if version >= since:
            keys = table
    return keys


# --------------------------------------------------------------------------------------------
# The command
# --------------------------------------------------------------------------------------------


@dataclass
class EngineCommand:
    argv: list[str]
    env: dict[str, str]
    warnings: list[str]
    mode: GraphMode
    #: The flag dialect used (``ERA_*``), for logs and ``ascend-llm flags``.
    era: str = ""
    #: The weights loader and why (``engine.weightsLoader``; ascend_runtime.weightsload).
    loader: str = field(default="", compare=False)

    def to_json(self) -> dict[str, Any]:
        return {
            "argv": self.argv,
            "env": self.env,
            "warnings": self.warnings,
            "mode": self.mode.value,
            "era": self.era,
            "weightsLoader": self.loader,
        }


#: Flags the ladder or the runtime own: removed from extra_args. Value: takes a value, config hint.
_OWNED_FLAGS: dict[str, tuple[bool, str]] = {
    "--enforce-eager": (False, "graph.policy (eager) and the fallback ladder"),
    "--no-enforce-eager": (False, "graph.policy and the fallback ladder"),
    "--compilation-config": (True, "graph.policy / graph.captureSizes / graph.maxCaptureSize"),
    "-cc": (True, "graph.policy / graph.captureSizes / graph.maxCaptureSize"),
    "-O": (True, "graph.policy"),
    "--additional-config": (True, "ascend.additionalConfig"),
    "--model": (True, "model.path"),
    "--host": (True, "engine.host"),
    "--port": (True, "engine.port"),
    "--served-model-name": (True, "model.servedName"),
    "--shutdown-timeout": (True, "engine.shutdownTimeoutS"),
}
#: Flags a multi-node role owns (removed from extra_args when ``distributed_args`` is passed).
DISTRIBUTED_OWNED_FLAGS: dict[str, tuple[bool, str]] = {
    "--headless": (False, "distributed.role (workers run headless)"),
    "--data-parallel-size-local": (True, "engine.parallel.data / distributed.nodes"),
    "-dpl": (True, "engine.parallel.data / distributed.nodes"),
    "--data-parallel-start-rank": (True, "distributed.workerIndex (LWS_WORKER_INDEX)"),
    "-dpr": (True, "distributed.workerIndex (LWS_WORKER_INDEX)"),
    "--data-parallel-rank": (True, "distributed.workerIndex (LWS_WORKER_INDEX)"),
    "-dpn": (True, "distributed.workerIndex (LWS_WORKER_INDEX)"),
    "--data-parallel-address": (True, "distributed.leaderAddress (LWS_LEADER_ADDRESS) and POD_IP"),
    "-dpa": (True, "distributed.leaderAddress (LWS_LEADER_ADDRESS) and POD_IP"),
    "--data-parallel-rpc-port": (True, "distributed.rpcPort"),
    "-dpp": (True, "distributed.rpcPort"),
    "--distributed-executor-backend": (True, "distributed.backend"),
    "--api-server-count": (True, "distributed.role (one API server, on the leader)"),
    "-asc": (True, "distributed.role (one API server, on the leader)"),
}
#: Flags the runtime owns while ``lora`` is enabled (removed from extra_args then).
LORA_OWNED_FLAGS: dict[str, tuple[bool, str]] = {
    "--enable-lora": (False, "lora.enabled"),
    "--max-loras": (True, "lora.maxLoras"),
    "--max-lora-rank": (True, "lora.maxRank"),
    "--max-cpu-loras": (True, "lora.maxCpuLoras"),
    "--lora-modules": (True, "the adapters file (lora.adaptersFile), which the runtime loads while serving"),
}
#: Flags the runtime owns while ``kv_transfer`` is set (removed from extra_args then).
KV_OWNED_FLAGS: dict[str, tuple[bool, str]] = {
    "--kv-transfer-config": (True, "kv_transfer (spec.disaggregation / spec.kvOffload)"),
    "--kv-offloading-size": (True, "kv_transfer.offloadGib (spec.kvOffload.sizeGiB)"),
    "--kv-offloading-backend": (True, "kv_transfer (spec.kvOffload)"),
}
#: The variable the pod sets from its own name (downward API): the engine_id of its KV connector.
POD_NAME_ENV = "POD_NAME"
#: Owned flags that take one or more values (the others take one).
_MULTI_VALUE_FLAGS = ("--served-model-name", "--lora-modules")
#: vLLM serves /v1/load_lora_adapter and /v1/unload_lora_adapter only with this set to True.
LORA_RUNTIME_UPDATING_ENV = "VLLM_ALLOW_RUNTIME_LORA_UPDATING"

#: Flags the renderer sets that extra_args may override (they win), with the field they override.
_OVERRIDABLE_FLAGS: dict[str, str] = {
    "--max-model-len": "engine.maxModelLen",
    "--max-num-seqs": "engine.maxNumSeqs",
    "--gpu-memory-utilization": "engine.gpuMemoryUtilization",
    "--enable-prefix-caching": "engine.enablePrefixCaching",
    "--no-enable-prefix-caching": "engine.enablePrefixCaching",
    "--dtype": "engine.dtype",
    "--quantization": "engine.quantization",
    "-q": "engine.quantization",
    "--tensor-parallel-size": "engine.parallel.tensor",
    "-tp": "engine.parallel.tensor",
    "--pipeline-parallel-size": "engine.parallel.pipeline",
    "-pp": "engine.parallel.pipeline",
    "--data-parallel-size": "engine.parallel.data",
    "-dp": "engine.parallel.data",
    "--enable-expert-parallel": "engine.parallel.expert",
    "-ep": "engine.parallel.expert",
    "--trust-remote-code": "model.trustRemoteCode",
    "--revision": "model.revision",
    "--tokenizer": "model.tokenizer",
}
#: The canonical long flag for each alias, to compare with what the renderer emitted.
_CANONICAL = {
    "-q": "--quantization",
    "-tp": "--tensor-parallel-size",
    "-pp": "--pipeline-parallel-size",
    "-dp": "--data-parallel-size",
    "-ep": "--enable-expert-parallel",
    "--no-enable-prefix-caching": "--enable-prefix-caching",
}
_TRUTHY = ("1", "true", "yes", "on")


def _flag_name(token: str) -> tuple[str, bool]:
    """(normalised flag name, value attached) for ``--max_model_len=5`` -> (``--max-model-len``, True)."""
    name, eq, _ = token.partition("=")
    if name.startswith("--"):
        name = "--" + name[2:].replace("_", "-")
    return name, bool(eq)


def _owned(name: str, owned: Mapping[str, tuple[bool, str]]) -> tuple[str, bool] | None:
    """The owned flag ``name`` refers to (also dotted ``-cc.key`` and attached ``-O3`` forms)."""
    if name in owned:
        return name, False
    for base in ("--compilation-config", "-cc", "-O", "--additional-config"):
        if name.startswith(base + "."):
            return base, False
    if name.startswith("-O") and not name.startswith("--") and len(name) > 2:
        return "-O", True  # -O3: level attached
    return None


def _filter_extra_args(
    extra: list[str],
    emitted: set[str],
    warnings: list[str],
    owned_flags: Mapping[str, tuple[bool, str]] = _OWNED_FLAGS,
) -> list[str]:
    kept: list[str] = []
    index = 0
    while index < len(extra):
        token = extra[index]
        index += 1
        if not token.startswith("-") or token == "-":
            kept.append(token)
            continue
        name, attached = _flag_name(token)
        owned = _owned(name, owned_flags)
        if owned is not None:
            base, attached_level = owned
            takes_value, hint = owned_flags[base]
            dropped = [token]
            if takes_value and not attached and not attached_level:
                # --served-model-name and --lora-modules take one or more values; the others one.
                while index < len(extra) and not extra[index].startswith("-"):
                    dropped.append(extra[index])
                    index += 1
                    if base not in _MULTI_VALUE_FLAGS:
                        break
            warnings.append(
                f"engine.extraArgs: {' '.join(dropped)} removed; the runtime sets {base} itself (use {hint})"
            )
            continue
        canonical = _CANONICAL.get(name, name)
        if name in _OVERRIDABLE_FLAGS and canonical in emitted:
            warnings.append(
                f"engine.extraArgs: {name} overrides {_OVERRIDABLE_FLAGS[name]} (the later flag wins); "
                f"set {_OVERRIDABLE_FLAGS[name]} instead to avoid this"
            )
        kept.append(token)
    return kept


def _json(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"))


def _vllm_version(versions: Versions, warnings: list[str]) -> Version | None:
    parsed = parse_version(versions.vllm)
    if parsed is not None:
        return parsed
    ascend = parse_version(versions.vllm_ascend) if versions.platform == "ascend" else None
    if ascend is not None:
        paired = Version(".".join(str(part) for part in ascend.release[:3]))
        warnings.append(
            f"vLLM version unknown; assuming vLLM {paired}, the release vllm-ascend "
            f"{versions.vllm_ascend} pairs with"
        )
        return paired
    warnings.append("vLLM version unknown; version-dependent flags (--shutdown-timeout) are left out")
    return None


def _base_args(
    config: EngineConfig,
    vllm: Version | None,
    warnings: list[str],
    command: Sequence[str] | None = None,
    distributed_args: Sequence[str] = (),
) -> list[str]:
    engine, model, parallel = config.engine, config.model, config.engine.parallel
    argv = list(command if command is not None else engine.command)
    argv += [model.path] if argv[-1] == "serve" else ["--model", model.path]
    if model.served_name:
        argv += ["--served-model-name", model.served_name]
    if model.tokenizer:
        argv += ["--tokenizer", model.tokenizer]
    argv += ["--host", engine.host, "--port", str(engine.port)]
    if engine.max_model_len is not None:
        argv += ["--max-model-len", str(engine.max_model_len)]
    if engine.max_num_seqs is not None:
        argv += ["--max-num-seqs", str(engine.max_num_seqs)]
    if engine.gpu_memory_utilization is not None:
        argv += ["--gpu-memory-utilization", f"{engine.gpu_memory_utilization:g}"]
    if engine.enable_prefix_caching is not None:
        argv.append(
            "--enable-prefix-caching" if engine.enable_prefix_caching else "--no-enable-prefix-caching"
        )
    if engine.dtype:
        argv += ["--dtype", engine.dtype]
    if engine.quantization:
        argv += ["--quantization", engine.quantization]
    if parallel.tensor > 1:
        argv += ["--tensor-parallel-size", str(parallel.tensor)]
    if parallel.pipeline > 1:
        argv += ["--pipeline-parallel-size", str(parallel.pipeline)]
    if parallel.data > 1:
        argv += ["--data-parallel-size", str(parallel.data)]
    argv += distributed_args
    if parallel.expert:
        argv.append("--enable-expert-parallel")
    if model.trust_remote_code:
        argv.append("--trust-remote-code")
    if model.revision:
        argv += ["--revision", model.revision]
    if config.lora is not None and config.lora.enabled:
        lora = config.lora
        argv += ["--enable-lora", "--max-loras", str(lora.max_loras), "--max-lora-rank", str(lora.max_rank)]
        if lora.max_cpu_loras is not None:
            argv += ["--max-cpu-loras", str(lora.max_cpu_loras)]
        argv += ["--middleware", ADAPTER_GATE_MIDDLEWARE]  # only the runtime may load or unload
    if vllm is not None and vllm >= VLLM_SHUTDOWN_TIMEOUT:
        argv += ["--shutdown-timeout", str(engine.shutdown_timeout_s)]
    elif vllm is not None:
        warnings.append(
            f"vLLM {vllm} has no --shutdown-timeout (added in v0.18.0); the runtime drains in-flight "
            f"requests itself for up to {engine.shutdown_timeout_s}s on SIGTERM"
        )
    return argv


def _compilation_config(
    config: EngineConfig, mode: GraphMode, era: str, vllm: Version | None, warnings: list[str]
) -> dict[str, Any]:
    graph = config.graph
    if era in (ERA_CPU, ERA_ENABLE_GRAPH_MODE):
        for name, value in (
            ("graph.captureSizes", graph.capture_sizes),
            ("graph.maxCaptureSize", graph.max_capture_size),
        ):
            if value is not None:
                reason = (
                    "CPU graph mode is torch.compile, nothing is captured"
                    if era == ERA_CPU
                    else ("vllm-ascend before 0.9.0 has no ACL graph capture")
                )
                warnings.append(f"{name} ignored: {reason}")
        return {}
    cc: dict[str, Any] = {}
    if era == ERA_ACLGRAPH or (era == ERA_CUDA and vllm is not None and vllm >= VLLM_CUDAGRAPH_MODE):
        cc["cudagraph_mode"] = mode.value
    if graph.capture_sizes is not None:
        cc["cudagraph_capture_sizes"] = list(graph.capture_sizes)
    if graph.max_capture_size is not None:
        if vllm is not None and vllm >= VLLM_MAX_CAPTURE_SIZE:
            cc["max_cudagraph_capture_size"] = graph.max_capture_size
        else:
            warnings.append(
                f"graph.maxCaptureSize ignored: max_cudagraph_capture_size needs vLLM 0.12 or later "
                f"(installed {vllm if vllm is not None else 'unknown'}); list graph.captureSizes instead"
            )
    return cc


def _additional_config(
    config: EngineConfig, versions: Versions, mode: GraphMode, era: str, warnings: list[str]
) -> dict[str, Any]:
    ascend = config.ascend
    if era not in (ERA_ENABLE_GRAPH_MODE, ERA_TORCHAIR, ERA_ACLGRAPH):
        where = f"platform {versions.platform}, vllm-ascend not installed"
        for key in ascend.additional_config:
            warnings.append(f"ascend.additionalConfig.{key} dropped: only vllm-ascend reads it ({where})")
        for name, value in (
            ("ascend.multistreamOverlapSharedExpert", ascend.multistream_overlap_shared_expert),
            ("ascend.enableStaticKernel", ascend.enable_static_kernel),
        ):
            if value is not None:
                warnings.append(f"{name} dropped: only vllm-ascend reads it ({where})")
        return {}

    version = _ascend_version(versions)
    label = versions.vllm_ascend
    known = known_additional_config_keys(str(version))
    out: dict[str, Any] = {}
    for key, value in ascend.additional_config.items():
        if key in known:
            out[key] = value
            continue
        replaced = REPLACED_KEYS.get(key)
        if replaced is not None and version >= replaced[0]:
            warnings.append(
                f"ascend.additionalConfig.{key} dropped: vllm-ascend {label} no longer reads it "
                f"(gone by {replaced[0]}); {replaced[1].format(key=key)}"
            )
        else:
            warnings.append(
                f"ascend.additionalConfig.{key} dropped: not a key vllm-ascend {label} reads "
                "(it would be ignored silently); check the spelling and that version's additional_config docs"
            )

    overlap = ascend.multistream_overlap_shared_expert
    if overlap is not None:
        if "multistream_overlap_shared_expert" in known:
            out["multistream_overlap_shared_expert"] = overlap
        else:
            warnings.append(
                f"ascend.multistreamOverlapSharedExpert dropped: vllm-ascend {label} has no "
                "multistream_overlap_shared_expert (from 0.11.0rc0; before it was "
                "torchair_graph_config.enable_multistream_moe)"
            )

    is_310p = _is_310p(config, versions)
    compilation = out.get("ascend_compilation_config")
    if compilation is not None and not isinstance(compilation, dict):
        warnings.append("ascend.additionalConfig.ascend_compilation_config dropped: it must be a mapping")
        out.pop("ascend_compilation_config")
        compilation = None
    if is_310p and isinstance(compilation, dict):
        for sub in ("enable_npugraph_ex", "enable_static_kernel"):
            if compilation.get(sub):
                warnings.append(
                    f"ascend.additionalConfig.ascend_compilation_config.{sub} dropped: 310P does not support "
                    "npugraph_ex (and static kernels need it)"
                )
                compilation = {k: v for k, v in compilation.items() if k != sub}
        out["ascend_compilation_config"] = compilation
    static = ascend.enable_static_kernel
    if static is not None:
        if era != ERA_ACLGRAPH or version < V0_18:
            warnings.append(
                f"ascend.enableStaticKernel dropped: ascend_compilation_config.enable_static_kernel needs "
                f"vllm-ascend 0.18.0 or later (installed {label})"
            )
        elif is_310p and static:
            warnings.append(
                "ascend.enableStaticKernel dropped: 310P does not support npugraph_ex static kernels"
            )
        else:
            merged = dict(out.get("ascend_compilation_config") or {})
            if "enable_static_kernel" in merged and merged["enable_static_kernel"] != static:
                warnings.append(
                    "ascend.enableStaticKernel overrides ascend.additionalConfig.ascend_compilation_config."
                    "enable_static_kernel"
                )
            merged["enable_static_kernel"] = static
            out["ascend_compilation_config"] = merged
    if out.get("ascend_compilation_config") == {}:
        out.pop("ascend_compilation_config")

    if era == ERA_ENABLE_GRAPH_MODE:
        if mode is GraphMode.EAGER:
            if out.pop("enable_graph_mode", None):
                warnings.append("enable_graph_mode removed on the eager rung (it refuses --enforce-eager)")
        else:
            out["enable_graph_mode"] = True
    elif era == ERA_TORCHAIR and mode is GraphMode.EAGER and "torchair_graph_config" in out:
        out.pop("torchair_graph_config")
        warnings.append(
            f"ascend.additionalConfig.torchair_graph_config removed on the eager rung: vllm-ascend {label} "
            "refuses TorchAir together with --enforce-eager"
        )
    return out


#: vLLM's CPU backend binds its OpenMP threads to cores it picks (``auto``: the first cores of a
#: NUMA node, one core kept for the rest) or to a list; ``nobind`` leaves them to the kernel.
CPU_BIND_ENV = "VLLM_CPU_OMP_THREADS_BIND"
OMP_THREADS_ENV = "OMP_NUM_THREADS"


def cpu_binding_env(versions: Versions, env: Mapping[str, str], base_env: Mapping[str, str]) -> dict[str, str]:
    """``VLLM_CPU_OMP_THREADS_BIND=nobind`` for vLLM's CPU backend in a container that shares the
    node's cores, unless engine.env or the image sets it; with ``nobind`` (ours or theirs),
    ``OMP_NUM_THREADS`` one fewer than the CPUs the container may use (at least 1), unless set.

    ``auto`` picks the same core ids in every container that sees the whole machine, so every
    engine on a node binds to core 0: on the real node a second engine's worker, starting beside
    one that served requests, got under 1 % of a core for minutes (a RollingUpdate never finished,
    tests/node/test_node_restarts.py). With exclusive CPUs (the kubelet's static CPU manager, a
    Guaranteed pod) the cpuset is the container's own and ``auto`` binds within it.

    ``nobind`` alone leaves torch one thread per core of the node. vLLM's scheduler process and
    its workers' message-queue readers spin for a second after each message; an OpenMP thread
    on every core then waits on them at each parallel region, and a request after a short idle
    pause was slow. One core left to them, as ``auto`` leaves (bench/cpu_threads.py)."""

    if versions.platform != "cpu":
        return {}
    out: dict[str, str] = {}
    bind = env.get(CPU_BIND_ENV, base_env.get(CPU_BIND_ENV))
    if bind is None and versions.shared_cpus:
        bind = out[CPU_BIND_ENV] = "nobind"
    if (bind == "nobind" and versions.usable_cpus is not None
            and OMP_THREADS_ENV not in env and OMP_THREADS_ENV not in base_env):
        out[OMP_THREADS_ENV] = str(max(1, versions.usable_cpus - 1))
    return out


def _engine_env(
    config: EngineConfig,
    versions: Versions,
    mode: GraphMode,
    base_env: Mapping[str, str],
    warnings: list[str],
) -> dict[str, str]:
    env = dict(config.engine.env)
    if _lora_on(config):
        asked = env.get(LORA_RUNTIME_UPDATING_ENV)
        if asked is not None and asked != "True":
            warnings.append(
                f"engine.env.{LORA_RUNTIME_UPDATING_ENV}={asked} set to True: the runtime loads and unloads "
                "the adapters of lora.adaptersFile through vLLM's runtime LoRA endpoints"
            )
        env[LORA_RUNTIME_UPDATING_ENV] = "True"
    env.update(cpu_binding_env(versions, env, base_env))
    if versions.platform != "ascend":
        return env
    for key, value in (("TASK_QUEUE_ENABLE", "1"), ("OMP_NUM_THREADS", "1")):
        if key not in env and key not in base_env:
            env[key] = value
    blocking = env.get("ASCEND_LAUNCH_BLOCKING", base_env.get("ASCEND_LAUNCH_BLOCKING", ""))
    if mode is not GraphMode.EAGER and blocking.strip().lower() in _TRUTHY:
        env["ASCEND_LAUNCH_BLOCKING"] = "0"
        warnings.append(
            f"ASCEND_LAUNCH_BLOCKING={blocking} set to 0: vllm-ascend refuses it with graph mode "
            f"({mode.value}); use graph.policy: eager to debug with blocking launches"
        )
    return env


def loader_choice(config: EngineConfig, versions: Versions, vllm: Version | None = None) -> LoaderChoice:
    """The weights loader flags for ``config`` on the installed versions (``error`` set: refuse)."""
    if vllm is None:
        vllm = _vllm_version(versions, [])
    engine = config.engine
    return resolve_loader(engine.weights_loader or WeightsLoader.AUTO, engine.weights_storage or WeightsStorage.LOCAL,
                          vllm, versions.platform, engine.extra_args,
                          streamer_installed=versions.runai_streamer is not None)


def render_engine_command(
    config: EngineConfig,
    versions: Versions,
    mode: GraphMode,
    *,
    base_env: Mapping[str, str] | None = None,
    command: Sequence[str] | None = None,
    distributed_args: Sequence[str] | None = None,
    kv_geometry: KvGeometry | None = None,
) -> EngineCommand:
    """The argv and env overlay that start the engine in ``mode`` on the installed versions.

    ``base_env`` is the environment the engine would inherit (only read, to leave variables the
    image already sets alone). A mode the engine or chip cannot run is demoted (with a warning).
    ``command`` replaces ``engine.command``; ``distributed_args`` (a multi-node role's flags, from
    :func:`ascend_runtime.distributed.plan_distributed`) go after the parallel sizes, and the flags
    in :data:`DISTRIBUTED_OWNED_FLAGS` are then removed from ``engine.extra_args``. With
    ``kv_transfer`` the ``--kv-transfer-config`` comes from :func:`kv_transfer_plan` (``kv_geometry``:
    the model's, else read from its ``config.json`` when offload needs it).
    """

    warnings: list[str] = []
    support = check_lora_support(config, versions.platform, versions.vllm_ascend)
    if support.errors:
        raise ValueError("; ".join(support.errors))
    warnings += support.warnings
    era = engine_era(versions)
    supported, _ = supported_modes(config, versions)
    effective = effective_mode(mode, supported)
    if effective is not mode:
        warnings.append(f"graph mode {mode.value} is not available here ({era}); rendering {effective.value}")
    mode = effective

    vllm = _vllm_version(versions, warnings)
    loader = loader_choice(config, versions, vllm)
    if loader.error:
        raise ValueError(loader.error)
    argv = _base_args(config, vllm, warnings, command, distributed_args or ())
    argv += loader.args
    if mode is GraphMode.EAGER:
        argv.append("--enforce-eager")
    else:
        cc = _compilation_config(config, mode, era, vllm, warnings)
        if cc:
            argv += ["--compilation-config", _json(cc)]
    additional = _additional_config(config, versions, mode, era, warnings)
    if additional:
        argv += ["--additional-config", _json(additional)]
    emitted = {_CANONICAL.get(token, token) for token in argv if token.startswith("-")}
    owned_flags = _OWNED_FLAGS if distributed_args is None else {**_OWNED_FLAGS, **DISTRIBUTED_OWNED_FLAGS}
    if _lora_on(config):
        owned_flags = {**owned_flags, **LORA_OWNED_FLAGS}
    kv_plan = None
    if config.kv_transfer is not None:
        owned_flags = {**owned_flags, **KV_OWNED_FLAGS}
        kv_plan = kv_transfer_plan(config, versions, base_env or {}, kv_geometry)
        argv += kv_plan.args()
    argv += _filter_extra_args(list(config.engine.extra_args), emitted, warnings, owned_flags)
    env = _engine_env(config, versions, mode, base_env or {}, warnings)
    if kv_plan is not None:
        env.update({key: value for key, value in kv_plan.env.items() if key not in env})
    described = f"{loader.loader.value if loader.loader else 'engine default'} ({loader.reason})"
    return EngineCommand(argv=argv, env=env, warnings=warnings, mode=mode, era=era, loader=described)


def kv_inputs(
    kv: KvTransferConfig, platform: str, vllm_ascend: str | None, engine_id: str | None,
    geometry: KvGeometry | None = None,
) -> KvTransferInputs:
    """The renderer's inputs for this engine's ``kv_transfer`` section."""
    role = PdRole(kv.role) if kv.role else None

    def sizes(p: Any) -> Parallelism | None:
        return None if p is None else Parallelism(tensor=p.tensor, data=p.data, pipeline=p.pipeline)

    mine, peer = (kv.prefill, kv.decode) if role is PdRole.PREFILL else (kv.decode, kv.prefill)
    extra: dict[str, Any] = {}
    if kv.side_channel_port is not None:
        extra["side_channel_port"] = kv.side_channel_port
    return KvTransferInputs(
        platform=KvPlatform.CPU if platform == "cpu" else KvPlatform.ASCEND,
        role=role,
        parallel=sizes(mine) or Parallelism(),
        peer=sizes(peer) if role is not None else None,
        vllm_ascend=vllm_ascend,
        connector=Connector(kv.connector) if kv.connector else None,
        kv_port=kv.kv_port,
        npus_per_node=kv.npus_per_node,
        engine_id=engine_id,
        transport=Transport(kv.transport),
        connect_timeout_ms=kv.connect_timeout_ms,
        transfer_timeout_ms=kv.transfer_timeout_ms,
        rank_table_path=kv.rank_table_path,
        shared_storage_path=kv.shared_storage_path,
        offload_gib=kv.offload_gib,
        geometry=geometry,
        **extra,
    )


def model_geometry(model_path: str) -> KvGeometry | None:
    """The KV geometry from ``<model_path>/config.json``, or None (a hub id, no file yet)."""
    path = Path(model_path) / "config.json"
    try:
        return KvGeometry.from_hf_config(json.loads(path.read_text()))
    except (OSError, ValueError, KeyError):
        return None


def kv_transfer_plan(
    config: EngineConfig, versions: Versions, base_env: Mapping[str, str], geometry: KvGeometry | None = None
) -> KvTransferPlan:
    """The KV transfer plan of this engine; raises ``KvTransferError`` (a ``ValueError``) naming the field."""
    kv = config.kv_transfer
    assert kv is not None
    if geometry is None and kv.offload_gib is not None:
        geometry = model_geometry(config.model.path)
    engine_id = base_env.get(POD_NAME_ENV) or None
    return render_kv_transfer(kv_inputs(kv, versions.platform, versions.vllm_ascend, engine_id, geometry))
