"""The cross-field rule table, :data:`~ascend_operator.api.base.SPEC_RULES`, filled for every spec model.

Each rule carries the CEL the API server evaluates and the Python predicate the operator
evaluates, with one message. CEL sees the raw object (no defaults), so it spells out each default.
"""

from __future__ import annotations

import re
from decimal import Decimal

from ascend_operator.api.base import (
    DEFAULT_CHIP,
    DEFAULT_MIN_REPLICAS,
    DEFAULT_NODES_PER_REPLICA,
    DEFAULT_NPUS_PER_REPLICA,
    SPEC_RULES,
    TRANSITION_RULES,
    AutoscalerProvider,
    AutoscalingSignal,
    DistributedBackend,
    Dtype,
    Platform,
    SpecRule,
    TransitionRule,
)
from ascend_operator.api.features import (
    AdapterHostPathSource,
    AdapterHubSource,
    AdapterPvcSource,
    AdapterSource,
    AutoscalingSpec,
    LoraSpec,
    ScaleToZeroSpec,
)
from ascend_operator.api.model import (
    REVISION_RULE,
    CacheAccessMode,
    CacheClaimSpec,
    EnvValueSource,
    HostPathSource,
    ModelCacheSpec,
    ModelSpec,
    PvcSource,
)
from ascend_operator.api.disaggregation import PdRoleName, RoleSpec
from ascend_operator.api.replica import EngineSpec, GraphSpec, Toleration, quantity_value
from ascend_operator.api.spec import AscendLLMDeploymentSpec, display_model
from ascend_operator.reserved import RESERVED_ENV, RESERVED_FLAGS, ReservedEnv, ReservedFlag
from ascend_runtime.config import LORA_RANKS, Chip, GraphPolicy, WarmupConfig
from ascend_runtime.weightsload import WeightsLoader
from ascend_runtime.kvtransfer import (
    TRANSFER_ENGINE_PORT_BASE,
    TRANSFER_ENGINE_PORTS_PER_NPU,
    Connector,
    Transport,
)
from ascend_runtime.enginelimits import (
    CPU_DEFAULT_MAX_NUM_SEQS,
    LENGTH_MARGIN,
    MAX_MODEL_LEN_FLAGS,
    MAX_NUM_SEQS_FLAGS,
    NPU_DEFAULT_MAX_NUM_SEQS,
    default_max_num_seqs,
    prompt_fits,
)


def _cel_or(path: str, default: str) -> str:
    """CEL for ``self.<path>`` or ``default`` when any step is absent."""
    parts = path.split(".")
    checks = " && ".join(f"has(self.{'.'.join(parts[: i + 1])})" for i in range(len(parts)))
    return f"({checks} ? self.{path} : {default})"


_CHIP = _cel_or("npu.chip", f"'{DEFAULT_CHIP.value}'")
_PER_REPLICA = _cel_or("npu.perReplica", str(DEFAULT_NPUS_PER_REPLICA))
_TP = _cel_or("parallelism.tensor", "1")
_PP = _cel_or("parallelism.pipeline", "1")
_DP = _cel_or("parallelism.data", "1")
_IS_CPU = "(has(self.platform) && self.platform == 'CPU')"
_NODES = _cel_or("nodesPerReplica", str(DEFAULT_NODES_PER_REPLICA))
_BACKEND = _cel_or("distributed.backend", f"'{DistributedBackend.MP.value}'")
# On spec.autoscaling (self is the autoscaling object).
_MIN = f"(has(self.minReplicas) ? self.minReplicas : {DEFAULT_MIN_REPLICAS})"
_STZ = "(has(self.scaleToZero) && has(self.scaleToZero.enabled) && self.scaleToZero.enabled)"
_CUSTOM = "(has(self.signal) && self.signal == 'custom')"
_HPA = "(has(self.provider) && self.provider == 'hpa')"


#: The base model's served name as far as the spec says it (the resource name, the last default,
#: is not visible to CEL: the operator checks that case when it reconciles).
_SERVED = (
    "(has(self.model.servedName) ? self.model.servedName : has(self.model.huggingFace) ? "
    "self.model.huggingFace.id : has(self.model.modelScope) ? self.model.modelScope.id : '')"
)


# Warmup against the engine's limits (spec level: warmup, engine and platform together). A limit
# set through engine.extraArgs is not readable here: the runtime checks the rendered command line.
_WARM = "(!has(self.warmup) || !has(self.warmup.enabled) || self.warmup.enabled)"
_MAX_TOKENS = (f"(has(self.warmup) && has(self.warmup.maxTokens) ? self.warmup.maxTokens "
               f": {WarmupConfig().max_tokens})")
#: promptLengths unset: the runtime's derived plan (ascend_runtime.warmup.derived_plan) needs room for
#: one prompt token; its prompts are at most maxModelLen - maxTokens - 8 long.
_MIN_DERIVED_LENGTH = 1


def _args_set(pattern: str) -> str:
    """CEL: some engine.extraArgs token matches ``pattern``."""
    return ("(has(self.engine) && has(self.engine.extraArgs) && "
            f"self.engine.extraArgs.exists(a, a.matches('{_cel_quote(pattern)}')))")


def _args_match(spec: AscendLLMDeploymentSpec, pattern: str) -> bool:
    return any(re.search(pattern, token) for token in spec.engine.extra_args)


def effective_max_num_seqs(spec: AscendLLMDeploymentSpec) -> int:
    """engine.maxNumSeqs, else vLLM's default for the platform (CPU replicas run tensor x pipeline 1)."""
    if spec.engine.max_num_seqs is not None:
        return spec.engine.max_num_seqs
    return default_max_num_seqs(spec.platform == Platform.CPU)


def _concurrency_fits(s: AscendLLMDeploymentSpec) -> bool:
    return (not s.warmup.enabled or s.warmup.concurrency is None or _args_match(s, MAX_NUM_SEQS_FLAGS)
            or all(level <= effective_max_num_seqs(s) for level in s.warmup.concurrency))


def _lengths_fit(s: AscendLLMDeploymentSpec) -> bool:
    limit = s.engine.max_model_len
    if not s.warmup.enabled or limit is None or _args_match(s, MAX_MODEL_LEN_FLAGS):
        return True
    tokens = s.warmup.max_tokens or WarmupConfig().max_tokens
    lengths = s.warmup.prompt_lengths or [_MIN_DERIVED_LENGTH]
    return all(prompt_fits(length, tokens, limit) for length in lengths)


