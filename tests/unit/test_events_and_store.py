"""ascend_operator.store and handlers.handle_events: watch events -> store -> queue requests.

Covered: a newer resourceVersion replaces the body and an older one is ignored (a late watch
event never rolls back a status just written); the echo of our own write (same version) asks
for no reconcile; a change does; DELETED forgets the key; a child or pod event requests its
resource's reconcile (debounced) by the resource label, and a foreign object's does nothing.
"""

from __future__ import annotations

from typing import Any

from ascend_operator.handlers import OperatorContext
from ascend_operator.handlers.handle_events import CHILD_DEBOUNCE_S, child_event, resource_event
from ascend_operator.store import ResourceStore
from ascend_operator.workqueue import Urgency


def body(version: str, name: str = "qwen", phase: str = "Ready") -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "llm", "resourceVersion": version, "uid": "u"},
            "spec": {}, "status": {"phase": phase}}


class Queue:
    def __init__(self) -> None:
        self.requests: list[tuple[str, float]] = []
        self.urgencies: list[Urgency] = []
        self.forgotten: list[str] = []

    def start(self) -> None:
        pass

    def request(self, key: str, delay_s: float = 0.0, urgency: Urgency = Urgency.REFRESH) -> None:
        self.requests.append((key, delay_s))
        self.urgencies.append(urgency)

    def forget(self, key: str) -> None:
        self.forgotten.append(key)


def context() -> tuple[OperatorContext, Queue]:
    queue = Queue()
    ctx = OperatorContext(settings=None, kube=None, pods=None, store=ResourceStore(), queue=queue)  # type: ignore[arg-type]
    return ctx, queue


def test_a_generation_no_pass_applied_is_urgent_and_a_status_change_is_not() -> None:
    ctx, queue = context()
    new = body("5")
    new["metadata"]["generation"] = 1
    resource_event(ctx, "ADDED", new)  # never reconciled: no observedGeneration
    seen = body("6")
    seen["metadata"]["generation"], seen["status"]["observedGeneration"] = 1, 1
    resource_event(ctx, "MODIFIED", seen)  # someone wrote the status
    edited = body("7")
    edited["metadata"]["generation"], edited["status"]["observedGeneration"] = 2, 1
    resource_event(ctx, "MODIFIED", edited)  # the spec changed
    assert queue.urgencies == [Urgency.SPEC, Urgency.REFRESH, Urgency.SPEC]


def test_the_newer_version_wins() -> None:
    store = ResourceStore()
    assert store.put(body("10", phase="Ready"))
    assert not store.put(body("9", phase="Pending"))
    assert store.get("llm/qwen")["status"]["phase"] == "Ready"
    assert store.put(body("11", phase="Degraded"))
    assert store.key_for_label("llm", "qwen") == "llm/qwen"


def test_the_echo_of_our_own_write_asks_for_nothing_and_a_change_does() -> None:
    ctx, queue = context()
    resource_event(ctx, None, body("5"))
    ctx.store.put(body("6"))  # the response to our status patch
    resource_event(ctx, "MODIFIED", body("6"))  # its watch event
    resource_event(ctx, "MODIFIED", body("7"))  # someone edited the spec
    assert queue.requests == [("llm/qwen", 0.0), ("llm/qwen", 0.0)]
    resource_event(ctx, "DELETED", body("8"))
    assert queue.forgotten == ["llm/qwen"] and ctx.store.get("llm/qwen") is None


def test_child_events_request_their_resource_by_label() -> None:
    ctx, queue = context()
    ctx.store.put(body("1"))
    child_event(ctx, "MODIFIED", {"metadata": {"namespace": "llm", "labels": {"llm.ascend.dev/deployment": "qwen"}}})
    child_event(ctx, "MODIFIED", {"metadata": {"namespace": "other", "labels": {"llm.ascend.dev/deployment": "qwen"}}})
    child_event(ctx, "MODIFIED", {"metadata": {"namespace": "llm", "labels": {}}})
    assert queue.requests == [("llm/qwen", CHILD_DEBOUNCE_S)]


def child(kind: str, version: str, generation: int, healthy: int) -> dict[str, Any]:
    return {"kind": kind, "metadata": {"name": "qwen", "namespace": "llm", "resourceVersion": version,
                                       "generation": generation, "labels": {"llm.ascend.dev/deployment": "qwen"}},
            "status": {"currentHealthy": healthy}}


def test_a_status_only_change_of_a_child_whose_status_is_unread_asks_for_nothing() -> None:
    ctx, queue = context()
    ctx.store.put(body("1"))
    child_event(ctx, None, child("PodDisruptionBudget", "10", 1, 0))  # listed: reconcile
    child_event(ctx, "MODIFIED", child("PodDisruptionBudget", "11", 1, 1))  # a pod became healthy
    assert len(queue.requests) == 1
    child_event(ctx, "MODIFIED", child("PodDisruptionBudget", "12", 2, 1))  # someone edited its spec
    child_event(ctx, "MODIFIED", child("Deployment", "13", 1, 0))
    child_event(ctx, "MODIFIED", child("Deployment", "14", 1, 1))  # a workload's status is read
    assert len(queue.requests) == 4
    child_event(ctx, "MODIFIED", child("Deployment", "12", 1, 0))  # older than the one held
    child_event(ctx, "DELETED", child("PodDisruptionBudget", "15", 2, 1))
    assert len(queue.requests) == 5 and ctx.watch_cache.get("PodDisruptionBudget", "llm", "qwen", "qwen") is None


def test_a_route_that_changes_or_goes_asks_again_the_resources_it_may_have_shadowed() -> None:
    """RouteShadowed resources (ctx.shadowed) are asked again when any HTTPRoute changes or is
    deleted, at once rather than at the next resync; the listing and other kinds ask nothing more."""
    ctx, queue = context()
    ctx.store.put(body("1"))
    ctx.store.put({**body("2", name="thief"), "metadata": {**body("2", name="thief")["metadata"], "namespace": "b"}})
    ctx.shadowed.add("b/thief")

    def route(version: str) -> dict[str, Any]:
        return {"kind": "HTTPRoute", "metadata": {"name": "qwen", "namespace": "llm", "resourceVersion": version,
                                                  "labels": {"llm.ascend.dev/deployment": "qwen"}}, "spec": {}}

    child_event(ctx, None, route("3"))  # listed: only its own resource
    assert queue.requests == [("llm/qwen", CHILD_DEBOUNCE_S)]
    queue.requests.clear()
    child_event(ctx, "DELETED", route("4"))
    assert queue.requests == [("llm/qwen", CHILD_DEBOUNCE_S), ("b/thief", CHILD_DEBOUNCE_S)]
    queue.requests.clear()
    child_event(ctx, "MODIFIED", {**child("Deployment", "5", 1, 0)})
    assert queue.requests == [("llm/qwen", CHILD_DEBOUNCE_S)]
    queue.requests.clear()
    resource_event(ctx, "DELETED", {**body("6", name="thief"), "metadata": {**body("6", name="thief")["metadata"],
                                                                          "namespace": "b"}})
    assert ctx.shadowed == set()
    child_event(ctx, "MODIFIED", route("7"))
    assert queue.requests == [("llm/qwen", CHILD_DEBOUNCE_S)]
