"""Preflight: are the pod's devices there, free of leftover processes, with enough free memory?

Run before every first launch. A failed check is a *waiting* state with the reason (the pod
shows WaitingForNPU), retried until ``runtime.readyTimeoutS``: a previous container's engine
that still holds HBM usually goes away by itself within seconds to minutes.

:func:`assess_npu_report` is pure and tested on the real ``npu-smi info`` samples; the
check functions run the tools. Only the pod's chips count (``devices``, from
``ASCEND_VISIBLE_DEVICES`` / ``ASCEND_RT_VISIBLE_DEVICES``): on a node shared by several pods,
``npu-smi`` lists the neighbours' chips and processes too, and they are no leftovers of this pod.
"""

from __future__ import annotations

import asyncio
import shutil
from typing import Any, Callable

import psutil

from ascend_runtime.memory.npusmi import NpuSmiParseError, parse_npu_smi

#: Seconds `npu-smi info` may take (it can be slow on a busy 16-chip A3 node).
NPU_SMI_TIMEOUT_S = 30.0


def assess_npu_report(report: dict[str, Any], min_free_mb: int) -> tuple[bool, str | None]:
    """Decide from parsed ``npu-smi info`` (the ``doctor npu-smi`` JSON shape)."""

    chips = report.get("chips") or []
    if not chips:
        return False, "npu-smi lists no NPU chips in this container (check the device plugin allocation)"
    processes = report.get("processes") or []
    if processes:
        holders = ", ".join(
            f"pid {p['pid']} ({p.get('name') or 'unnamed'}) {p['memory_mb']} MB on NPU {p['npu']} chip {p['chip']}"
            for p in processes[:4]
        )
        more = f" and {len(processes) - 4} more" if len(processes) > 4 else ""
        return False, f"device memory is held by leftover processes: {holders}{more}"
    short = [
        c for c in chips
        if c.get("hbm_total_mb") is not None and c.get("hbm_used_mb") is not None
        and c["hbm_total_mb"] - c["hbm_used_mb"] < min_free_mb
    ]
    if short:
        c = short[0]
        free = c["hbm_total_mb"] - c["hbm_used_mb"]
        return False, (f"NPU {c['npu']} chip {c['chip']} has {free} MB free, less than "
                       f"runtime.minFreeDeviceMb ({min_free_mb} MB)")
    return True, None


def make_preflight(platform: str, min_free_mb: int,
                   which: Callable[[str], str | None] = shutil.which,
                   devices: frozenset[int] | None = None) -> Callable[[], Any]:
    """The async check the supervisor calls, for the detected platform and the pod's devices."""

    async def ascend() -> tuple[bool, str | None]:
        tool = which("npu-smi")
        if tool is None:
            return False, "npu-smi is not available in the container (mount it, or use the Ascend Docker Runtime)"
        try:
            process = await asyncio.create_subprocess_exec(
                tool, "info", stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT
            )
        except OSError as error:
            return False, f"npu-smi info failed: {error}"
        try:
            out, _ = await asyncio.wait_for(process.communicate(), timeout=NPU_SMI_TIMEOUT_S)
        except asyncio.TimeoutError:
            process.kill()  # a hung npu-smi must not pile up on every retry
            await process.wait()
            return False, f"npu-smi info did not answer within {NPU_SMI_TIMEOUT_S:.0f} s"
        try:
            parsed = parse_npu_smi(out.decode("utf-8", errors="replace"))
        except NpuSmiParseError as error:
            return False, f"npu-smi info output not understood: {error}"
        own = parsed.restricted_to(devices)
        if devices is not None and not own.chips:
            return False, (f"npu-smi lists none of this pod's devices {sorted(devices)} (from "
                           f"ASCEND_VISIBLE_DEVICES / ASCEND_RT_VISIBLE_DEVICES); it shows device ids "
                           f"{sorted(set(parsed.device_ids().values()))}")
        return assess_npu_report(own.to_json(), min_free_mb)

    async def host() -> tuple[bool, str | None]:
        available_mb = psutil.virtual_memory().available // (1024 * 1024)
        if available_mb < min_free_mb:
            return False, f"{available_mb} MB of host memory available, less than runtime.minFreeDeviceMb"
        return True, None

    return ascend if platform == "ascend" else host
