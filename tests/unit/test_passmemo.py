"""ascend_operator.passmemo: when a pass may skip building and comparing the children.

Covered: the inputs' digest changes with the spec, the annotations, the remembered state, the
autoscaler/routing choices and the settings object, and not otherwise; the children's marks keep
through a status-only change of a Deployment or PodDisruptionBudget and change with its
generation, labels or owner, with any change of a ConfigMap or Service (no generation there),
with an added or removed child; the memo answers only for the same inputs and marks.
"""

from __future__ import annotations

import copy
from typing import Any

from ascend_operator.builders import ChildrenSummary, Remembered
from ascend_operator.builders.common import RESOURCE_LABEL
from ascend_operator.k8s import CHILD_KINDS
from ascend_operator.passmemo import PassMemo, children_marks, inputs_digest
from ascend_operator.settings import OperatorSettings
from ascend_operator.watchcache import WatchCache

NS = "llm"
SETTINGS = OperatorSettings()
BODY = {"metadata": {"name": "tiny", "namespace": NS, "uid": "u1", "generation": 1, "annotations": {"a": "1"}},
        "spec": {"replicas": 1, "model": {"hostPath": {"path": "/models/tiny"}}},
        "status": {"phase": "Ready"}}


def digest(body: dict[str, Any] = BODY, remembered: Remembered = Remembered(),
           choices: tuple = ("hpa", None, None), settings: object = SETTINGS) -> bytes:
    return inputs_digest(body, remembered, choices, settings)


def test_the_digest_follows_every_input_of_the_build_and_nothing_else() -> None:
    same = copy.deepcopy(BODY)
    same["status"] = {"phase": "Pending"}  # the status is not an input (its remembered mode is, below)
    same["metadata"]["resourceVersion"] = "99"
    assert digest(same) == digest()
    changed_spec = copy.deepcopy(BODY)
    changed_spec["spec"]["replicas"] = 2
    changed_annotation = copy.deepcopy(BODY)
    changed_annotation["metadata"]["annotations"]["a"] = "2"
    others = [
        digest(changed_spec),
        digest(changed_annotation),
        digest(remembered=Remembered(remembered_for="key")),
        digest(remembered=Remembered(adapter_jobs_complete=frozenset({"tiny-adapter-1"}))),
        digest(choices=("keda", None, None)),
        digest(choices=("hpa", None, "no Gateway API")),
        digest(settings=OperatorSettings()),
    ]
    assert len({digest(), *others}) == len(others) + 1


def child(kind: str, name: str, rv: int, **meta: Any) -> dict[str, Any]:
    return {"kind": kind, "apiVersion": "v1",
            "metadata": {"name": name, "namespace": NS, "resourceVersion": str(rv),
                         "labels": {RESOURCE_LABEL: "tiny"}, **meta}, "spec": {}, "status": {}}


def marks(cache: WatchCache) -> int:
    return children_marks(cache, CHILD_KINDS, NS, "tiny")


def test_marks_keep_through_status_only_changes_of_kinds_with_a_generation() -> None:
    cache = WatchCache()
    cache.put(child("Deployment", "tiny", 10, generation=1))
    cache.put(child("PodDisruptionBudget", "tiny", 11, generation=1))
    cache.put(child("ConfigMap", "tiny-config", 12))
    before = marks(cache)
    cache.put({**child("Deployment", "tiny", 20, generation=1), "status": {"readyReplicas": 1}})
    cache.put({**child("PodDisruptionBudget", "tiny", 21, generation=1), "status": {"currentHealthy": 1}})
    assert marks(cache) == before
    cache.put(child("Pod", "tiny-abc", 22))  # pods are not children: the status reads them afresh
    assert marks(cache) == before


def test_marks_change_with_a_spec_labels_owner_or_any_change_without_a_generation() -> None:
    edits = [
        child("Deployment", "tiny", 30, generation=2),  # kubectl scale, a template edit
        child("Deployment", "tiny", 30, generation=1, annotations={"x": "y"}),
        child("Deployment", "tiny", 30, generation=1, ownerReferences=[{"uid": "other"}]),
        child("ConfigMap", "tiny-config", 30),  # data replaced: a ConfigMap has no generation
        child("Service", "tiny", 30),  # a second child of a kind
    ]
    for edit in edits:
        cache = WatchCache()
        cache.put(child("Deployment", "tiny", 10, generation=1))
        cache.put(child("ConfigMap", "tiny-config", 12))
        before = marks(cache)
        cache.put(edit)
        assert marks(cache) != before, edit
    cache.remove("ConfigMap", NS, "tiny-config")
    cache.put(child("ConfigMap", "tiny-config", 12))
    with_it = marks(cache)
    cache.remove("ConfigMap", NS, "tiny-config")
    assert marks(cache) != with_it


def test_the_memo_answers_only_for_the_same_inputs_and_marks() -> None:
    memo = PassMemo()
    summary = ChildrenSummary(workload_kind="Deployment",
                              workload_name="tiny", template_hash="h", scale_selector="s", remembered_key="k",
                              autoscaler=None)
    assert memo.unchanged("llm/tiny", b"in", 1) is None
    memo.record("llm/tiny", b"in", 1, summary, SETTINGS)
    assert memo.unchanged("llm/tiny", b"in", 1) == summary
    assert memo.unchanged("llm/tiny", b"in", 2) is None
    assert memo.unchanged("llm/tiny", b"other", 1) is None
    memo.forget("llm/tiny")
    assert memo.unchanged("llm/tiny", b"in", 1) is None and len(memo) == 0
