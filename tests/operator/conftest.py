"""Fixtures for the operator tier: the emulated API server and the real kopf operator against it.

- ``emulator``: :class:`k8s_emulator.RealisticEmulator` (kmock-based) serving HTTP on a random
  port, with the ``AscendLLMDeployment`` kind registered (verbs, status and scale subresources)
  and the test namespaces created. A test fails at teardown if the emulator could not serve a request.
- ``operator``: the real operator (see ``operator_harness.OperatorRun``) against it, with a short
  resync interval.
"""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator
from pathlib import Path

import kmock
import pytest

sys.path.insert(0, str(Path(__file__).parent))

from ascend_operator.api import API_VERSION, KIND, PLURAL, SHORT_NAMES, SINGULAR
from ascend_operator.settings import OperatorSettings
from k8s_emulator import RealisticEmulator
from operator_harness import NAMESPACE, OperatorRun, make_settings


@pytest.fixture
async def emulator() -> AsyncIterator[RealisticEmulator]:
    async with RealisticEmulator() as emu, kmock.Server(emu):
        emu.resources[f"{API_VERSION}/{PLURAL}"] = kmock.ResourceInfo(
            kind=KIND, singular=SINGULAR, namespaced=True, shortnames=set(SHORT_NAMES),
            verbs={"get", "list", "watch", "create", "update", "patch", "delete", "deletecollection"},
            subresources={"status", "scale"},
        )
        for namespace in ("default", "kube-system", NAMESPACE):
            emu.put_object("v1", "namespaces", {"metadata": {"name": namespace}})
        yield emu
    assert not emu.failures, "the emulator could not serve:\n" + "\n".join(emu.failures)


@pytest.fixture
def operator_settings(emulator: RealisticEmulator) -> OperatorSettings:
    return make_settings(str(emulator.url).rstrip("/"))


@pytest.fixture
async def operator(emulator: RealisticEmulator, operator_settings: OperatorSettings) -> AsyncIterator[OperatorRun]:
    run = OperatorRun(str(emulator.url).rstrip("/"), operator_settings)
    await run.start()
    try:
        yield run
    finally:
        await run.stop()


