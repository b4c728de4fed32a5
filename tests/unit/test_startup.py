"""ascend_operator.handlers.handle_startup.tune_kopf and ascend_operator.leader (pure parts).

Covered: kopf's own peering is always off (it would pause kopf's watches but not the work
queue); leader election is on unless the settings or ``--standalone`` say the operator runs
alone; the Lease's namespace comes from the setting, then POD_NAMESPACE, else a clear error;
holder identities name the pod and differ between two starts of it.
"""

from __future__ import annotations

import kopf
import pytest
from ascend_operator.handlers.handle_startup import tune_kopf
from ascend_operator.leader import identity, own_namespace
from ascend_operator.settings import OperatorSettings


@pytest.mark.parametrize(("cli_standalone", "setting", "elect"), [
    (False, False, True), (True, False, False), (False, True, False),
])
def test_leader_election_unless_standalone_and_kopf_peering_always_off(
        cli_standalone: bool, setting: bool, elect: bool) -> None:
    settings = kopf.OperatorSettings()
    settings.peering.standalone = cli_standalone  # as kopf.run(standalone=...) sets it
    assert tune_kopf(settings, OperatorSettings(standalone=setting)) is elect
    assert settings.peering.standalone is True


def test_the_lease_namespace_comes_from_the_setting_then_the_pod(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("POD_NAMESPACE", "ops")
    assert own_namespace("explicit") == "explicit"
    assert own_namespace(None) == "ops"
    monkeypatch.delenv("POD_NAMESPACE")
    monkeypatch.setattr("ascend_operator.leader.SERVICE_ACCOUNT_NAMESPACE", "/nonexistent/namespace")
    with pytest.raises(ValueError, match="ASCEND_LLM_OPERATOR_LEASE_NAMESPACE"):
        own_namespace(None)


def test_identities_name_the_pod_and_differ_per_start(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("POD_ID", "ascend-llm-operator-7d9f-abcde")
    first, second = identity(), identity()
    assert first.startswith("ascend-llm-operator-7d9f-abcde_") and first != second


@pytest.mark.parametrize("env", [
    {"ASCEND_LLM_OPERATOR_LEASE_RETRY_PERIOD_S": "0.5"},
    {"ASCEND_LLM_OPERATOR_LEASE_RENEW_DEADLINE_S": "2"},
    {"ASCEND_LLM_OPERATOR_LEASE_DURATION_S": "9"},
])
def test_lease_timings_the_election_would_refuse_stop_the_start_with_their_names(env: dict[str, str]) -> None:
    from ascend_operator.settings import SettingsError, load_settings

    with pytest.raises(SettingsError, match="ASCEND_LLM_OPERATOR_LEASE_"):
        load_settings(env)


def test_idle_kopf_workers_exit_soon_so_a_start_up_listing_does_not_keep_every_body() -> None:
    from ascend_operator.handlers.handle_startup import WORKER_IDLE_S

    settings = kopf.OperatorSettings()
    default = settings.queueing.idle_timeout
    tune_kopf(settings, OperatorSettings())
    assert settings.queueing.idle_timeout == WORKER_IDLE_S < default
    assert settings.watching.chunk_size is not None  # kopf lists in pages, not whole


def test_kopf_builds_no_diff_base_essence_for_the_event_handlers() -> None:
    from ascend_operator.handlers.handle_startup import NoDiffBase

    settings = kopf.OperatorSettings()
    tune_kopf(settings, OperatorSettings())
    storage = settings.persistence.diffbase_storage
    assert isinstance(storage, NoDiffBase)
    body = kopf.Body({"metadata": {"name": "x", "annotations": {"a": "b"}}, "spec": {"big": list(range(100))}})
    assert storage.build(body=body) == {} and storage.fetch(body=body) is None
