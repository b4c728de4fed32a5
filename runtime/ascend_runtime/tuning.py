"""Tuned defaults per model class and vllm-ascend version (the tutorials' settings, on by default).

Before the first launch the runtime reads the model's ``config.json`` (and msModelSlim's
``quant_model_description*.json``), classifies the model (:func:`classify_model`: dense, MoE,
MLA; quantised or not) and applies what vllm-ascend's own tutorials of the installed version
use for that class (:data:`RULES`, each citing its tutorial and tag; ``docs/tuned-defaults.md``
holds the same table, :func:`render_table`). Rules, in order of precedence:

* what the user set wins: ``engine.env``, the container's environment, ``engine.extraArgs``,
  ``ascend.additionalConfig``, ``graph.policy`` other than ``auto``, ``engine.quantization`` and
  the ``distributed.hccl*`` fields;
* a vllm-ascend variable the installed version's ``envs.py`` lacks, an ``additional_config`` key
  it does not read, or ``--async-scheduling`` on a vLLM without it, is never passed;
* only on the Ascend platform, not on 310P (its tutorials are separate), and only when
  ``engine.tunedDefaults`` is true. A version between two cited tags uses the lower tag's
  tutorial; versions before the oldest cited tag (v0.9.1) get none.

:func:`tune` is pure apart from reading the model directory; it returns the config with the
defaults folded in (so the flag renderer needs no change) and a report for ``/state``.
"""

from __future__ import annotations

import enum
import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from packaging.version import Version

from ascend_runtime.config import (
    Chip,
    EngineConfig,
    GraphPolicy,
    TunedDefaultReport,
    TunedDefaultsReport,
)
from ascend_runtime.flags import known_additional_config_keys
from ascend_runtime.versions import Versions, parse_version

__all__ = [
    "ModelClass",
    "ModelProfile",
    "RULES",
    "Scenario",
    "TuneResult",
    "classify_model",
    "render_table",
    "tune",
]

#: The file vllm-ascend reads for msModelSlim weights (quantization/modelslim_config.py, v0.23.0;
#: quant_config.py ``get_config_filenames``, v0.9.1 and v0.13.0).
MODELSLIM_DESCRIPTION = "quant_model_description.json"
#: Estimated total parameters from which a MoE counts as "large": between the two MoE tutorials'
#: models, Qwen3-30B-A3B (30.5B) and Qwen3-235B-A22B (235B). A decision, not a documented value.
LARGE_MOE_PARAMS_B = 100.0
#: Keys naming the routed-expert count, by model family (Qwen-MoE, DeepSeek/GLM, Mixtral, ERNIE).
EXPERT_KEYS = ("num_experts", "n_routed_experts", "num_local_experts", "moe_num_experts")
#: The oldest tag whose tutorials the table cites.
OLDEST_CITED = Version("0.9.1")
#: vLLM from which --async-scheduling is recommended (vllm-ascend release_notes.md, v0.12.0rc1:
#: "Async scheduler is more stable and ready to enable now. Please set --async-scheduling").
VLLM_ASYNC_SCHEDULING = Version("0.12.0")


class ModelClass(str, enum.Enum):
    DENSE = "dense"
    MOE = "MoE"
    MLA = "MLA"


class Scenario(str, enum.Enum):
    """Which tutorial a model and layout map to."""

    DENSE_SINGLE = "dense, 1 NPU"
    DENSE_TP = "dense, TP>1"
    MOE_SMALL = "small MoE"
    MOE_LARGE = "large MoE"
    MLA = "MLA"


class Kind(str, enum.Enum):
    ENV = "env"
    FLAG = "flag"
    GRAPH = "graphMode"
    ADDITIONAL = "additionalConfig"
    QUANTIZATION = "quantization"


class Need(str, enum.Enum):
    """Extra conditions a rule's tutorial states."""

    TP = "tensor parallel > 1"
    ASCEND_QUANT = "msModelSlim weights"
    A3 = "A3"
    A3_W8A8_EP = "A3, W8A8, expert parallel <= 32"
    ASYNC_SAFE = "no pipeline parallel, no Ray executor"


