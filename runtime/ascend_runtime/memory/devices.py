"""The pod's own NPUs, from the environment the device plugin and the Ascend runtime set.

``ASCEND_VISIBLE_DEVICES`` (set by the Ascend device plugin, or from its pod annotation) lists
the physical device ids allocated to the container; ``ASCEND_RT_VISIBLE_DEVICES`` (CANN's, like
``CUDA_VISIBLE_DEVICES``) selects among the devices the process sees, by position. With both,
the pod's chips are the positions of the second in the list of the first; with one, that list.
With neither the container is taken to see only its own chips (the Ascend Docker Runtime mounts
nothing else) and nothing is filtered.

Memory sources, DCMI and the preflight count only these chips: on a node shared by several
pods, ``npu-smi`` can list every chip, with every pod's processes.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

__all__ = ["PHYSICAL_ENV", "RUNTIME_ENV", "VisibleDevicesError", "visible_devices"]

PHYSICAL_ENV = "ASCEND_VISIBLE_DEVICES"
RUNTIME_ENV = "ASCEND_RT_VISIBLE_DEVICES"

_ID = re.compile(r"^(?:[A-Za-z][\w]*-)?(\d+)$")  # 3, or Ascend910-3 (the device plugin's names)
_RANGE = re.compile(r"^(\d+)-(\d+)$")  # 0-3 (the Ascend Docker Runtime's form)


class VisibleDevicesError(ValueError):
    """A device list that cannot be read; the message names the variable, the value and the form."""


def _ids(env: Mapping[str, str], name: str) -> list[int] | None:
    raw = env.get(name)
    if raw is None or not raw.strip():
        return None
    ids: list[int] = []
    for part in (piece.strip() for piece in raw.split(",")):
        span = _RANGE.match(part)
        single = _ID.match(part)
        if span and int(span.group(1)) <= int(span.group(2)):
            ids.extend(range(int(span.group(1)), int(span.group(2)) + 1))
        elif single:
            ids.append(int(single.group(1)))
        else:
            raise VisibleDevicesError(
                f"{name}={raw!r}: {part!r} is not a device id; expected comma-separated ids or ranges "
                "such as 0,1 or 0-3 (or the device plugin's Ascend910-0)"
            )
    return ids


def visible_devices(env: Mapping[str, str]) -> frozenset[int] | None:
    """The physical device ids of this pod's chips; None when the environment names none."""

    physical = _ids(env, PHYSICAL_ENV)
    selected = _ids(env, RUNTIME_ENV)
    if physical is None:
        return None if selected is None else frozenset(selected)
    if selected is None:
        return frozenset(physical)
    outside = [index for index in selected if index >= len(physical)]
    if outside:
        raise VisibleDevicesError(
            f"{RUNTIME_ENV}={env[RUNTIME_ENV]!r} selects position {outside[0]}, but {PHYSICAL_ENV}="
            f"{env[PHYSICAL_ENV]!r} gives the container only {len(physical)} device(s); positions start at 0"
        )
    return frozenset(physical[index] for index in selected)
