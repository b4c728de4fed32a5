"""The builders' shape: no function in ``ascend_operator.builders`` takes more than 6 positional
parameters (what the builders share travels in one :class:`BuildInputs`, by keyword)."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
from collections.abc import Callable, Iterator
from types import ModuleType

import ascend_operator.builders as builders

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