#: vllm-ascend variables by the first tag whose ``vllm_ascend/envs.py`` has them and the first
#: that no longer does (``git show TAG:vllm_ascend/envs.py`` over every tag v0.9.0rc1..v0.25.1rc1).
VLLM_ASCEND_ENVS: dict[str, tuple[Version, Version | None]] = {
    "VLLM_ASCEND_ENABLE_PREFETCH_MLP": (Version("0.10.2rc1"), Version("0.18.0rc1")),
    "VLLM_ASCEND_ENABLE_FLASHCOMM1": (Version("0.11.0rc1"), None),
    "VLLM_ASCEND_ENABLE_MLAPO": (Version("0.11.0rc0"), None),
    "VLLM_ASCEND_ENABLE_FUSED_MC2": (Version("0.13.0rc1"), None),
    "VLLM_ASCEND_BALANCE_SCHEDULING": (Version("0.13.0rc1"), None),
}


@dataclass(frozen=True)
class Rule:
    kind: Kind
    name: str
    value: Any
    scenarios: frozenset[Scenario]
    since: Version
    until: Version | None
    source: str
    need: Need | None = None

    @property
    def shown(self) -> str:
        value = json.dumps(self.value, separators=(",", ":")) if isinstance(self.value, (dict, bool)) else self.value
        if self.kind is Kind.FLAG:
            return self.name
        if self.kind is Kind.GRAPH:
            return f"cudagraph_mode={value}"
        if self.kind is Kind.QUANTIZATION:
            return f"--quantization {value}"
        if self.kind is Kind.ADDITIONAL:
            return f"additional_config.{self.name}={value}"
        return f"{self.name}={value}"

    def cites(self) -> str:
        return f"{self.source}@v{self.since}"


_S = Scenario
_ALL = frozenset(Scenario)
_MOE = frozenset({_S.MOE_SMALL, _S.MOE_LARGE})
_T = "docs/source/tutorials/"
_V091, _V0110, _V0130, _V0180, _V0230 = (Version(v) for v in ("0.9.1", "0.11.0", "0.13.0", "0.18.0", "0.23.0"))