def _decode_graphs_fit(s: AscendLLMDeploymentSpec) -> bool:
    g = s.graph
    if g.policy != GraphPolicy.FULL_DECODE_ONLY or _args_match(s, _DECODE_FLAGS):
        return True
    sizes = [*(g.capture_sizes or ()), *([g.max_capture_size] if g.max_capture_size is not None else [])]
    return all(size <= effective_max_num_seqs(s) for size in sizes)


def _running_target_fits(s: AscendLLMDeploymentSpec) -> bool:
    a = s.autoscaling
    if a is None or a.signal != AutoscalingSignal.RUNNING or a.target is None:
        return True
    return _args_match(s, MAX_NUM_SEQS_FLAGS) or a.target <= effective_max_num_seqs(s) * s.parallelism.data


#: Flags that change how many tokens a decode batch holds or its limit: then the sizes are the user's.
_DECODE_FLAGS = r"^--(max[-_]num[-_]seqs|performance[-_]mode|speculative[-_]config)(=|$)"
_SEQS_CEL = (f"(has(self.engine) && has(self.engine.maxNumSeqs) ? self.engine.maxNumSeqs : {_IS_CPU} "
             f"? {CPU_DEFAULT_MAX_NUM_SEQS} : {NPU_DEFAULT_MAX_NUM_SEQS})")


def _engine_limit_rules() -> tuple[SpecRule, ...]:
    """Warmup, decode graphs and the running-requests target against engine.maxNumSeqs / maxModelLen
    (docs/validation.md)."""
    return (
        SpecRule(
            cel=f"!{_WARM} || !has(self.warmup) || !has(self.warmup.concurrency) "
            f"|| {_args_set(MAX_NUM_SEQS_FLAGS)} || self.warmup.concurrency.all(c, c <= {_SEQS_CEL})",
            message=(
                "every warmup.concurrency entry must be at most engine.maxNumSeqs (unset: vLLM's default, "
                f"{NPU_DEFAULT_MAX_NUM_SEQS} on NPUs, {CPU_DEFAULT_MAX_NUM_SEQS} on CPU): the engine never "
                "batches more; lower warmup.concurrency or raise engine.maxNumSeqs"
            ),
            field_path=".warmup.concurrency",
            holds=_concurrency_fits,
        ),
        SpecRule(
            cel=f"!{_WARM} || !has(self.engine) || !has(self.engine.maxModelLen) || {_args_set(MAX_MODEL_LEN_FLAGS)} "
            f"|| (has(self.warmup) && has(self.warmup.promptLengths) ? self.warmup.promptLengths.all(n, "
            f"n + {_MAX_TOKENS} + {LENGTH_MARGIN} <= self.engine.maxModelLen) "
            f": {_MIN_DERIVED_LENGTH} + {_MAX_TOKENS} + {LENGTH_MARGIN} <= self.engine.maxModelLen)",
            message=(
                f"every warmup.promptLengths entry plus warmup.maxTokens plus {LENGTH_MARGIN} tokens of margin "
                "must fit in engine.maxModelLen (promptLengths unset: the derived plan's shortest prompt, "
                f"{_MIN_DERIVED_LENGTH} token, must fit); lower warmup.promptLengths or warmup.maxTokens, or raise "
                "engine.maxModelLen"
            ),
            field_path=".warmup.promptLengths",
            holds=_lengths_fit,
        ),
        SpecRule(
            cel="!has(self.graph) || !has(self.graph.policy) || self.graph.policy != 'full_decode_only' "
            f"|| {_args_set(_DECODE_FLAGS)} || ((!has(self.graph.captureSizes) "
            f"|| self.graph.captureSizes.all(n, n <= {_SEQS_CEL})) && (!has(self.graph.maxCaptureSize) "
            f"|| self.graph.maxCaptureSize <= {_SEQS_CEL}))",
            message=(
                "graph.policy full_decode_only captures decode batches only, which hold at most "
                "engine.maxNumSeqs requests (unset: vLLM's default, "
                f"{NPU_DEFAULT_MAX_NUM_SEQS} on NPUs, {CPU_DEFAULT_MAX_NUM_SEQS} on CPU): a larger "
                "graph.captureSizes entry or graph.maxCaptureSize is captured and never replayed; "
                "lower them or raise engine.maxNumSeqs"
            ),
            field_path=".graph.captureSizes",
            holds=_decode_graphs_fit,
        ),
        SpecRule(
            cel="!has(self.autoscaling) || !has(self.autoscaling.signal) "
            "|| self.autoscaling.signal != 'runningRequestsPerReplica' || !has(self.autoscaling.target) "
            f"|| {_args_set(MAX_NUM_SEQS_FLAGS)} "
            f"|| double(self.autoscaling.target) <= double({_SEQS_CEL} * {_DP})",
            message=(
                "autoscaling.target of signal runningRequestsPerReplica must be at most engine.maxNumSeqs x "
                "parallelism.data (unset maxNumSeqs: vLLM's default, "
                f"{NPU_DEFAULT_MAX_NUM_SEQS} on NPUs, {CPU_DEFAULT_MAX_NUM_SEQS} on CPU): a replica never "
                "runs more requests, so the autoscaler would never scale up; lower autoscaling.target or "
                "raise engine.maxNumSeqs"
            ),
            field_path=".autoscaling.target",
            holds=_running_target_fits,
        ),
    )


def _served_name(spec: AscendLLMDeploymentSpec) -> str:
    """:data:`_SERVED` in Python: ``display_model`` without the resource name."""
    return display_model(spec, "")


def _relative_dir_rule() -> SpecRule:
    return SpecRule(
        cel="!has(self.subPath) || !self.subPath.matches('(^|/)\\\\.\\\\.?(/|$)')",
        message="subPath must stay inside the volume: no '.' or '..' segment; write the directory, for example adapters/sql",
        field_path=".subPath",
        holds=lambda source: source.sub_path is None or re.search(r"(^|/)\.\.?(/|$)", source.sub_path) is None,
    )


def _npus(spec: AscendLLMDeploymentSpec) -> int:
    p = spec.parallelism
    return p.tensor * p.pipeline * p.data


def _flag_rule(flag: ReservedFlag) -> SpecRule:
    shown = " / ".join(flag.names)
    return SpecRule(
        cel=f"!has(self.extraArgs) || self.extraArgs.all(a, !a.matches('{_cel_quote(flag.regex)}'))",
        message=f"engine.extraArgs must not set {shown}: {flag.hint}",
        field_path=".extraArgs",
        holds=lambda e: not any(flag.matches(token) for token in e.extra_args),
    )


