"""The operator watches its resource again when discovery serves it after kopf gave up
(ascend_operator.rediscovery), through kopf's own registry and rescan; the API server's discovery
is replaced by a function returning what it would serve. tests/cluster/test_install.py shows the
same on a real API server (the CRD deleted and applied again)."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import kopf
import pytest
from kopf._cogs.clients import scanning
from kopf._cogs.structs.references import Resource

import ascend_operator.main  # noqa: F401  (registers the operator's handlers in kopf's registry)
from ascend_operator.api import GROUP, PLURAL, VERSION
from ascend_operator.rediscovery import Rediscovery, new_insights

SERVED = Resource(group=GROUP, version=VERSION, plural=PLURAL, kind="AscendLLMDeployment",
                  namespaced=True, preferred=True, verbs=["list", "watch", "get", "patch"])


def rediscovery(monkeypatch: pytest.MonkeyPatch, served: list[set[Resource]], interval_s: float = 0.01) -> Rediscovery:
    """A Rediscovery whose discovery reads return ``served[-1]``, counting reads in ``served``."""

    reads: list[int] = []

    async def scan(*, groups: Any, settings: Any, logger: Any) -> set[Resource]:
        assert groups == {GROUP}  # only the operator's own group is rescanned
        reads.append(1)
        return served[-1]

    monkeypatch.setattr(scanning, "scan_resources", scan)
    found = Rediscovery(new_insights(), kopf.get_default_registry(), kopf.OperatorSettings(),
                        logging.getLogger("test"), interval_s=interval_s)
    found.reads = reads  # type: ignore[attr-defined]
    return found


async def test_a_rescan_watches_the_resource_once_discovery_serves_it(monkeypatch: pytest.MonkeyPatch) -> None:
    served: list[set[Resource]] = [set()]
    found = rediscovery(monkeypatch, served)
    assert not found.watching()
    assert await found.rescan() is False  # the CRD not served yet: nothing to watch
    served.append({SERVED})
    assert await found.rescan() is True
    assert SERVED in found.insights.watched_resources


async def test_the_loop_rescans_only_while_the_resource_is_not_watched(monkeypatch: pytest.MonkeyPatch) -> None:
    served: list[set[Resource]] = [set()]
    found = rediscovery(monkeypatch, served)
    found.start()
    try:
        while len(found.reads) < 3:  # type: ignore[attr-defined]
            await asyncio.sleep(0.01)
        served.append({SERVED})
        while not found.watching():
            await asyncio.sleep(0.01)
        reads = len(found.reads)  # type: ignore[attr-defined]
        await asyncio.sleep(0.1)  # ten intervals: watched, so no discovery read
        assert len(found.reads) == reads  # type: ignore[attr-defined]
    finally:
        found.stop()


async def test_a_failed_discovery_read_is_retried(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[int] = []

    async def scan(*, groups: Any, settings: Any, logger: Any) -> set[Resource]:
        calls.append(1)
        if len(calls) == 1:
            raise ConnectionError("API server unreachable")
        return {SERVED}

    monkeypatch.setattr(scanning, "scan_resources", scan)
    found = Rediscovery(new_insights(), kopf.get_default_registry(), kopf.OperatorSettings(),
                        logging.getLogger("test"), interval_s=0.01)
    found.start()
    try:
        async with asyncio.timeout(5):
            while not found.watching():
                await asyncio.sleep(0.01)
    finally:
        found.stop()
    assert len(calls) >= 2