def _rules() -> tuple[Rule, ...]:
    rules: list[Rule] = []

    def add(kind: Kind, name: str, value: Any, scenarios, since: Version, until: Version | None,
            source: str, need: Need | None = None) -> None:
        if kind is Kind.FLAG:
            need = Need.ASYNC_SAFE
        rules.append(Rule(kind, name, value, frozenset(scenarios), since, until, _T + source, need))

    env, flag, graph, extra = Kind.ENV, Kind.FLAG, Kind.GRAPH, Kind.ADDITIONAL
    split, expandable = "max_split_size_mb:256", "expandable_segments:True"
    # msModelSlim weights: every cited tag's quantisation tutorial passes --quantization ascend.
    for since, until, source in (
        (_V091, _V0130, "multi_npu_quantization.md"),
        (_V0130, _V0180, "Qwen3-8B-W4A8.md"),
        (_V0180, _V0230, "models/Qwen3-8B-W4A8.md"),
        (_V0230, None, "models/Qwen3-Dense.md"),
    ):
        add(Kind.QUANTIZATION, "--quantization", "ascend", _ALL, since, until, source, Need.ASCEND_QUANT)

    # v0.9.1 and v0.11.0: the single/multi-NPU tutorials and DeepSeek's multi_node.md.
    for since, until in ((_V091, _V0110), (_V0110, _V0130)):
        add(env, "PYTORCH_NPU_ALLOC_CONF", split, {_S.DENSE_SINGLE}, since, until, "single_npu.md")
        add(env, "PYTORCH_NPU_ALLOC_CONF", split, {_S.DENSE_TP}, since, until, "multi_npu.md")
        add(env, "PYTORCH_NPU_ALLOC_CONF", split, _MOE, since, until, "multi_npu_qwen3_moe.md")
        add(env, "OMP_PROC_BIND", "false", {_S.MLA}, since, until, "multi_node.md")
        add(env, "OMP_NUM_THREADS", "100" if since == _V091 else "10", {_S.MLA}, since, until, "multi_node.md")
        add(env, "HCCL_BUFFSIZE", "1024", {_S.MLA}, since, until, "multi_node.md")
        add(extra, "ascend_scheduler_config", {"enabled": True}, {_S.MLA}, since, until, "multi_node.md")
        add(extra, "torchair_graph_config", {"enabled": True}, {_S.MLA}, since, until, "multi_node.md")

    # v0.13.0 (flat tutorials/), v0.18.0 and v0.23.0 (tutorials/models/).
    for since, until, prefix in ((_V0130, _V0180, ""), (_V0180, _V0230, "models/"), (_V0230, None, "models/")):
        dense, small, large, mla = (prefix + f"{name}.md" for name in (
            "Qwen3-Dense", "Qwen3-30B-A3B", "Qwen3-235B-A22B", "DeepSeek-V3.1"))
        # Dense, TP>1 (Qwen3-32B W8A8 TP4).
        if since == _V0230:
            add(env, "PYTORCH_NPU_ALLOC_CONF", expandable, {_S.DENSE_TP}, since, until, dense)
        add(env, "TASK_QUEUE_ENABLE", "1", {_S.DENSE_TP}, since, until, dense)
        add(env, "HCCL_OP_EXPANSION_MODE", "AIV", {_S.DENSE_TP}, since, until, dense)
        if since == _V0130:
            add(env, "VLLM_ASCEND_ENABLE_PREFETCH_MLP", "1", {_S.DENSE_TP}, since, until, dense)
        if since == _V0180:
            add(extra, "weight_prefetch_config", {"enabled": True}, {_S.DENSE_TP}, since, until, dense)
        if since == _V0230:
            add(extra, "enable_flashcomm1", True, {_S.DENSE_TP}, since, until, dense, Need.TP)
        else:
            add(env, "VLLM_ASCEND_ENABLE_FLASHCOMM1", "1", {_S.DENSE_TP}, since, until, dense, Need.TP)
        add(flag, "--async-scheduling", True, {_S.DENSE_TP}, since, until, dense)
        add(graph, "cudagraph_mode", "FULL_DECODE_ONLY", {_S.DENSE_TP}, since, until, dense)
        # Small MoE (Qwen3-30B-A3B).
        if since == _V0230:
            add(env, "HCCL_OP_EXPANSION_MODE", "AIV", {_S.MOE_SMALL}, since, until, small, Need.A3)
            add(env, "HCCL_BUFFSIZE", "1024", {_S.MOE_SMALL}, since, until, small)
            add(env, "OMP_PROC_BIND", "false", {_S.MOE_SMALL}, since, until, small)
            add(env, "OMP_NUM_THREADS", "1", {_S.MOE_SMALL}, since, until, small)
            add(env, "PYTORCH_NPU_ALLOC_CONF", expandable, {_S.MOE_SMALL}, since, until, small)
            add(flag, "--async-scheduling", True, {_S.MOE_SMALL}, since, until, small)
            add(graph, "cudagraph_mode", "FULL_DECODE_ONLY", {_S.MOE_SMALL}, since, until, small)
            add(extra, "enable_flashcomm1", True, {_S.MOE_SMALL}, since, until, small, Need.TP)
        else:
            add(env, "PYTORCH_NPU_ALLOC_CONF", split, {_S.MOE_SMALL}, since, until, small)
        # Large MoE (Qwen3-235B-A22B, single node).
        add(env, "PYTORCH_NPU_ALLOC_CONF", expandable, {_S.MOE_LARGE}, since, until, large)
        add(env, "HCCL_BUFFSIZE", "512", {_S.MOE_LARGE}, since, until, large)
        add(env, "OMP_PROC_BIND", "false", {_S.MOE_LARGE}, since, until, large)
        add(env, "OMP_NUM_THREADS", "1", {_S.MOE_LARGE}, since, until, large)
        add(env, "TASK_QUEUE_ENABLE", "1", {_S.MOE_LARGE}, since, until, large)
        if since == _V0230:
            add(extra, "enable_flashcomm1", True, {_S.MOE_LARGE}, since, until, large, Need.TP)
        else:
            add(env, "VLLM_ASCEND_ENABLE_FLASHCOMM1", "1", {_S.MOE_LARGE}, since, until, large, Need.TP)
            # The "Single Node A3" scripts of v0.13.0 and v0.18.0.
            add(env, "HCCL_OP_EXPANSION_MODE", "AIV", {_S.MOE_LARGE}, since, until, large, Need.A3)
        if since == _V0130:
            add(env, "VLLM_ASCEND_ENABLE_FUSED_MC2", "1", {_S.MOE_LARGE}, since, until, large, Need.A3_W8A8_EP)
        add(flag, "--async-scheduling", True, {_S.MOE_LARGE}, since, until, large)
        add(graph, "cudagraph_mode", "FULL_DECODE_ONLY", {_S.MOE_LARGE}, since, until, large)
        # MLA (DeepSeek-V3.1, single node; v0.23.0: the A3 tab).
        add(env, "HCCL_OP_EXPANSION_MODE", "AIV", {_S.MLA}, since, until, mla)
        add(env, "VLLM_ASCEND_BALANCE_SCHEDULING", "1", {_S.MLA}, since, until, mla)
        add(env, "PYTORCH_NPU_ALLOC_CONF", expandable, {_S.MLA}, since, until, mla)
        if since == _V0130:
            # Default 0 in v0.13.0's envs.py, 1 from v0.18.0 (its tutorials stop setting it).
            add(env, "VLLM_ASCEND_ENABLE_MLAPO", "1", {_S.MLA}, since, until, mla, Need.ASCEND_QUANT)
        if since != _V0230:  # v0.23.0's A3 tab leaves it out (only its 950DT tab passes it)
            add(flag, "--async-scheduling", True, {_S.MLA}, since, until, mla)
        add(graph, "cudagraph_mode", "FULL_DECODE_ONLY", {_S.MLA}, since, until, mla)
    return tuple(rules)