def _env_rule(var: ReservedEnv) -> SpecRule:
    if var.prefix:
        def test(field: str) -> str:
            return f"!has(self.{field}) || self.{field}.all(k, !k.startsWith('{var.name}'))"
    else:
        def test(field: str) -> str:
            return f"!has(self.{field}) || !('{var.name}' in self.{field})"
    return SpecRule(
        cel=f"({test('env')}) && ({test('envValueFrom')})",
        message=f"engine.env and engine.envValueFrom must not set {var.shown}: {var.hint}",
        field_path=".env",
        holds=lambda e: not any(var.matches(key) for key in (*e.env, *e.env_value_from)),
    )


def _cel_quote(text: str) -> str:
    return text.replace("\\", "\\\\").replace("'", "\\'")


# --------------------------------------------------------------------------------------------
# spec.disaggregation and spec.kvOffload (self is the spec: the rules read platform, chip, backend).

_D = "self.disaggregation"
_HAS_D = f"has({_D})"
#: NPUs of one node, which sizes the transfer engine's random port range (A3: 16 dies).
_NODE_NPUS_CEL = f"({_CHIP} == 'A3' ? 16 : 8)"
_KV_FLAGS = r"^--kv[-_](transfer[-_]config([=.].*)?|offloading[-_](size|backend)(=.*)?)$"


def _node_npus(spec: AscendLLMDeploymentSpec) -> int:
    return 16 if spec.npu.chip == Chip.A3 else 8


def _role(spec: AscendLLMDeploymentSpec, role: PdRoleName) -> RoleSpec | None:
    d = spec.disaggregation
    return None if d is None else getattr(d, role.value)


def _role_ranks(role: RoleSpec) -> int:
    p = role.parallelism
    return p.tensor * p.pipeline * p.data


def _r(role: PdRoleName, path: str, default: str) -> str:
    return _cel_or(f"disaggregation.{role.value}.{path}", default)


def _r_ranks(role: PdRoleName) -> str:
    return (f"{_r(role, 'parallelism.tensor', '1')} * {_r(role, 'parallelism.pipeline', '1')} "
            f"* {_r(role, 'parallelism.data', '1')}")


def _mooncake(spec: AscendLLMDeploymentSpec) -> bool:
    """MooncakeConnectorV1 on Ascend: chosen, or the default (of every image from vllm-ascend 0.10.1rc1)."""
    d = spec.disaggregation
    return d is not None and spec.platform != Platform.CPU and d.connector in (None, Connector.MOONCAKE)


_MOONCAKE_CEL = f"({_HAS_D} && !{_IS_CPU} && (!has({_D}.connector) || {_D}.connector == '{Connector.MOONCAKE.value}'))"


def _kv_port_fits(spec: AscendLLMDeploymentSpec) -> bool:
    d = spec.disaggregation
    if d is None or d.kv_port is None or spec.platform == Platform.CPU:
        return True
    end = TRANSFER_ENGINE_PORT_BASE + _node_npus(spec) * TRANSFER_ENGINE_PORTS_PER_NPU
    return all(
        (d.kv_port + ranks - 1 < TRANSFER_ENGINE_PORT_BASE or d.kv_port >= end) and d.kv_port + ranks - 1 <= 65535
        for ranks in (_role_ranks(d.prefill), _role_ranks(d.decode)))


def _kv_port_cel() -> str:
    port = f"{_D}.kvPort"
    end = f"{TRANSFER_ENGINE_PORT_BASE} + {_NODE_NPUS_CEL} * {TRANSFER_ENGINE_PORTS_PER_NPU}"
    fits = " && ".join(
        f"(({port} + {_r_ranks(role)} - 1 < {TRANSFER_ENGINE_PORT_BASE} || {port} >= {end}) "
        f"&& {port} + {_r_ranks(role)} - 1 <= 65535)" for role in PdRoleName)
    return f"!{_HAS_D} || !has({port}) || {_IS_CPU} || ({fits})"


def _kv_flags_absent(spec: AscendLLMDeploymentSpec) -> bool:
    if spec.disaggregation is None and spec.kv_offload is None:
        return True
    engines = [spec.engine] + [r.engine for r in (spec.disaggregation.prefill, spec.disaggregation.decode)
                               if r.engine is not None] if spec.disaggregation else [spec.engine]
    return not any(re.search(_KV_FLAGS, token) for engine in engines for token in engine.extra_args)


def _kv_flags_cel() -> str:
    quoted = _cel_quote(_KV_FLAGS)
    def clean(path: str) -> str:
        return f"(!has({path}) || !has({path}.extraArgs) || {path}.extraArgs.all(a, !a.matches('{quoted}')))"
    roles = " && ".join(f"(!{_HAS_D} || {clean(f'{_D}.{role.value}.engine')})" for role in PdRoleName)
    return f"!({_HAS_D} || has(self.kvOffload)) || ({clean('self.engine')} && {roles})"


