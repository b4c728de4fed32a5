"""ascend_operator.handlers.handle_startup.tune_kopf: kopf settings for HA (peering priority).

Covered: replicas with peering get distinct priorities (kopf pauses every operator when two peers
share one), stable per pod name, from POD_ID before HOSTNAME, random without either; a priority
given on the command line (--priority) is kept; standalone operators are left at kopf's default.
"""

from __future__ import annotations

import kopf
import pytest
from ascend_operator.handlers.handle_startup import (
    KOPF_DEFAULT_PRIORITY,
    PRIORITY_SPACE,
    peering_priority,
    tune_kopf,
)
from ascend_operator.settings import OperatorSettings


def configured(monkeypatch: pytest.MonkeyPatch, *, standalone: bool, pod: str | None,
               priority: int | None = None) -> kopf.OperatorSettings:
    monkeypatch.delenv("HOSTNAME", raising=False)
    if pod is None:
        monkeypatch.delenv("POD_ID", raising=False)
    else:
        monkeypatch.setenv("POD_ID", pod)
    settings = kopf.OperatorSettings()
    if priority is not None:
        settings.peering.priority = priority  # as kopf's --priority sets it before start-up
    tune_kopf(settings, OperatorSettings(standalone=standalone))
    return settings


def test_peering_replicas_get_distinct_stable_priorities(monkeypatch: pytest.MonkeyPatch) -> None:
    first = configured(monkeypatch, standalone=False, pod="ascend-llm-operator-7d9f-abcde").peering.priority
    second = configured(monkeypatch, standalone=False, pod="ascend-llm-operator-7d9f-fghij").peering.priority
    again = configured(monkeypatch, standalone=False, pod="ascend-llm-operator-7d9f-abcde").peering.priority
    assert first != second
    assert first == again
    assert 0 < first <= PRIORITY_SPACE and 0 < second <= PRIORITY_SPACE


def test_pod_id_wins_over_hostname_and_random_without_either() -> None:
    assert peering_priority({"POD_ID": "a", "HOSTNAME": "b"}) == peering_priority({"HOSTNAME": "a"})
    assert peering_priority({"HOSTNAME": "a"}) != peering_priority({"HOSTNAME": "b"})
    drawn = {peering_priority({}) for _ in range(20)}
    assert len(drawn) > 1 and all(0 < value <= PRIORITY_SPACE for value in drawn)


def test_a_command_line_priority_is_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    assert configured(monkeypatch, standalone=False, pod="p-1", priority=100).peering.priority == 100


def test_standalone_leaves_the_default_priority(monkeypatch: pytest.MonkeyPatch) -> None:
    settings = configured(monkeypatch, standalone=True, pod="p-1")
    assert settings.peering.standalone is True
    assert settings.peering.priority == KOPF_DEFAULT_PRIORITY