RULES: tuple[Rule, ...] = _rules()


# --------------------------------------------------------------------------------------------
# Classification
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ModelProfile:
    model_class: ModelClass
    experts: int | None = None
    params_b: float | None = None
    quantization: str | None = None
    ascend_quant_type: str | None = None
    ascend_description: bool = False
    notes: tuple[str, ...] = ()

    def describe(self) -> str:
        parts = [self.model_class.value]
        if self.experts:
            parts.append(f"{self.experts} experts")
        if self.params_b is not None and self.model_class is ModelClass.MOE:
            parts.append(f"~{self.params_b:.0f}B parameters")
        if self.quantization:
            parts.append(f"quantised ({self.quantization})")
        return ", ".join(parts)


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _estimate_params_b(cfg: Mapping[str, Any], experts: int | None) -> float | None:
    """Total parameters in billions from the shapes in config.json (embeddings, attention, MLP)."""
    h, layers, vocab = (_int(cfg.get(k)) for k in ("hidden_size", "num_hidden_layers", "vocab_size"))
    heads = _int(cfg.get("num_attention_heads"))
    if not (h and layers and vocab and heads):
        return None
    kv = _int(cfg.get("num_key_value_heads")) or heads
    head_dim = _int(cfg.get("head_dim")) or h // heads
    attention = 2 * h * heads * head_dim + 2 * h * kv * head_dim
    dense_i = _int(cfg.get("intermediate_size")) or 0
    total = layers * attention + 2 * vocab * h
    if experts:
        moe_i = _int(cfg.get("moe_intermediate_size")) or dense_i
        dense_layers = min(_int(cfg.get("first_k_dense_replace")) or 0, layers)
        shared = _int(cfg.get("n_shared_experts")) or 0
        total += (layers - dense_layers) * (experts + shared) * 3 * h * moe_i + dense_layers * 3 * h * dense_i
    else:
        total += layers * 3 * h * dense_i
    return total / 1e9