def _role_rules(role: PdRoleName) -> tuple[SpecRule, ...]:
    name = role.value
    where = f"disaggregation.{name}"
    nodes = _r(role, "nodesPerReplica", "1")
    per = _r(role, "npu.perReplica", str(DEFAULT_NPUS_PER_REPLICA))
    data = _r(role, "parallelism.data", "1")

    def with_role(test):  # the predicate on the role, true without disaggregation
        return lambda s: _role(s, role) is None or test(s, _role(s, role))

    return (
        SpecRule(
            cel=f"!{_HAS_D} || {_IS_CPU} || {_r_ranks(role)} == {nodes} * {per}",
            message=(
                f"{where}: parallelism tensor x pipeline x data must equal nodesPerReplica x npu.perReplica "
                f"(each {name} replica uses exactly its NPUs); change {where}.parallelism, {where}.npu.perReplica "
                f"or {where}.nodesPerReplica"
            ),
            field_path=f".{where}.npu.perReplica",
            holds=with_role(lambda s, r: s.platform == Platform.CPU
                            or _role_ranks(r) == r.nodes_per_replica * r.npu.per_replica),
        ),
        SpecRule(
            cel=f"!{_HAS_D} || {nodes} == 1 || {_BACKEND} != 'mp' || {data} % {nodes} == 0",
            message=(
                f"distributed.backend mp places whole data-parallel ranks on each node, so {where}.parallelism.data "
                f"must be a multiple of {where}.nodesPerReplica; raise it (and lower tensor) or set distributed.backend ray"
            ),
            field_path=f".{where}.parallelism.data",
            holds=with_role(lambda s, r: r.nodes_per_replica == 1 or s.distributed.backend != DistributedBackend.MP
                            or r.parallelism.data % r.nodes_per_replica == 0),
        ),
        SpecRule(
            cel=f"!{_HAS_D} || {nodes} == 1 || {_BACKEND} != 'ray' || {data} == 1",
            message=(
                f"distributed.backend ray spreads tensor and pipeline parallel across the nodes; set "
                f"{where}.parallelism.data to 1, or use distributed.backend mp for data parallel"
            ),
            field_path=f".{where}.parallelism.data",
            holds=with_role(lambda s, r: r.nodes_per_replica == 1 or s.distributed.backend != DistributedBackend.RAY
                            or r.parallelism.data == 1),
        ),
        SpecRule(
            cel=f"!{_HAS_D} || !{_IS_CPU} || ({nodes} == 1 && {_r_ranks(role)} == 1 && !has({_D}.{name}.npu))",
            message=(
                f"platform CPU runs one single-node engine process per {name} replica and uses no NPUs; set "
                f"{where}.nodesPerReplica and its tensor, pipeline and data parallel to 1 and remove {where}.npu"
            ),
            field_path=f".{where}",
            holds=with_role(lambda s, r: s.platform != Platform.CPU or (
                r.nodes_per_replica == 1 and _role_ranks(r) == 1 and "npu" not in r.model_fields_set)),
        ),
        SpecRule(
            cel=f"!{_HAS_D} || {_IS_CPU} || {_CHIP} != 'A3' || {per} >= 2",
            message=f"chip A3 needs at least 2 NPUs per pod (one card has two dies); set {where}.npu.perReplica >= 2",
            field_path=f".{where}.npu.perReplica",
            holds=with_role(lambda s, r: s.platform == Platform.CPU or s.npu.chip != Chip.A3
                            or r.npu.per_replica >= 2),
        ),
    )


def _normalised_disaggregation_path(field: str, attribute: str, example: str) -> SpecRule:
    """``spec.disaggregation.<field>`` has no ``.`` or ``..`` segment (the pattern refuses the rest)."""

    def holds(s: AscendLLMDeploymentSpec) -> bool:
        value = None if s.disaggregation is None else getattr(s.disaggregation, attribute)
        return value is None or re.search(r"/\.\.?(/|$)", value) is None

    return SpecRule(
        cel=f"!{_HAS_D} || !has({_D}.{field}) || !{_D}.{field}.matches('/\\\\.\\\\.?(/|$)')",
        message=f"disaggregation.{field} must be normalised: no '.' or '..' segment; write the path itself, "
                f"for example {example}",
        field_path=f".disaggregation.{field}",
        holds=holds,
    )


