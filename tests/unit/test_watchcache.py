"""The operator's view of its children and pods (ascend_operator.watchcache), without kopf."""

from __future__ import annotations

import json
import tracemalloc
from typing import Any

from ascend_operator.builders.common import RESOURCE_LABEL
from ascend_operator.watchcache import WatchCache, slim

NS = "llm"


def obj(kind: str, name: str, rv: int, label: str | None = "tiny", **extra: Any) -> dict[str, Any]:
    labels = {RESOURCE_LABEL: label} if label else {}
    return {"apiVersion": "v1", "kind": kind,
            "metadata": {"name": name, "namespace": NS, "resourceVersion": str(rv), "labels": labels,
                         "managedFields": [{"manager": "kubectl"}]},
            **extra}


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


def test_only_objects_labelled_for_a_resource_are_kept() -> None:
    cache = WatchCache()
    assert cache.put(obj("ConfigMap", "tiny", 1))
    assert not cache.put(obj("ConfigMap", "other", 1, label=None))
    assert len(cache) == 1


def test_get_finds_by_name_and_misses_what_the_cache_does_not_hold() -> None:
    cache = WatchCache()
    cache.put(obj("Service", "tiny", 1))
    cache.put(obj("Service", "tiny-runtime", 1))
    assert cache.get("Service", NS, "tiny-runtime", "tiny")["metadata"]["name"] == "tiny-runtime"
    assert "managedFields" not in cache.get("Service", NS, "tiny", "tiny")["metadata"]
    assert cache.get("Service", NS, "nope", "tiny") is None
    assert cache.get("ConfigMap", NS, "tiny", "tiny") is None
    assert cache.get("Service", "other-ns", "tiny", "tiny") is None
    assert cache.get("Service", NS, "tiny", "another-resource") is None


def test_the_newer_version_wins_and_a_deletion_removes() -> None:
    cache = WatchCache()
    cache.put(obj("Deployment", "tiny", 5, spec={"replicas": 1}))
    assert cache.put(obj("Deployment", "tiny", 7, spec={"replicas": 3}))  # our apply's answer
    assert not cache.put(obj("Deployment", "tiny", 6, spec={"replicas": 2}))  # a late watch event
    assert cache.get("Deployment", NS, "tiny", "tiny")["spec"] == {"replicas": 3}
    assert cache.put(obj("Deployment", "tiny", 9, spec={"replicas": 4}))  # someone scaled it after us
    assert cache.get("Deployment", NS, "tiny", "tiny")["spec"] == {"replicas": 4}
    cache.remove("Deployment", NS, "tiny")
    assert cache.get("Deployment", NS, "tiny", "tiny") is None and len(cache) == 0


def test_the_deletion_of_a_replaced_objects_predecessor_keeps_the_new_object() -> None:
    cache = WatchCache()
    cache.put(obj("Service", "tiny-runtime", 20))  # made again (deleted at 15, created at 20)
    cache.remove("Service", NS, "tiny-runtime", 15)  # the old object's DELETED event, arriving late
    assert cache.get("Service", NS, "tiny-runtime", "tiny") is not None
    cache.remove("Service", NS, "tiny-runtime", 21)
    assert cache.get("Service", NS, "tiny-runtime", "tiny") is None


def test_a_relabelled_object_moves_to_its_new_resource() -> None:
    cache = WatchCache()
    cache.put(obj("ConfigMap", "cm", 1, label="a"))
    cache.put(obj("ConfigMap", "cm", 2, label="b"))
    assert cache.objects("ConfigMap", NS, "a") == [] and len(cache.objects("ConfigMap", NS, "b")) == 1


def test_pods_are_matched_by_the_selector() -> None:
    cache = WatchCache()
    engine = obj("Pod", "tiny-1", 1)
    engine["metadata"]["labels"]["component"] = "engine"
    cache.put(engine)
    cache.put(obj("Pod", "tiny-fetch", 1))
    assert [p["metadata"]["name"] for p in cache.pods(NS, "tiny", {"component": "engine"})] == ["tiny-1"]
    assert len(cache.pods(NS, "tiny", {})) == 2


def test_an_entry_takes_a_fraction_of_the_memory_of_the_parsed_body() -> None:
    # A Deployment as the builders make it (the live one only adds server defaults).
    from ascend_operator.api import parse_spec
    from ascend_operator.builders import BuildMeta, build_children
    from ascend_operator.settings import OperatorSettings

    spec = parse_spec({"platform": "CPU", "model": {"hostPath": {"path": "/models/tiny"}}})
    deployment = build_children(BuildMeta("tiny", NS), spec, OperatorSettings()).workload
    deployment["metadata"]["resourceVersion"] = "1"
    text = json.dumps(deployment)

    def traced(make: Any) -> int:
        tracemalloc.start()
        kept = [make(n) for n in range(50)]
        size = tracemalloc.get_traced_memory()[0]
        tracemalloc.stop()
        assert len(kept) == 50
        return size

    def cached(n: int) -> WatchCache:
        cache = WatchCache()
        cache.put(deployment)
        return cache

    entries = traced(cached)
    parsed = traced(lambda n: json.loads(text))
    assert entries * 4 < parsed, (entries, parsed)