def classify_model(model_dir: str | Path) -> ModelProfile:
    """The class of the model in ``model_dir`` from its config.json; ValueError when unreadable."""
    directory = Path(model_dir)
    path = directory / "config.json"
    try:
        cfg = json.loads(path.read_text(encoding="utf-8"))
    except OSError as error:
        raise ValueError(f"{path}: cannot read the model's config.json ({error.strerror})") from None
    except json.JSONDecodeError as error:
        raise ValueError(f"{path}: not valid JSON ({error})") from None
    if not isinstance(cfg, dict):
        raise ValueError(f"{path}: expected a JSON object")
    text = cfg.get("text_config")
    if isinstance(text, dict):  # multimodal wrappers keep the language model's shape here
        cfg = {**text, **{k: v for k, v in cfg.items() if k not in text}}
    experts = next((n for n in (_int(cfg.get(k)) for k in EXPERT_KEYS) if n), None)
    experts = experts if experts and experts > 1 else None
    mla = cfg.get("kv_lora_rank") is not None
    model_class = ModelClass.MLA if mla else ModelClass.MOE if experts else ModelClass.DENSE
    notes: list[str] = []
    quantization = None
    qcfg = cfg.get("quantization_config")
    if isinstance(qcfg, dict):
        quantization = f"quantization_config {qcfg.get('quant_method', 'unknown')}"
    descriptions = sorted(directory.glob("quant_model_description*.json"))
    exact = directory / MODELSLIM_DESCRIPTION
    quant_type = None
    if descriptions:
        chosen = exact if exact in descriptions else descriptions[0]
        try:
            description = json.loads(chosen.read_text(encoding="utf-8"))
            quant_type = description.get("model_quant_type") if isinstance(description, dict) else None
        except (OSError, json.JSONDecodeError):
            notes.append(f"{chosen.name} is not readable JSON")
        quantization = f"msModelSlim {quant_type or 'unknown type'}"
        if exact not in descriptions:
            notes.append(
                f"{descriptions[0].name} found but vllm-ascend reads {MODELSLIM_DESCRIPTION}; rename it "
                "(--quantization ascend is not passed)"
            )
    return ModelProfile(
        model_class=model_class,
        experts=experts,
        params_b=_estimate_params_b(cfg, experts),
        quantization=quantization,
        ascend_quant_type=quant_type if isinstance(quant_type, str) else None,
        ascend_description=exact in descriptions,
        notes=tuple(notes),
    )


def scenario_of(profile: ModelProfile, config: EngineConfig) -> Scenario:
    if profile.model_class is ModelClass.MLA:
        return Scenario.MLA
    if profile.model_class is ModelClass.MOE:
        large = profile.params_b is not None and profile.params_b >= LARGE_MOE_PARAMS_B
        return Scenario.MOE_LARGE if large else Scenario.MOE_SMALL
    return Scenario.DENSE_TP if config.engine.parallel.tensor > 1 else Scenario.DENSE_SINGLE


# --------------------------------------------------------------------------------------------
# Applying
# --------------------------------------------------------------------------------------------


@dataclass
class TuneResult:
    config: EngineConfig
    report: TunedDefaultsReport
    profile: ModelProfile | None = None


def _flag_given(extra_args: list[str], names: tuple[str, ...]) -> bool:
    return any(arg.split("=", 1)[0].replace("_", "-") in names for arg in extra_args)


def _chip(config: EngineConfig, versions: Versions) -> Chip | None:
    if config.ascend.chip is not None:
        return config.ascend.chip
    name = (versions.chip_name or "").upper()
    if name.startswith("310P"):
        return Chip.P310
    if name.startswith("910B"):
        return Chip.A2_910B
    if name.startswith(("910C", "A3")):  # A3 is the 910C (reference facts, npu-smi section)
        return Chip.A3
    return None


def _applicable(rule: Rule, version: Version, scenario: Scenario) -> bool:
    return scenario in rule.scenarios and rule.since <= version and (rule.until is None or version < rule.until)


def _need_unmet(need: Need | None, profile: ModelProfile, config: EngineConfig, chip: Chip | None) -> str | None:
    parallel = config.engine.parallel
    if need is Need.ASYNC_SAFE:
        # The tutorials pass it without pipeline parallel and with the mp executor; vLLM refuses an
        # explicit --async-scheduling on an executor without support (vllm/config/vllm.py, v0.32.0)
        # and versions before disabled it with pipeline parallel.
        if parallel.pipeline > 1:
            return "the tutorials use it without pipeline parallel"
        if config.distributed.nodes > 1 and config.distributed.backend == "ray":
            return "the tutorials use it with the mp executor, not Ray"
        return None
    if need is None:
        return None
    if need is Need.TP and parallel.tensor <= 1:
        return "the tutorial uses it with tensor parallel > 1"
    if need is Need.ASCEND_QUANT and not profile.ascend_description:
        return f"the tutorial uses it for msModelSlim weights ({MODELSLIM_DESCRIPTION})"
    if need in (Need.A3, Need.A3_W8A8_EP) and chip is not Chip.A3:
        return "the tutorial uses it on A3 only (set ascend.chip: A3)"
    if need is Need.A3_W8A8_EP:
        ep = parallel.tensor * parallel.data
        if not (profile.ascend_quant_type or "").upper().startswith("W8A8"):
            return "vllm-ascend's envs.py: fused MC2 needs W8A8 weights"
        if not parallel.expert or ep > 32:
            return f"vllm-ascend's envs.py: fused MC2 needs expert parallel <= 32 (here {ep if parallel.expert else 'off'})"
    return None