def _disaggregation_rules() -> tuple[SpecRule, ...]:
    p, d = PdRoleName.PREFILL, PdRoleName.DECODE
    ascend_connectors = f"['{Connector.MOONCAKE.value}', '{Connector.LLMDATADIST.value}']"
    cpu_connectors = f"['{Connector.NIXL.value}', '{Connector.EXAMPLE.value}']"
    return (
        *_role_rules(p),
        *_role_rules(d),
        SpecRule(
            cel=f"!{_MOONCAKE_CEL} || {_r(p, 'parallelism.tensor', '1')} >= {_r(d, 'parallelism.tensor', '1')}",
            message=(
                "MooncakeConnectorV1 (the default connector on Ascend) needs prefill tensor parallel >= decode "
                "tensor parallel (its worker raises ValueError otherwise); raise "
                "disaggregation.prefill.parallelism.tensor or lower disaggregation.decode.parallelism.tensor"
            ),
            field_path=".disaggregation.prefill.parallelism.tensor",
            holds=lambda s: not _mooncake(s) or (
                s.disaggregation.prefill.parallelism.tensor >= s.disaggregation.decode.parallelism.tensor),
        ),
        SpecRule(
            cel=f"!{_MOONCAKE_CEL} || {_r(d, 'parallelism.pipeline', '1')} == 1",
            message=(
                "MooncakeConnectorV1 asserts decode pipeline parallel 1; set "
                "disaggregation.decode.parallelism.pipeline to 1 (use tensor or data parallel for decode)"
            ),
            field_path=".disaggregation.decode.parallelism.pipeline",
            holds=lambda s: not _mooncake(s) or s.disaggregation.decode.parallelism.pipeline == 1,
        ),
        SpecRule(
            cel=f"!{_HAS_D} || !has({_D}.connector) || ({_IS_CPU} ? {_D}.connector in {cpu_connectors} "
            f": {_D}.connector in {ascend_connectors})",
            message=(
                "disaggregation.connector does not run on this platform: Ascend takes MooncakeConnectorV1 or "
                "LLMDataDistCMgrConnector, platform CPU NixlConnector or ExampleConnector; change it or leave it out"
            ),
            field_path=".disaggregation.connector",
            holds=lambda s: s.disaggregation is None or s.disaggregation.connector is None or (
                s.disaggregation.connector in ((Connector.NIXL, Connector.EXAMPLE) if s.platform == Platform.CPU
                                               else (Connector.MOONCAKE, Connector.LLMDATADIST))),
        ),
        SpecRule(
            cel=f"!{_HAS_D} || !has({_D}.connector) || {_D}.connector != '{Connector.EXAMPLE.value}' "
            f"|| has({_D}.sharedStoragePath)",
            message=(
                "ExampleConnector keeps KV in a directory both roles read; set disaggregation.sharedStoragePath"
            ),
            field_path=".disaggregation.sharedStoragePath",
            holds=lambda s: s.disaggregation is None or s.disaggregation.connector != Connector.EXAMPLE
            or s.disaggregation.shared_storage_path is not None,
        ),
        SpecRule(
            cel=f"!{_HAS_D} || !has({_D}.connector) || {_D}.connector != '{Connector.LLMDATADIST.value}' "
            f"|| has({_D}.rankTablePath) || has({_D}.rankTableConfigMap)",
            message=(
                "LLMDataDistCMgrConnector reads a rank table of every prefill and decode NPU's device IP; set "
                "disaggregation.rankTableConfigMap (a ConfigMap holding the table made by vllm-ascend's "
                "gen_ranktable.sh) or rankTablePath (a file in the image), or use MooncakeConnectorV1"
            ),
            field_path=".disaggregation.rankTablePath",
            holds=lambda s: s.disaggregation is None or s.disaggregation.connector != Connector.LLMDATADIST
            or s.disaggregation.rank_table_file is not None,
        ),
        *(_normalised_disaggregation_path(field, attribute, example) for field, attribute, example in (
            ("sharedStoragePath", "shared_storage_path", "/data/llm-cache/kv"),
            ("rankTablePath", "rank_table_path", "/etc/ranktable/ranktable.json"),
        )),
        SpecRule(
            cel=_kv_port_cel(),
            message=(
                "disaggregation.kvPort: every role's ports (kvPort up to kvPort + tensor x pipeline x data - 1) must "
                "stay below 20000 or at or above 20000 + NPUs per node x 1000 (28000 on 910B, 36000 on A3: the "
                "transfer engine's random ports), and at most 65535; choose another kvPort or leave it out"
            ),
            field_path=".disaggregation.kvPort",
            holds=_kv_port_fits,
        ),
        SpecRule(
            cel=f"!{_HAS_D} || !{_IS_CPU} || (!has({_D}.kvPort) && !has({_D}.connectTimeoutMs) "
            f"&& !has({_D}.transferTimeoutMs) && !has({_D}.rankTablePath) && !has({_D}.rankTableConfigMap) "
            f"&& (!has({_D}.transport) || {_D}.transport == '{Transport.DEFAULT.value}'))",
            message=(
                "disaggregation.kvPort, transport, connectTimeoutMs, transferTimeoutMs, rankTablePath and "
                "rankTableConfigMap apply to the Ascend transfer engine; remove them on platform CPU"
            ),
            field_path=".disaggregation",
            holds=lambda s: s.disaggregation is None or s.platform != Platform.CPU or (
                not ({"kv_port", "connect_timeout_ms", "transfer_timeout_ms", "rank_table_path",
                      "rank_table_config_map"}
                     & {k for k in s.disaggregation.model_fields_set if getattr(s.disaggregation, k) is not None})
                and s.disaggregation.transport == Transport.DEFAULT),
        ),
        SpecRule(
            cel=f"!{_IS_CPU} || !has(self.kvOffload)",
            message=(
                "vLLM's CPU platform refuses KV offloading (\"CPU Offloading is currently only supported on "
                "CUDA-alike and XPU GPUs\", vllm/v1/kv_offload/cpu/spec.py); remove spec.kvOffload on platform CPU"
            ),
            field_path=".kvOffload",
            holds=lambda s: s.platform != Platform.CPU or s.kv_offload is None,
        ),
        SpecRule(
            cel=_kv_flags_cel(),
            message=(
                "engine.extraArgs must not set --kv-transfer-config, --kv-offloading-size or --kv-offloading-backend "
                "with spec.disaggregation or spec.kvOffload: the runtime renders them for the installed version; "
                "remove them (also from disaggregation.prefill/decode.engine.extraArgs)"
            ),
            field_path=".engine.extraArgs",
            holds=_kv_flags_absent,
        ),
        SpecRule(
            cel=f"!{_HAS_D} || (!has(self.nodesPerReplica) && !has(self.parallelism) "
            "&& !(has(self.npu) && has(self.npu.perReplica)))",
            message=(
                "with spec.disaggregation, nodesPerReplica, parallelism and npu.perReplica are set per role; move "
                "them to disaggregation.prefill and disaggregation.decode"
            ),
            field_path=".disaggregation",
            holds=lambda s: s.disaggregation is None or not (
                {"nodes_per_replica", "parallelism"} & s.model_fields_set or "per_replica" in s.npu.model_fields_set),
        ),
        SpecRule(
            cel=f"!{_HAS_D} || (!has(self.autoscaling) && !has(self.lora))",
            message=(
                "spec.autoscaling and spec.lora are not wired for a disaggregated resource yet; remove them, or "
                "remove spec.disaggregation"
            ),
            field_path=".disaggregation",
            holds=lambda s: s.disaggregation is None or (s.autoscaling is None and s.lora is None),
        ),
        SpecRule(
            cel=" && ".join(f"(!{_HAS_D} || !has({_D}.{role.value}.autoscaling) "
                            f"|| !has({_D}.{role.value}.autoscaling.scaleToZero) "
                            f"|| !has({_D}.{role.value}.autoscaling.scaleToZero.enabled) "
                            f"|| !{_D}.{role.value}.autoscaling.scaleToZero.enabled)" for role in PdRoleName),
            message=(
                "scale-to-zero of one role would leave the other without its peer; turn "
                "disaggregation.prefill/decode.autoscaling.scaleToZero off (scale the whole resource with "
                "kubectl scale of each role's replicas instead)"
            ),
            field_path=".disaggregation",
            holds=lambda s: s.disaggregation is None or not any(
                r.autoscaling is not None and r.autoscaling.scale_to_zero.enabled
                for r in (s.disaggregation.prefill, s.disaggregation.decode)),
        ),
        SpecRule(
            cel=f"!{_HAS_D} || !has(self.routing) || (has(self.routing.enabled) && !self.routing.enabled) "
            f"|| ({_r(p, 'nodesPerReplica', '1')} == 1 && {_r(d, 'nodesPerReplica', '1')} == 1)",
            message=(
                "spec.routing of a disaggregated resource routes to single-node roles only (the InferencePool "
                "cannot tell a multi-node replica's leader from its workers across two workloads); set "
                "disaggregation.prefill/decode.nodesPerReplica to 1 or turn routing off"
            ),
            field_path=".routing",
            holds=lambda s: s.disaggregation is None or s.routing is None or not s.routing.enabled or (
                s.disaggregation.prefill.nodes_per_replica == 1 and s.disaggregation.decode.nodes_per_replica == 1),
        ),
    )


