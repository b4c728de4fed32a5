"""Engine flags and environment variables the operator or the runtime manage (pure data).

A user's ``engine.extraArgs`` / ``engine.env`` / ``engine.envValueFrom`` must not set them: they
would break what the operator wired (ports the Service and probes use, the NPUs the device plugin
gave, the multi-node wiring), bypass these checks (``--config`` reads flags from a file), widen
what API clients may reach (``--allowed-local-media-path``) or put a secret in the resource
(``--api-key``). :mod:`ascend_operator.api` turns each entry into a CEL rule (the API server
refuses the resource, naming the flag or variable) and the same Python check (the operator
refuses it too). The runtime's own filter (``ascend_runtime.flags``) stays as a second line.
"""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class ReservedFlag:
    """An engine flag (with its aliases) that ``engine.extraArgs`` may not contain."""

    names: tuple[str, ...]
    hint: str
    #: ``--flag.key value`` (vLLM's dotted form for JSON flags) counts as the flag too.
    dotted: bool = False
    #: Any token starting with the name (``-O3``: the level attached) counts as the flag.
    prefix: bool = False

    @property
    def regex(self) -> str:
        """RE2 and Python regex matching one extraArgs token that sets the flag."""
        spelled = "|".join(_spelling(name) for name in self.names)
        if self.prefix:
            return f"^({spelled})"
        tail = "[=.]" if self.dotted else "="
        return f"^({spelled})({tail}.*)?$"

    def matches(self, token: str) -> bool:
        return re.search(self.regex, token) is not None


def _spelling(name: str) -> str:
    """vLLM accepts ``--max_model_len`` for ``--max-model-len``: dashes inside long names match either."""
    if name.startswith("--"):
        return "--" + "[-_]".join(name[2:].split("-"))
    return name


@dataclass(frozen=True)
class ReservedEnv:
    """An environment variable (or every variable with a prefix) the engine's env may not set."""

    name: str
    hint: str
    prefix: bool = False

    @property
    def shown(self) -> str:
        return f"{self.name}*" if self.prefix else self.name

    def matches(self, key: str) -> bool:
        return key.startswith(self.name) if self.prefix else key == self.name


_PARALLEL = "the NPUs requested must match; set spec.parallelism (tensor, pipeline, data) and npu.perReplica"
_MULTINODE = "the operator wires multi-node replicas; set spec.nodesPerReplica and spec.distributed"
_GRAPH = "the runtime owns graph capture and its fallback ladder; set spec.graph"

RESERVED_FLAGS: tuple[ReservedFlag, ...] = (
    ReservedFlag(("--host",), "the engine must listen where the Service and the runtime expect it"),
    ReservedFlag(("--port",), "the Service and the runtime use the engine's fixed port; set spec.service.port"),
    ReservedFlag(("--model",), "set the model source in spec.model"),
    ReservedFlag(("--served-model-name",), "set spec.model.servedName"),
    ReservedFlag(("--tensor-parallel-size", "-tp"), _PARALLEL),
    ReservedFlag(("--pipeline-parallel-size", "-pp"), _PARALLEL),
    ReservedFlag(("--data-parallel-size", "-dp"), _PARALLEL),
    ReservedFlag(("--data-parallel-size-local", "-dpl"), _MULTINODE),
    ReservedFlag(("--data-parallel-start-rank", "-dpr"), _MULTINODE),
    ReservedFlag(("--data-parallel-rank", "-dpn"), _MULTINODE),
    ReservedFlag(("--data-parallel-address", "-dpa"), _MULTINODE),
    ReservedFlag(("--data-parallel-rpc-port", "-dpp"), _MULTINODE),
    ReservedFlag(("--headless",), _MULTINODE),
    ReservedFlag(("--distributed-executor-backend",), "set spec.distributed.backend"),
    ReservedFlag(("--api-server-count", "-asc"), _MULTINODE),
    ReservedFlag(("--enforce-eager", "--no-enforce-eager"), _GRAPH + " (policy eager)"),
    ReservedFlag(("--compilation-config", "-cc"), _GRAPH, dotted=True),
    ReservedFlag(("-O",), _GRAPH, prefix=True),
    ReservedFlag(("--additional-config",), "set spec.ascend.additionalConfig", dotted=True),
    ReservedFlag(("--shutdown-timeout",), "set spec.engine.shutdownTimeoutSeconds"),
    ReservedFlag(("--config",), "a config file would set flags these checks never see; list them in extraArgs"),
    ReservedFlag(
        ("--allowed-local-media-path",),
        "it lets API clients read files of the pod; the operator does not grant that",
    ),
    ReservedFlag(
        ("--api-key",),
        "a key in the resource is readable by everyone who can read it; set spec.engine.apiKeySecretRef",
    ),
)

RESERVED_ENV: tuple[ReservedEnv, ...] = (
    ReservedEnv("ASCEND_VISIBLE_DEVICES", "the device plugin assigns the NPUs; set npu.perReplica"),
    ReservedEnv("ASCEND_RT_VISIBLE_DEVICES", "the device plugin assigns the NPUs; set npu.perReplica"),
    ReservedEnv("ASCEND_LLM_", "the runtime's own settings (config path, log level) come from the operator",
                prefix=True),
    ReservedEnv("HF_TOKEN", "set spec.model.tokenSecretRef"),
    ReservedEnv("MODELSCOPE_API_TOKEN", "set spec.model.tokenSecretRef"),
    ReservedEnv("HF_HOME", "the operator points it at the model cache volume"),
    ReservedEnv("MODELSCOPE_CACHE", "the operator points it at the model cache volume"),
    ReservedEnv("VLLM_USE_MODELSCOPE", "set spec.model.modelScope"),
    ReservedEnv("VLLM_API_KEY", "set spec.engine.apiKeySecretRef"),
    ReservedEnv("VLLM_CPU_KVCACHE_SPACE", "set spec.engine.kvCacheSpaceGiB"),
    ReservedEnv("VLLM_HOST_IP", _MULTINODE),
    ReservedEnv("VLLM_PORT", _MULTINODE),
    ReservedEnv("POD_IP", _MULTINODE),
    ReservedEnv("LWS_", _MULTINODE, prefix=True),
    ReservedEnv("HCCL_IF_IP", _MULTINODE),
    ReservedEnv("HCCL_SOCKET_IFNAME", "set spec.distributed.hccl.socketIfname"),
    ReservedEnv("GLOO_SOCKET_IFNAME", "set spec.distributed.hccl.socketIfname"),
    ReservedEnv("TP_SOCKET_IFNAME", "set spec.distributed.hccl.socketIfname"),
)

