"""The restart budget: backoff per crash, exhaustion, and the reset after a healthy run."""

from __future__ import annotations

from ascend_runtime.config import RestartPolicy
from ascend_runtime.launch import LaunchKind, LaunchResult, RestartBudget
from ascend_runtime.logclass import Outcome


def crash(served_s: float = 0.0) -> LaunchResult:
    return LaunchResult(LaunchKind.CRASH, "boom", Outcome.OTHER_FAILURE, served=served_s > 0, served_s=served_s)


def test_backoff_doubles_up_to_the_cap_and_the_budget_runs_out() -> None:
    budget = RestartBudget(RestartPolicy(max_restarts=4, backoff_initial_s=2, backoff_max_s=5))
    assert [budget.spend(crash()) for _ in range(4)] == [2, 4, 5, 5]
    assert budget.spend(crash()) is None


def test_a_long_healthy_run_starts_the_count_over() -> None:
    budget = RestartBudget(RestartPolicy(max_restarts=2, backoff_initial_s=1, reset_after_s=600))
    assert budget.spend(crash(served_s=10)) == 1
    assert budget.spend(crash(served_s=599)) == 2
    # Sparse crashes over weeks: each after more than resetAfterS of serving counts as the first.
    for _ in range(10):
        assert budget.spend(crash(served_s=600)) == 1
    assert budget.spend(crash(served_s=5)) == 2
    assert budget.spend(crash(served_s=5)) is None


def test_the_metric_label_is_the_failure_outcome_or_the_launch_reason() -> None:
    assert crash().restart_label == "other_failure"
    no_signature = LaunchResult(LaunchKind.CRASH, "x", Outcome.INCOMPLETE, restart_reason="warmup_failed")
    assert no_signature.restart_label == "warmup_failed"


def test_readiness_is_off_while_the_serving_engine_does_not_answer() -> None:
    from ascend_runtime.config import RuntimePhase
    from ascend_runtime.state import StateStore

    store = StateStore()
    store.set_phase(RuntimePhase.READY, "serving")
    assert store.state.ready
    store.set_unanswered("/health answered HTTP 500")
    assert (store.state.phase, store.state.ready) == (RuntimePhase.READY, False)
    store.set_unanswered(None)
    assert store.state.ready
    store.set_unanswered("/health answered HTTP 500")
    store.set_phase(RuntimePhase.LOADING, "relaunching")
    assert store.state.unanswered is None  # it was about the engine that served