SPEC_RULES.update(
    {
        Toleration: (
            SpecRule(
                cel="!has(self.operator) || self.operator != 'Exists' || !has(self.value) || self.value == ''",
                message="a toleration with operator Exists matches any value; remove value",
                field_path=".value",
                holds=lambda t: t.operator != "Exists" or not t.value,
            ),
            SpecRule(
                cel="(has(self.key) && self.key != '') || (has(self.operator) && self.operator == 'Exists')",
                message="a toleration without key must use operator Exists (it then tolerates every taint)",
                field_path=".key",
                holds=lambda t: bool(t.key) or t.operator == "Exists",
            ),
            SpecRule(
                cel="!has(self.tolerationSeconds) || (has(self.effect) && self.effect == 'NoExecute')",
                message="tolerationSeconds only applies to effect NoExecute; set effect NoExecute or remove it",
                field_path=".tolerationSeconds",
                holds=lambda t: t.toleration_seconds is None or t.effect == "NoExecute",
            ),
        ),
        HostPathSource: (
            SpecRule(
                cel="!self.path.matches('/\\\\.\\\\.?(/|$)')",
                message=(
                    "hostPath.path must be normalised: no '.' or '..' segment; write the directory "
                    "itself, for example /data/models/qwen"
                ),
                field_path=".path",
                holds=lambda h: re.search(r"/\.\.?(/|$)", h.path) is None,
            ),
        ),
        EnvValueSource: (
            SpecRule(
                cel="(has(self.secretKeyRef) ? 1 : 0) + (has(self.configMapKeyRef) ? 1 : 0) == 1",
                message="set exactly one of secretKeyRef and configMapKeyRef",
                field_path="",
                holds=lambda v: (v.secret_key_ref is None) != (v.config_map_key_ref is None),
            ),
        ),
        EngineSpec: (
            SpecRule(
                cel="!has(self.env) || !has(self.envValueFrom) || self.envValueFrom.all(k, !(k in self.env))",
                message="a variable is set in both engine.env and engine.envValueFrom; keep one",
                field_path=".envValueFrom",
                holds=lambda e: not set(e.env) & set(e.env_value_from),
            ),
            *(_flag_rule(flag) for flag in RESERVED_FLAGS),
            *(_env_rule(var) for var in RESERVED_ENV),
        ),
        ModelCacheSpec: (
            SpecRule(
                cel="(has(self.create) ? 1 : 0) + (has(self.claimName) ? 1 : 0) + (has(self.hostPath) ? 1 : 0) == 1",
                message="set exactly one of create, claimName and hostPath",
                field_path="",
                holds=lambda c: sum(v is not None for v in (c.create, c.claim_name, c.host_path)) == 1,
            ),
            SpecRule(
                cel="!has(self.hostPath) || !self.hostPath.matches('/\\\\.\\\\.?(/|$)')",
                message=(
                    "hostPath must be normalised: no '.' or '..' segment; write the directory itself, for "
                    "example /data/llm-cache"
                ),
                field_path=".hostPath",
                holds=lambda c: c.host_path is None or re.search(r"/\.\.?(/|$)", c.host_path) is None,
            ),
        ),
        ModelSpec: (
            SpecRule(
                cel="(has(self.pvc) ? 1 : 0) + (has(self.hostPath) ? 1 : 0) + (has(self.huggingFace) ? 1 : 0)"
                " + (has(self.modelScope) ? 1 : 0) == 1",
                message="set exactly one model source: pvc, hostPath, huggingFace or modelScope",
                field_path="",
                holds=lambda m: len(m.sources()) == 1,
            ),
            REVISION_RULE,
            SpecRule(
                cel="!has(self.tokenSecretRef) || has(self.huggingFace) || has(self.modelScope)",
                message="tokenSecretRef is only used with huggingFace or modelScope sources; remove it",
                field_path=".tokenSecretRef",
                holds=lambda m: (
                    m.token_secret_ref is None or m.hugging_face is not None or m.model_scope is not None
                ),
            ),
        ),
        GraphSpec: (
            SpecRule(
                cel="!has(self.captureSizes) || !has(self.maxCaptureSize) || self.captureSizes.all(s, s <= self.maxCaptureSize)",
                message="every captureSizes entry must be at most maxCaptureSize; raise maxCaptureSize or drop the larger sizes",
                field_path=".captureSizes",
                holds=lambda g: (
                    g.capture_sizes is None
                    or g.max_capture_size is None
                    or all(size <= g.max_capture_size for size in g.capture_sizes)
                ),
            ),
            SpecRule(
                cel="!has(self.policy) || self.policy != 'eager' || (!has(self.captureSizes) && !has(self.maxCaptureSize))",
                message="policy eager captures no graphs; remove captureSizes and maxCaptureSize or choose another policy",
                field_path=".policy",
                holds=lambda g: (
                    g.policy != GraphPolicy.EAGER or (g.capture_sizes is None and g.max_capture_size is None)
                ),
            ),
        ),
        AutoscalingSpec: (
            SpecRule(
                cel=f"{_MIN} <= self.maxReplicas",
                message="minReplicas must be at most maxReplicas; lower minReplicas or raise maxReplicas",
                field_path=".minReplicas",
                holds=lambda a: a.min_replicas <= a.max_replicas,
            ),
            SpecRule(
                cel=f"{_MIN} > 0 || {_STZ}",
                message=(
                    "minReplicas 0 is scale-to-zero; set scaleToZero.enabled true (needs KEDA) "
                    "or set minReplicas to 1 or more"
                ),
                field_path=".minReplicas",
                holds=lambda a: a.min_replicas > 0 or a.scale_to_zero.enabled,
            ),
            SpecRule(
                cel=f"!{_STZ} || !{_HPA}",
                message=(
                    "scaleToZero needs KEDA (an HPA never scales to 0 replicas); set provider keda "
                    "or auto, or turn scaleToZero off"
                ),
                field_path=".provider",
                holds=lambda a: not a.scale_to_zero.enabled or a.provider != AutoscalerProvider.HPA,
            ),
            SpecRule(
                cel=f"!{_CUSTOM} || has(self.query)",
                message="signal custom needs query (the PromQL whose value per replica is held at target); set query",
                field_path=".query",
                holds=lambda a: a.signal != AutoscalingSignal.CUSTOM or a.query is not None,
            ),
            SpecRule(
                cel=f"!has(self.query) || {_CUSTOM}",
                message="query is used only with signal custom; remove query or set signal custom",
                field_path=".query",
                holds=lambda a: a.query is None or a.signal == AutoscalingSignal.CUSTOM,
            ),
            SpecRule(
                cel=f"!{_CUSTOM} || has(self.target)",
                message="signal custom has no default target; set target (the query's value per replica)",
                field_path=".target",
                holds=lambda a: a.signal != AutoscalingSignal.CUSTOM or a.target is not None,
            ),
            SpecRule(
                cel=f"!{_CUSTOM} || !{_HPA}",
                message=(
                    "signal custom is a PromQL query, which only KEDA evaluates; set provider keda "
                    "or auto, or choose a built-in signal"
                ),
                field_path=".provider",
                holds=lambda a: a.signal != AutoscalingSignal.CUSTOM or a.provider != AutoscalerProvider.HPA,
            ),
            SpecRule(
                cel="!has(self.target) || !has(self.signal) || self.signal != 'kvCacheUsage' "
                "|| self.target <= 1.0",
                message="signal kvCacheUsage is a fraction of the KV cache; set target in (0, 1], for example 0.8",
                field_path=".target",
                holds=lambda a: a.target is None or a.signal != AutoscalingSignal.KV_CACHE or a.target <= 1.0,
            ),
        ),
        ScaleToZeroSpec: (
            SpecRule(
                cel="!has(self.enabled) || !self.enabled || has(self.activationQuery)",
                message=(
                    "scale-to-zero needs activationQuery: PromQL that rises while clients want the "
                    "model and no replica runs (for example your gateway's request rate to this "
                    "Service); without it nothing would wake the model; set activationQuery"
                ),
                field_path=".activationQuery",
                holds=lambda z: not z.enabled or z.activation_query is not None,
            ),
        ),
        AdapterPvcSource: (_relative_dir_rule(),),
        PvcSource: (_relative_dir_rule(),),
        AdapterHostPathSource: (
            SpecRule(
                cel="!self.path.matches('/\\\\.\\\\.?(/|$)')",
                message=(
                    "hostPath.path must be normalised: no '.' or '..' segment; write the directory "
                    "itself, for example /data/adapters"
                ),
                field_path=".path",
                holds=lambda h: re.search(r"/\.\.?(/|$)", h.path) is None,
            ),
            _relative_dir_rule(),
        ),
        AdapterHubSource: (REVISION_RULE,),
        AdapterSource: (
            SpecRule(
                cel="(has(self.pvc) ? 1 : 0) + (has(self.hostPath) ? 1 : 0) + (has(self.huggingFace) ? 1 : 0)"
                " + (has(self.modelScope) ? 1 : 0) == 1",
                message="set exactly one adapter source: pvc, hostPath, huggingFace or modelScope",
                field_path="",
                holds=lambda a: sum(
                    v is not None for v in (a.pvc, a.host_path, a.hugging_face, a.model_scope)) == 1,
            ),
        ),
        LoraSpec: (
            SpecRule(
                cel=f"!has(self.maxRank) || self.maxRank in [{', '.join(map(str, LORA_RANKS))}]",
                message=f"maxRank must be a rank vLLM accepts: one of {', '.join(map(str, LORA_RANKS))}",
                field_path=".maxRank",
                holds=lambda lora: lora.max_rank in LORA_RANKS,
            ),
            SpecRule(
                cel="!has(self.maxCpuLoras) || self.maxCpuLoras >= (has(self.maxLoras) ? self.maxLoras : 1)",
                message="maxCpuLoras must be at least maxLoras (vLLM refuses a smaller value); raise maxCpuLoras "
                "or lower maxLoras",
                field_path=".maxCpuLoras",
                holds=lambda lora: lora.max_cpu_loras is None or lora.max_cpu_loras >= lora.max_loras,
            ),
            SpecRule(
                cel="!has(self.enabled) || self.enabled || !has(self.adapters) || size(self.adapters) == 0",
                message="adapters are served only with LoRA enabled; set enabled true or remove the adapters",
                field_path=".adapters",
                holds=lambda lora: lora.enabled or not lora.adapters,
            ),
            SpecRule(
                cel="!has(self.adapters) || self.adapters.all(a, self.adapters.exists_one(b, b.name == a.name))",
                message="adapter names must be unique (clients select an adapter by its name); rename one of them",
                field_path=".adapters",
                holds=lambda lora: len({a.name for a in lora.adapters}) == len(lora.adapters),
            ),
        ),
        AscendLLMDeploymentSpec: (
            *_engine_limit_rules(),
            *_disaggregation_rules(),
            SpecRule(
                cel=f"{_IS_CPU} || {_TP} * {_PP} * {_DP} == {_NODES} * {_PER_REPLICA}",
                message=(
                    "parallelism tensor x pipeline x data must equal nodesPerReplica x npu.perReplica "
                    "(each replica uses exactly its NPUs; perReplica counts the NPUs of one node); "
                    "change parallelism, npu.perReplica or nodesPerReplica"
                ),
                field_path=".npu.perReplica",
                holds=lambda s: s.platform == Platform.CPU
                or _npus(s) == s.nodes_per_replica * s.npu.per_replica,
            ),
            SpecRule(
                cel=f"!{_IS_CPU} || {_NODES} == 1",
                message="platform CPU runs single-node replicas; set nodesPerReplica to 1 (or leave it out)",
                field_path=".nodesPerReplica",
                holds=lambda s: s.platform != Platform.CPU or s.nodes_per_replica == 1,
            ),
            SpecRule(
                cel=f"{_NODES} == 1 || {_BACKEND} != 'mp' || {_DP} % {_NODES} == 0",
                message=(
                    "distributed.backend mp places whole data-parallel ranks on each node, so "
                    "parallelism.data must be a multiple of nodesPerReplica; raise parallelism.data "
                    "(and lower tensor) or set distributed.backend ray"
                ),
                field_path=".parallelism.data",
                holds=lambda s: s.nodes_per_replica == 1
                or s.distributed.backend != DistributedBackend.MP
                or s.parallelism.data % s.nodes_per_replica == 0,
            ),
            SpecRule(
                cel=f"{_NODES} == 1 || {_BACKEND} != 'ray' || {_DP} == 1",
                message=(
                    "distributed.backend ray spreads tensor and pipeline parallel across the nodes; "
                    "set parallelism.data to 1, or use distributed.backend mp for data parallel"
                ),
                field_path=".parallelism.data",
                holds=lambda s: s.nodes_per_replica == 1
                or s.distributed.backend != DistributedBackend.RAY
                or s.parallelism.data == 1,
            ),
            SpecRule(
                # With disaggregation the roles' own rule applies (npu.perReplica is per role).
                cel=f"{_IS_CPU} || {_CHIP} != 'A3' || {_PER_REPLICA} >= 2 || {_HAS_D}",
                message="chip A3 needs at least 2 NPUs per replica (one card has two dies); set npu.perReplica >= 2",
                field_path=".npu.perReplica",
                holds=lambda s: s.platform == Platform.CPU or s.npu.chip != Chip.A3 or s.npu.per_replica >= 2
                or s.disaggregation is not None,
            ),
            SpecRule(
                cel=f"{_IS_CPU} || {_CHIP} != '310P' || !has(self.engine) || !has(self.engine.dtype) "
                "|| self.engine.dtype != 'bfloat16'",
                message="chip 310P has no bfloat16; set engine.dtype to float16 (or leave it out)",
                field_path=".engine.dtype",
                holds=lambda s: (
                    s.platform == Platform.CPU or s.npu.chip != Chip.P310 or s.engine.dtype != Dtype.BFLOAT16
                ),
            ),
            SpecRule(
                cel=f"!{_IS_CPU} || !has(self.npu) || (!has(self.npu.chip) && !has(self.npu.resourceName) "
                "&& !has(self.npu.perReplica))",
                message=(
                    "platform CPU uses no NPUs; remove npu.chip, npu.resourceName and npu.perReplica "
                    "(placement fields such as npu.nodeSelector still apply)"
                ),
                field_path=".npu",
                holds=lambda s: (
                    s.platform != Platform.CPU
                    or not ({"chip", "resource_name", "per_replica"} & s.npu.model_fields_set)
                ),
            ),
            SpecRule(
                cel=f"!{_IS_CPU} || !has(self.ascend)",
                message="ascend options apply to the Ascend platform only; remove spec.ascend or use platform Ascend",
                field_path=".ascend",
                holds=lambda s: s.platform != Platform.CPU or s.ascend is None,
            ),
            SpecRule(
                cel=f"!{_IS_CPU} || {_TP} * {_PP} * {_DP} == 1",
                message="platform CPU runs one engine process per replica; set tensor, pipeline and data parallel to 1",
                field_path=".parallelism",
                holds=lambda s: s.platform != Platform.CPU or _npus(s) == 1,
            ),
            SpecRule(
                cel=f"{_IS_CPU} || !has(self.engine) || !has(self.engine.kvCacheSpaceGiB)",
                message="engine.kvCacheSpaceGiB applies to platform CPU only; on NPUs size the cache with engine.gpuMemoryUtilization",
                field_path=".engine.kvCacheSpaceGiB",
                holds=lambda s: s.platform == Platform.CPU or s.engine.kv_cache_space_gi_b is None,
            ),
            SpecRule(
                cel="!has(self.engine) || !has(self.engine.weightsLoader) || self.engine.weightsLoader != 'fastsafetensors'",
                message=(
                    "engine.weightsLoader fastsafetensors: vLLM's fastsafetensors loader places tensors on CUDA "
                    "devices only (weight_utils.py), not on Ascend NPUs or the CPU; use prefetch, eager, mmap, "
                    "runaiStreamer or auto"
                ),
                field_path=".engine.weightsLoader",
                holds=lambda s: s.engine.weights_loader is not WeightsLoader.FASTSAFETENSORS,
            ),
            SpecRule(
                cel=f"!has(self.parallelism) || !has(self.parallelism.expert) || !self.parallelism.expert "
                f"|| {_TP} * {_DP} > 1",
                message="expert parallel spreads experts over tensor x data NPUs; set parallelism.tensor or data above 1",
                field_path=".parallelism.expert",
                holds=lambda s: not s.parallelism.expert or s.parallelism.tensor * s.parallelism.data > 1,
            ),
            SpecRule(
                cel=f"!has(self.lora) || !has(self.lora.adapters) || self.lora.adapters.all(a, a.name != {_SERVED})",
                message=(
                    "an adapter is named like the base model (model.servedName, else the hub id); clients could "
                    "not select the base model; rename the adapter"
                ),
                field_path=".lora.adapters",
                holds=lambda s: s.lora is None or _served_name(s) not in {a.name for a in s.lora.adapters},
            ),
            SpecRule(
                cel="!has(self.lora) || !has(self.lora.adapters) || !self.lora.adapters.exists(a, "
                "has(a.source.huggingFace) || has(a.source.modelScope)) || (has(self.model.cache) "
                "&& !has(self.model.cache.hostPath))",
                message=(
                    "an adapter with source.huggingFace or source.modelScope is downloaded into the model cache "
                    "by a Job; set spec.model.cache.create or spec.model.cache.claimName (a hostPath cache has no "
                    "Job to fill it), or put the adapter on a pvc"
                ),
                field_path=".lora.adapters",
                holds=lambda s: s.lora is None or not any(a.source.hub() for a in s.lora.adapters) or (
                    s.model.cache is not None and s.model.cache.host_path is None),
            ),
        ),
    }
)


