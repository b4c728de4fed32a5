"""The operator's view of its children and pods (ascend_operator.watchcache), without kopf."""

from __future__ import annotations

import json
import tracemalloc
from typing import Any

from ascend_operator.builders.common import RESOURCE_LABEL
from ascend_operator.watchcache import WatchCache, index_entry, slim

NS = "llm"


def obj(kind: str, name: str, rv: int, label: str | None = "tiny", **extra: Any) -> dict[str, Any]:
    labels = {RESOURCE_LABEL: label} if label else {}
    return {"apiVersion": "v1", "kind": kind,
            "metadata": {"name": name, "namespace": NS, "resourceVersion": str(rv), "labels": labels,
                         "managedFields": [{"manager": "kubectl"}]},
            **extra}


class FakeIndex(dict):  # what WatchCache uses of kopf.Index: key -> iterable of values
    def put(self, body: dict[str, Any]) -> None:
        (key, value), = index_entry(body).items()
        self.setdefault(key, [])
        self[key] = [v for v in self[key] if json.loads(v)["metadata"]["name"] != body["metadata"]["name"]] + [value]

    def drop(self, body: dict[str, Any]) -> None:
        (key, _), = index_entry(body).items()
        self[key] = [v for v in self[key] if json.loads(v)["metadata"]["name"] != body["metadata"]["name"]]


def cache_with(**indices: FakeIndex) -> WatchCache:
    cache = WatchCache()
    cache.attach(indices)
    return cache


def test_slim_drops_managed_fields_and_keeps_a_childs_spec_whole() -> None:
    deployment = obj("Deployment", "tiny", 1, spec={"replicas": 2, "template": {"spec": {"volumes": []}}})
    slimmed = slim(deployment)
    assert "managedFields" not in slimmed["metadata"]
    assert slimmed["spec"] == deployment["spec"]
    assert deployment["metadata"]["managedFields"]  # the input is not changed


def test_slim_keeps_of_a_pod_only_what_the_status_reads() -> None:
    pod = obj("Pod", "tiny-1", 1, spec={
        "nodeName": "n1", "volumes": [{"name": "big"}], "tolerations": [{}],
        "containers": [{"name": "engine", "image": "i", "resources": {"requests": {"npu": "1"}},
                        "env": [{"name": "X", "value": "y"}], "args": ["--a"]}],
    }, status={"phase": "Running"})
    assert slim(pod)["spec"] == {"nodeName": "n1", "containers": [
        {"name": "engine", "image": "i", "resources": {"requests": {"npu": "1"}}}]}
    assert slim(pod)["status"] == {"phase": "Running"}


def test_index_entry_keys_by_namespace_and_label_and_skips_unlabelled_objects() -> None:
    assert list(index_entry(obj("ConfigMap", "tiny", 1))) == [(NS, "tiny")]
    assert index_entry(obj("ConfigMap", "other", 1, label=None)) is None


def test_get_finds_by_name_and_misses_what_the_watch_does_not_show() -> None:
    index = FakeIndex()
    index.put(obj("Service", "tiny", 1))
    index.put(obj("Service", "tiny-runtime", 1))
    cache = cache_with(Service=index)
    assert cache.get("Service", NS, "tiny-runtime", "tiny")["metadata"]["name"] == "tiny-runtime"
    assert cache.get("Service", NS, "nope", "tiny") is None
    assert cache.get("ConfigMap", NS, "tiny", "tiny") is None  # a kind without an index
    assert cache.get("Service", "other-ns", "tiny", "tiny") is None


def test_an_applied_object_is_seen_until_the_watch_delivers_that_version_or_a_newer_one() -> None:
    index = FakeIndex()
    cache = cache_with(Deployment=index)
    index.put(obj("Deployment", "tiny", 5, spec={"replicas": 1}))
    cache.applied(obj("Deployment", "tiny", 7, spec={"replicas": 3}))
    assert cache.get("Deployment", NS, "tiny", "tiny")["spec"] == {"replicas": 3}  # the watch lags
    index.put(obj("Deployment", "tiny", 9, spec={"replicas": 4}))  # someone scaled it after us
    assert cache.get("Deployment", NS, "tiny", "tiny")["spec"] == {"replicas": 4}
    index.drop(obj("Deployment", "tiny", 9))  # then deleted: our old answer does not come back
    assert cache.get("Deployment", NS, "tiny", "tiny") is None


def test_a_created_object_counts_before_its_first_event_and_not_after_its_deletion() -> None:
    index = FakeIndex()
    cache = cache_with(ConfigMap=index)
    cache.applied(obj("ConfigMap", "tiny", 3))
    assert [o["metadata"]["name"] for o in cache.objects("ConfigMap", NS, "tiny")] == ["tiny"]
    cache.forget("ConfigMap", NS, "tiny")  # its DELETED event (or our own delete)
    assert cache.objects("ConfigMap", NS, "tiny") == []


def test_pods_are_matched_by_the_selector() -> None:
    index = FakeIndex()
    engine = obj("Pod", "tiny-1", 1)
    engine["metadata"]["labels"]["component"] = "engine"
    index.put(engine)
    index.put(obj("Pod", "tiny-fetch", 1))
    cache = cache_with(Pod=index)
    assert [p["metadata"]["name"] for p in cache.pods(NS, "tiny", {"component": "engine"})] == ["tiny-1"]
    assert len(cache.pods(NS, "tiny", {})) == 2


def test_an_index_entry_takes_a_fraction_of_the_memory_of_the_parsed_body() -> None:
    # A Deployment as the builders make it (the live one only adds server defaults).
    from ascend_operator.api import parse_spec
    from ascend_operator.builders import BuildMeta, build_children
    from ascend_operator.settings import OperatorSettings

    spec = parse_spec({"platform": "CPU", "model": {"hostPath": {"path": "/models/tiny"}}})
    deployment = build_children(BuildMeta("tiny", NS), spec, OperatorSettings()).workload
    text = json.dumps(deployment)

    def traced(make: Any) -> int:
        tracemalloc.start()
        kept = [make() for _ in range(50)]
        size = tracemalloc.get_traced_memory()[0]
        tracemalloc.stop()
        assert len(kept) == 50
        return size

    entries = traced(lambda: index_entry(deployment))
    parsed = traced(lambda: json.loads(text))
    assert entries * 4 < parsed, (entries, parsed)
