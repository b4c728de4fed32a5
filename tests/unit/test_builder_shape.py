"""The builders' shape: no function in ``ascend_operator.builders`` takes more than 6 positional
parameters (what the builders share travels in one :class:`BuildInputs`, by keyword), and a
pass's plans are made once."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
from collections.abc import Callable, Iterator
from types import ModuleType
from typing import Any

import ascend_operator.builders as builders
import pytest
from ascend_operator import lora
from ascend_operator.api import parse_spec
from ascend_operator.builders import inputs, modelcache
from ascend_operator.settings import load_settings

MAX_POSITIONAL = 6
_POSITIONAL = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)


def _modules() -> list[ModuleType]:
    names = [info.name for info in pkgutil.walk_packages(builders.__path__, builders.__name__ + ".")]
    return [builders, *(importlib.import_module(name) for name in names)]


def _functions(module: ModuleType) -> Iterator[tuple[str, Callable[..., object]]]:
    """The functions and methods defined in ``module`` (not those it imports)."""
    for name, value in vars(module).items():
        if inspect.isfunction(value) and value.__module__ == module.__name__:
            yield f"{module.__name__}.{name}", value
        elif inspect.isclass(value) and value.__module__ == module.__name__:
            for attr, member in vars(value).items():
                function = member.__func__ if isinstance(member, (classmethod, staticmethod)) else member
                if inspect.isfunction(function):
                    yield f"{module.__name__}.{name}.{attr}", function


def positional(function: Callable[..., object]) -> int:
    """How many positional parameters ``function`` takes (``self`` / ``cls`` included)."""
    return sum(p.kind in _POSITIONAL for p in inspect.signature(function).parameters.values())


def test_the_walk_sees_the_builders() -> None:
    found = {name for module in _modules() for name, _ in _functions(module)}
    assert "ascend_operator.builders.pod.build_pod_template" in found
    assert "ascend_operator.builders.inputs.BuildInputs.make" in found
    assert len(found) > 50


def test_no_builder_takes_more_than_six_positional_parameters() -> None:
    too_many = {name: count for module in _modules() for name, function in _functions(module)
                if (count := positional(function)) > MAX_POSITIONAL}
    assert too_many == {}, f"pass a BuildInputs (or keywords) instead: {too_many}"


def test_the_count_sees_an_eight_parameter_signature() -> None:
    def old_style(name: str, namespace: str, names: object, spec: object, settings: object, config: object,
                  config_hash: str, image: str, *, extra: object = None) -> None:
        return None

    assert positional(old_style) == 8 > MAX_POSITIONAL


def test_a_build_with_the_pass_plans_plans_nothing_again(monkeypatch: pytest.MonkeyPatch) -> None:
    """The reconcile plans the model cache and the hub adapters once (``make_plans``, in its spec
    check) and hands the plans on: neither the LoRA guard nor the build plans again."""
    spec = parse_spec({
        "model": {"huggingFace": {"id": "Qwen/Qwen2.5-0.5B-Instruct"}, "cache": {"create": {"size": "10Gi"}}},
        "platform": "CPU",
        "lora": {"adapters": [{"name": "sql", "source": {"huggingFace": {"id": "org/sql-lora"}}}]},
    })
    settings = load_settings({})
    calls: list[str] = []
    real_cache, real_adapters = modelcache.plan_cache, modelcache.plan_adapter_fetches

    def plan_cache(*args: Any) -> Any:
        calls.append("plan_cache")
        return real_cache(*args)

    def plan_adapter_fetches(*args: Any) -> Any:
        calls.append("plan_adapter_fetches")
        return real_adapters(*args)

    for module in (modelcache, inputs, lora):
        for name, replacement in (("plan_cache", plan_cache), ("plan_adapter_fetches", plan_adapter_fetches)):
            if hasattr(module, name):
                monkeypatch.setattr(module, name, replacement)
    plans = builders.make_plans("demo", spec, settings)
    assert calls == ["plan_cache", "plan_adapter_fetches"]
    lora.enforce_lora("demo", spec, settings, plans.cache_plan)
    children = builders.build_children(builders.BuildMeta("demo", "llm"), spec, settings, plans=plans)
    assert calls == ["plan_cache", "plan_adapter_fetches"]
    assert children.fetch_job is not None and len(children.adapter_fetch_jobs) == 1
    # Without the pass's plans the build makes its own, once.
    builders.build_children(builders.BuildMeta("demo", "llm"), spec, settings)
    assert calls == ["plan_cache", "plan_adapter_fetches"] * 2