def _user_setting(rule: Rule, config: EngineConfig, base_env: Mapping[str, str]) -> str | None:
    engine = config.engine
    if rule.kind is Kind.ENV:
        if rule.name in engine.env:
            return f"engine.env sets {rule.name}={engine.env[rule.name]}"
        if rule.name in base_env:
            return f"the container's environment sets {rule.name}={base_env[rule.name]}"
        explicit = {"HCCL_BUFFSIZE": ("distributed.hcclBuffsizeMb", config.distributed.hccl_buffsize_mb),
                    "HCCL_OP_EXPANSION_MODE": ("distributed.hcclOpExpansionMode",
                                               config.distributed.hccl_op_expansion_mode)}.get(rule.name)
        if explicit is not None and explicit[1] is not None:
            return f"{explicit[0]} is set ({explicit[1]})"
        if rule.name == "VLLM_ASCEND_ENABLE_FLASHCOMM1" and "enable_flashcomm1" in config.ascend.additional_config:
            return "ascend.additionalConfig sets enable_flashcomm1"
    elif rule.kind is Kind.FLAG:
        if _flag_given(engine.extra_args, ("--async-scheduling", "--no-async-scheduling")):
            return "engine.extraArgs sets --[no-]async-scheduling"
    elif rule.kind is Kind.GRAPH:
        if config.graph.policy is not GraphPolicy.AUTO:
            return f"graph.policy is {config.graph.policy.value}"
    elif rule.kind is Kind.ADDITIONAL:
        if rule.name in config.ascend.additional_config:
            return f"ascend.additionalConfig sets {rule.name}"
        if rule.name == "enable_flashcomm1":
            for source in (engine.env, base_env):
                if "VLLM_ASCEND_ENABLE_FLASHCOMM1" in source:
                    return "VLLM_ASCEND_ENABLE_FLASHCOMM1 is set in the environment"
    elif rule.kind is Kind.QUANTIZATION:
        if engine.quantization:
            return f"engine.quantization is {engine.quantization}"
        if _flag_given(engine.extra_args, ("--quantization", "-q")):
            return "engine.extraArgs sets --quantization"
    return None


def _unknown_to_version(rule: Rule, version: Version, label: str, vllm: Version | None) -> str | None:
    if rule.kind is Kind.ENV and rule.name in VLLM_ASCEND_ENVS:
        first, gone = VLLM_ASCEND_ENVS[rule.name]
        if version < first or (gone is not None and version >= gone):
            return f"vllm-ascend {label}'s envs.py has no {rule.name}"
    if rule.kind is Kind.ADDITIONAL:
        if rule.name not in known_additional_config_keys(str(version)):
            return f"vllm-ascend {label} does not read additional_config.{rule.name}"
    if rule.kind is Kind.FLAG and vllm is not None and vllm < VLLM_ASYNC_SCHEDULING:
        return f"vLLM {vllm} predates {rule.name} (vllm-ascend release notes v0.12.0rc1)"
    if rule.kind is Kind.GRAPH and version < Version("0.12.0rc1"):
        return f"vllm-ascend {label} has no cudagraph_mode (TorchAir era)"
    return None


def tuning_off(config: EngineConfig, versions: Versions) -> str | None:
    """Why no tuned default can apply whatever the model is (switched off, not Ascend, an unknown
    version, 310P), else None: then :func:`tune` needs the model's config.json."""
    if config.engine.tuned_defaults is False:  # None (not rendered) means on
        return "engine.tunedDefaults is false"
    if versions.platform != "ascend":
        return f"platform {versions.platform}: the tuned defaults are vllm-ascend's (none applies here)"
    if parse_version(versions.vllm_ascend) is None:
        return f"vllm-ascend version {versions.vllm_ascend!r} unknown"
    if _chip(config, versions) is Chip.P310:
        return "310P: its tutorials are separate; no tuned defaults"
    return None