def _claim_class(claim: CacheClaimSpec) -> str:
    return claim.storage_class_name or ""


def _claim_bytes(claim: CacheClaimSpec) -> Decimal:
    return quantity_value(claim.size)


#: A claim's storage class and access modes cannot change once it exists, nor can its size shrink
#: (the API server refuses the claim's update), so such a change is refused on the resource, naming
#: the field. A claim kept from an earlier resource is checked by the operator (handle_modelcache).
TRANSITION_RULES.update(
    {
        CacheClaimSpec: (
            TransitionRule(
                cel="(has(self.storageClassName) ? self.storageClassName : '') == "
                "(has(oldSelf.storageClassName) ? oldSelf.storageClassName : '')",
                message=(
                    "storageClassName of the cache claim cannot change (a claim's class is fixed); keep it, or "
                    "remove spec.model.cache.create, delete the claim <name>-model-cache, then add it back"
                ),
                field_path=".storageClassName",
                holds=lambda old, new: _claim_class(old) == _claim_class(new),
            ),
            TransitionRule(
                cel=f"(has(self.accessMode) ? self.accessMode : '{CacheAccessMode.READ_WRITE_MANY.value}') == "
                f"(has(oldSelf.accessMode) ? oldSelf.accessMode : '{CacheAccessMode.READ_WRITE_MANY.value}')",
                message=(
                    "accessMode of the cache claim cannot change (a claim's access modes are fixed); keep it, or "
                    "remove spec.model.cache.create, delete the claim <name>-model-cache, then add it back"
                ),
                field_path=".accessMode",
                holds=lambda old, new: old.access_mode == new.access_mode,
            ),
            TransitionRule(
                # Kubernetes' CEL quantity library (the server's own parser); the pattern on size
                # admits only quantities, isQuantity keeps an evaluation error from ever refusing.
                cel="!isQuantity(self.size) || !isQuantity(oldSelf.size) || "
                "quantity(self.size).compareTo(quantity(oldSelf.size)) >= 0",
                message=(
                    "size of the cache claim cannot shrink (a claim only grows); keep it or set more, or "
                    "remove spec.model.cache.create, delete the claim <name>-model-cache, then add it back"
                ),
                field_path=".size",
                holds=lambda old, new: _claim_bytes(new) >= _claim_bytes(old),
            ),
        ),
    }
)
