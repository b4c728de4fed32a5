"""What lets a pass skip work: the spec checked once per generation (ascend_operator.specmemo), the
inputs of a pass that wrote nothing (ascend_operator.lastpass) and the retry of unreadable runtimes
(ascend_operator.podreads.Unreadable).

Covered: the memo checks a spec again for a new generation, uid or settings object and not
otherwise, remembers a refusal (raised afresh each time), and keeps nothing for a body without a
generation, and keeps only the resources checked last; the inputs change with the body's version,
discovery, the settings object and any change of a child or pod in the watch cache (added,
changed, removed), and not with the same object put again; an unreadable pod is asked again
after the base delay, doubling to the cap, at once when its pod changes, and is forgotten once read;
the retries of many Ready pods that do not answer keep to the retry rate; a Ready pod whose runtime
answers unchanged is asked by skipped passes after a doubling wait up to the cap, at once after a
change, a failure or a change of its pod, and always by a full pass that wrote (a full pass that
wrote nothing: tests/operator/test_pod_status.py).
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
from ascend_operator import specmemo
from ascend_operator.api import SpecError
from ascend_operator.builders.common import RESOURCE_LABEL
from ascend_operator.lastpass import Inputs, same_states, skippable
from ascend_operator.podreads import PodReader, Settled, StateTarget, Unreadable, pod_ready, state_targets
from ascend_operator.settings import OperatorSettings
from ascend_operator.specmemo import SpecMemo
from ascend_operator.watchcache import WatchCache
from ascend_runtime.config import RuntimePhase, RuntimeState

NS = "llm"
SETTINGS = OperatorSettings(host_path_prefixes=["/models"])
BODY: dict[str, Any] = {
    "metadata": {"name": "tiny", "namespace": NS, "uid": "u1", "generation": 1, "resourceVersion": "7"},
    "spec": {"platform": "CPU", "replicas": 1, "model": {"hostPath": {"path": "/models/tiny"}, "servedName": "tiny"}},
}


@pytest.fixture
def checks(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    calls: list[str] = []
    real = specmemo.check_spec

    def counting(name: str, spec: Any, settings: OperatorSettings) -> Any:
        calls.append(name)
        return real(name, spec, settings)

    monkeypatch.setattr(specmemo, "check_spec", counting)
    return calls


def test_a_spec_is_checked_once_per_generation(checks: list[str]) -> None:
    memo = SpecMemo()
    first = memo.check("llm/tiny", BODY, SETTINGS)
    again = copy.deepcopy(BODY)
    again["metadata"]["resourceVersion"] = "8"  # a status write: same generation
    assert memo.check("llm/tiny", again, SETTINGS) is first
    assert checks == ["tiny"]

    changed = copy.deepcopy(BODY)
    changed["metadata"]["generation"] = 2
    changed["spec"]["replicas"] = 3
    assert memo.check("llm/tiny", changed, SETTINGS).spec.replicas == 3
    recreated = copy.deepcopy(changed)
    recreated["metadata"]["uid"] = "u2"
    memo.check("llm/tiny", recreated, SETTINGS)
    memo.check("llm/tiny", recreated, OperatorSettings(host_path_prefixes=["/models"]))
    assert checks == ["tiny"] * 4


def test_a_refused_spec_is_remembered_and_raised_afresh(checks: list[str]) -> None:
    memo = SpecMemo()
    bad = copy.deepcopy(BODY)
    bad["spec"]["replicas"] = -1
    with pytest.raises(SpecError) as first:
        memo.check("llm/tiny", bad, SETTINGS)
    with pytest.raises(SpecError) as second:
        memo.check("llm/tiny", bad, SETTINGS)
    assert second.value is not first.value and str(second.value) == str(first.value)
    assert "spec.replicas" in str(second.value)
    assert checks == ["tiny"]


def test_the_memo_keeps_the_resources_checked_last(checks: list[str]) -> None:
    memo = SpecMemo(capacity=2)
    for name in ("a", "b", "a", "c", "a", "b"):
        body = copy.deepcopy(BODY)
        body["metadata"]["name"] = name
        memo.check(f"llm/{name}", body, SETTINGS)
    assert checks == ["a", "b", "c", "b"] and len(memo) == 2  # b went when c came (a was used since)


def test_a_body_without_a_generation_is_checked_every_time(checks: list[str]) -> None:
    memo = SpecMemo()
    body = copy.deepcopy(BODY)
    del body["metadata"]["generation"]
    memo.check("llm/tiny", body, SETTINGS)
    memo.check("llm/tiny", body, SETTINGS)
    assert checks == ["tiny", "tiny"] and len(memo) == 0


def obj(kind: str, name: str, rv: int) -> dict[str, Any]:
    return {"kind": kind, "apiVersion": "v1",
            "metadata": {"name": name, "namespace": NS, "resourceVersion": str(rv), "labels": {RESOURCE_LABEL: "tiny"}},
            "spec": {}, "status": {"phase": "Running"}}


def inputs(cache: WatchCache, version: str = "7", served: frozenset[str] = frozenset({"v1"}),
           settings: object = SETTINGS) -> Inputs:
    return Inputs(version, served, settings, cache.changed(NS, "tiny"))


def test_the_inputs_follow_the_body_discovery_settings_and_every_object() -> None:
    cache = WatchCache()
    for body in (obj("ConfigMap", "tiny-config", 3), obj("Deployment", "tiny", 4), obj("Pod", "tiny-a", 5)):
        cache.put(body)
    base = inputs(cache)
    assert base.objects != 0 and cache.changed(NS, "other") == 0
    cache.put(obj("Deployment", "tiny", 4))  # the same object again (our apply's answer, then its event)
    assert inputs(cache).same(base)
    assert not inputs(cache, version="8").same(base)
    assert not inputs(cache, served=frozenset({"v1", "keda.sh/v1alpha1"})).same(base)
    assert not inputs(cache, settings=OperatorSettings()).same(base)
    cache.put(obj("Pod", "tiny-a", 9))  # a pod's status changed
    changed = inputs(cache)
    assert not changed.same(base)
    cache.put(obj("Pod", "tiny-a", 5))  # older: not kept
    assert inputs(cache).same(changed)
    cache.remove("Pod", NS, "tiny-a")
    assert not inputs(cache).same(changed)
    for kind, name in (("ConfigMap", "tiny-config"), ("Deployment", "tiny")):
        cache.remove(kind, NS, name)
    assert cache.changed(NS, "tiny") == 0  # none left: nothing is kept for the resource


def test_only_passes_that_read_nothing_beyond_the_watches_are_skippable() -> None:
    assert skippable(cache=False, adapters=False, routing=False, keda=False)
    for feature in ("cache", "adapters", "routing", "keda"):
        assert not skippable(**{"cache": False, "adapters": False, "routing": False, "keda": False, feature: True})


def test_states_compare_by_value() -> None:
    ready = RuntimeState(phase=RuntimePhase.READY, ready=True)
    assert same_states({"a": ready, "b": None}, {"a": RuntimeState(phase=RuntimePhase.READY, ready=True), "b": None})
    assert not same_states({"a": ready}, {"a": RuntimeState(phase=RuntimePhase.READY, ready=True, leak_suspected=True)})
    assert not same_states({"a": ready}, {"a": ready, "b": None})


def test_only_running_pods_not_being_deleted_are_read() -> None:
    running, pending, going = obj("Pod", "a", 1), obj("Pod", "b", 2), obj("Pod", "c", 3)
    running["status"]["podIP"] = "10.0.0.1"
    pending["status"]["phase"] = "Pending"
    going["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    assert state_targets([running, pending, going]) == (StateTarget("a", "10.0.0.1", "1"),)


def retry_waits(memo: Unreadable, pod: StateTarget, now: list[float], failures: int) -> list[float]:
    """The seconds from each of ``failures`` failed reads of ``pod`` until it is due again
    (``now`` is the memo's clock, advanced a second at a time)."""
    waits = []
    for _ in range(failures):
        memo.failed(NS, pod)
        start = now[0]
        while not memo.due(NS, pod):
            now[0] += 1.0
        waits.append(now[0] - start)
    return waits


def test_an_unreadable_pod_is_asked_again_later_doubling_and_at_once_when_it_changes() -> None:
    now = [100.0]
    memo = Unreadable(5.0, max_s=30.0, clock=lambda: now[0])
    pod = StateTarget("a", "10.0.0.1", "1")
    assert memo.due(NS, pod)
    assert retry_waits(memo, pod, now, 5) == [5.0, 10.0, 20.0, 30.0, 30.0]
    memo.failed(NS, pod)
    assert not memo.due(NS, pod)
    assert memo.due(NS, StateTarget("a", "10.0.0.1", "2"))  # the pod changed: ask at once
    memo.failed(NS, StateTarget("a", "10.0.0.1", "2"))
    now[0] += 5.0  # a changed pod starts again from the base delay
    assert memo.due(NS, StateTarget("a", "10.0.0.1", "2"))
    memo.read(NS, "a")
    assert memo.due(NS, pod) and len(memo) == 0


def test_a_ready_pod_the_operator_cannot_read_is_asked_once_more_then_at_the_longest() -> None:
    # The kubelet's readiness probe reaches the runtime, the operator does not (a network policy,
    # kwok's containerless pods): asking every few seconds buys nothing until the pod changes.
    now = [0.0]
    memo = Unreadable(5.0, max_s=300.0, clock=lambda: now[0])
    ready = StateTarget("a", "10.0.0.1", "1", ready=True)
    assert retry_waits(memo, ready, now, 3) == [5.0, 300.0, 300.0]
    memo.failed(NS, ready)
    assert memo.due(NS, StateTarget("a", "10.0.0.1", "2", ready=True))  # the pod changed: at once
    starting = StateTarget("b", "10.0.0.2", "1", ready=False)
    memo.failed(NS, starting)
    memo.failed(NS, starting)
    now[0] += 10.0  # a starting pod keeps the short, doubling retries (its start-up phases)
    assert memo.due(NS, starting)


def test_a_pod_is_ready_only_by_its_ready_condition() -> None:
    pod = obj("Pod", "a", 1)
    pod["status"]["phase"] = "Running"
    assert not pod_ready(pod)
    pod["status"]["conditions"] = [{"type": "ContainersReady", "status": "True"},
                                   {"type": "Ready", "status": "False"}]
    assert not pod_ready(pod)
    pod["status"]["conditions"][1]["status"] = "True"
    assert pod_ready(pod)
    pod["status"]["podIP"] = "10.0.0.1"
    assert state_targets([pod]) == (StateTarget("a", "10.0.0.1", "1", ready=True),)


def test_pods_gone_for_long_are_swept() -> None:
    now = [0.0]
    memo = Unreadable(1.0, max_s=10.0, clock=lambda: now[0])
    for index in range(1023):
        memo.failed(NS, StateTarget(f"old-{index}", None, "1"))
    now[0] = 100.0
    memo.failed(NS, StateTarget("new", None, "1"))
    assert len(memo) == 1


def test_the_retries_of_many_ready_pods_that_do_not_answer_keep_to_the_rate() -> None:
    # 10,000 Ready pods nobody can read (kwok's): each asked every 300 s would be 33 reads a
    # second while idle; the retries spread out to the rate instead.
    now = [0.0]
    memo = Unreadable(5.0, max_s=300.0, clock=lambda: now[0], rate=10.0)
    pods = [StateTarget(f"p{index}", "10.0.0.1", "1", ready=True) for index in range(10_000)]
    for pod in pods:
        memo.failed(NS, pod)
    now[0] = 5.0
    for pod in pods:  # the second failure: the long wait
        memo.failed(NS, pod)
    now[0] = 5.0 + 300.0
    assert not any(memo.due(NS, pod) for pod in pods)  # 300 s is too soon for 10,000
    now[0] = 5.0 + 10_000 / 10.0
    assert all(memo.due(NS, pod) for pod in pods)
    few = Unreadable(5.0, max_s=300.0, clock=lambda: now[0], rate=10.0)
    assert retry_waits(few, pods[0], now, 3) == [5.0, 300.0, 300.0]  # few held: the longest wait as before


def ready_target(version: str = "5", ready: bool = True) -> StateTarget:
    return StateTarget("tiny-0", "10.0.0.1", version, ready)

READY = RuntimeState(phase=RuntimePhase.READY, ready=True)


def settled_after(answers: int) -> tuple[Settled, list[float]]:
    """A :class:`Settled` (5 s base, 300 s cap) on a clock the test moves, after ``answers`` equal
    answers of ``tiny-0``'s runtime in skipped passes."""
    now = [0.0]
    settled = Settled(5.0, 300.0, clock=lambda: now[0])
    for _ in range(answers):
        settled.answered(NS, ready_target(), READY)
    return settled, now


def test_a_settled_runtime_is_asked_after_a_doubling_wait_up_to_the_cap() -> None:
    now = [0.0]
    settled = Settled(5.0, 300.0, clock=lambda: now[0])
    state = RuntimeState(phase=RuntimePhase.READY, ready=True)
    target = ready_target()
    settled.answered(NS, target, state)  # a first answer: nothing to compare, asked at the next pass
    assert settled.held(NS, target) is None
    waits = []
    for _ in range(8):
        settled.answered(NS, target, RuntimeState(phase=RuntimePhase.READY, ready=True))  # equal, not the same
        assert settled.held(NS, target) == state
        start = now[0]
        while settled.held(NS, target) is not None:
            now[0] += 1.0
        waits.append(now[0] - start)
    assert waits == [10.0, 20.0, 40.0, 80.0, 160.0, 300.0, 300.0, 300.0]


def test_a_change_a_failure_a_changed_or_unready_pod_ask_at_the_next_pass() -> None:
    settled, _ = settled_after(3)
    ready = READY
    assert settled.held(NS, ready_target()) is ready
    assert settled.held(NS, ready_target(version="6")) is None  # the pod changed
    assert settled.held(NS, ready_target(ready=False)) is None  # no longer Ready
    assert settled.held("other", ready_target()) is None  # keyed by namespace

    settled.answered(NS, ready_target(), RuntimeState(phase=RuntimePhase.READY, ready=True, leak_suspected=True))
    assert settled.held(NS, ready_target()) is None  # a change: asked again at once
    for _ in range(3):
        settled.answered(NS, ready_target(), ready)
    settled.answered(NS, ready_target(), None)  # no answer: forgotten
    assert settled.held(NS, ready_target()) is None and len(settled) == 0
    settled.answered(NS, ready_target(ready=False), ready)
    assert len(settled) == 0  # a pod that is not Ready is asked at every pass


async def test_only_a_skipped_pass_uses_the_held_state_and_other_pods_are_still_read() -> None:
    asked: list[str] = []
    ready = RuntimeState(phase=RuntimePhase.READY, ready=True)

    class Reader(PodReader):
        async def read_state(self, namespace, pod, port=8080, *, pod_ip=None):  # type: ignore[override]
            asked.append(pod)
            return ready

    reader = Reader(None, timeout_s=1, via_proxy=False, retry_base_s=5.0, settled_max_s=300.0)  # type: ignore[arg-type]
    targets = (StateTarget("a", "10.0.0.1", "1", True), StateTarget("b", "10.0.0.2", "1", False))
    for _ in range(2):
        await reader.read_targets(NS, targets, settled=True)
    assert asked == ["a", "b", "a", "b"]
    asked.clear()
    assert await reader.read_targets(NS, targets, settled=True) == {"a": ready, "b": ready}
    assert asked == ["b"]  # a is settled: its state is held; b is not Ready: asked
    await reader.read_targets(NS, targets)  # a full pass that wrote asks every runtime
    assert asked == ["b", "a", "b"]


def test_a_full_pass_starts_the_doubling_again() -> None:
    settled, now = settled_after(6)
    ready = READY
    now[0] += 100.0
    assert settled.held(NS, ready_target()) is ready  # 300 s to wait
    settled.answered(NS, ready_target(), ready, settled=False)  # a full pass read it (it wrote an adapter)
    assert settled.held(NS, ready_target()) is None  # asked at the next pass again
    settled.answered(NS, ready_target(), ready)
    now[0] += 10.0
    assert settled.held(NS, ready_target()) is None  # then 10 s, 20 s, ...


def test_only_a_full_pass_that_wrote_nothing_reads_the_runtimes_as_a_skipped_pass() -> None:
    from ascend_operator.handlers.handle_reconcile import ChildrenPass, reads_settled
    from ascend_operator.k8s import ChildRefused

    quiet = ChildrenPass(verified=True)
    assert reads_settled(quiet, None)
    assert not reads_settled(ChildrenPass(verified=True, wrote=True), None)  # may have written an adapter
    assert not reads_settled(ChildrenPass(verified=False), None)  # a child not as built
    assert not reads_settled(ChildrenPass(verified=True, conflicts=["Service x"]), None)
    assert not reads_settled(ChildrenPass(verified=True, refused=ChildRefused("Service", "x", 422, "bad")), None)
    loading = {"replicas": 1, "adapters": [{"name": "sql", "loaded": 0, "failed": 0}]}
    loaded = {"replicas": 1, "adapters": [{"name": "sql", "loaded": 1, "failed": 0}]}
    assert not reads_settled(quiet, loading)  # adapters on the way: this pass may see them loaded
    assert reads_settled(quiet, loaded)