def tune(
    config: EngineConfig,
    versions: Versions,
    base_env: Mapping[str, str] | None = None,
    *,
    model_dir: str | Path | None = None,
) -> TuneResult:
    """``config`` with the tuned defaults for its model folded in, and what was applied and why."""
    base_env = base_env or {}
    report = TunedDefaultsReport(enabled=config.engine.tuned_defaults is not False)
    off = tuning_off(config, versions)
    if off is not None:
        report.reason = off
        return TuneResult(config, report)
    version = parse_version(versions.vllm_ascend)
    assert version is not None
    chip = _chip(config, versions)
    try:
        profile = classify_model(model_dir if model_dir is not None else config.model.path)
    except ValueError as error:
        report.reason = f"{error}; no tuned defaults"
        return TuneResult(config, report)
    scenario = scenario_of(profile, config)
    label = versions.vllm_ascend or str(version)
    report.model_class = profile.model_class.value
    report.scenario = scenario.value
    report.summary = f"{profile.describe()}, vllm-ascend {label}" + (f", chip {chip.value}" if chip else "")
    report.notes = list(profile.notes)
    if version < OLDEST_CITED:
        report.reason = f"vllm-ascend {label} predates the oldest cited tutorials (v{OLDEST_CITED})"
        return TuneResult(config, report, profile)
    vllm = parse_version(versions.vllm) or Version(".".join(map(str, version.release[:3])))

    updated = config.model_copy(deep=True)
    engine, ascend = updated.engine, updated.ascend
    new_env: dict[str, str] = {}
    for rule in RULES:
        if not _applicable(rule, version, scenario):
            continue
        entry = TunedDefaultReport(kind=rule.kind.value, setting=rule.shown, source=rule.cites())
        why_not = (
            _need_unmet(rule.need, profile, config, chip)
            or _user_setting(rule, config, base_env)
            or _unknown_to_version(rule, version, label, vllm)
        )
        if why_not is not None:
            entry.skipped = why_not
            report.skipped.append(entry)
            continue
        if rule.kind is Kind.ENV:
            new_env[rule.name] = str(rule.value)
        elif rule.kind is Kind.FLAG:
            engine.extra_args = [*engine.extra_args, rule.name]
        elif rule.kind is Kind.GRAPH:
            updated.graph.policy = GraphPolicy(str(rule.value).lower())
        elif rule.kind is Kind.ADDITIONAL:
            ascend.additional_config = {**ascend.additional_config, rule.name: rule.value}
        elif rule.kind is Kind.QUANTIZATION:
            engine.quantization = str(rule.value)
        report.applied.append(entry)
    # The tuned values go first so that nothing the user set can be replaced (checked above too).
    engine.env = {**new_env, **engine.env}
    return TuneResult(updated, report, profile)


def describe_report(report: TunedDefaultsReport) -> list[str]:
    """One line per default, e.g. ``MoE, 128 experts, vllm-ascend 0.13.0: HCCL_BUFFSIZE=512 from <doc>``."""
    if report.reason and not report.applied and not report.skipped:
        return [f"tuned defaults: none ({report.reason})"]
    head = report.summary or ""
    lines = [f"{head}: {item.setting} from {item.source}" for item in report.applied]
    lines += [f"{head}: {item.setting} not applied: {item.skipped}" for item in report.skipped]
    lines += [f"{head}: note: {note}" for note in report.notes]
    return lines


def render_table() -> str:
    """The Markdown table of :data:`RULES` (``docs/tuned-defaults.md`` carries it verbatim)."""
    lines = [
        "| vllm-ascend | class | setting | condition | source (vllm-ascend repo, file@tag) |",
        "|---|---|---|---|---|",
    ]
    order = list(Scenario)
    for rule in sorted(RULES, key=lambda r: (r.since, min(order.index(s) for s in r.scenarios))):
        versions = f">= {rule.since}" + (f", < {rule.until}" if rule.until else "")
        classes = ", ".join(s.value for s in order if s in rule.scenarios)
        if rule.scenarios == _ALL:
            classes = "any"
        lines.append(
            f"| {versions} | {classes} | `{rule.shown}` | {rule.need.value if rule.need else ''} | "
            f"`{rule.cites()}` |"
        )
    return "\n".join(lines) + "\n"
