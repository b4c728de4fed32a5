"""ascend_operator.drift.find_drift: what the operator sets, compared with the live object.

Covered: a live object with server defaults and foreign additions is no drift; quantities are
compared by value in either direction (the server stores ``1`` NPU as ``"1"``); a changed value,
a removed field, a replaced list item and a changed scalar list are drift, named by path;
status and server-managed metadata are never compared; an immutable field the builder sets to
another value (a Service's cluster IP) is named by ``immutable_changes``, one it leaves unset is not.
"""

from __future__ import annotations

import copy

from ascend_operator.drift import find_drift, immutable_changes

DESIRED = {
    "apiVersion": "apps/v1",
    "kind": "Deployment",
    "metadata": {"name": "x", "labels": {"a": "1"}, "annotations": {"llm.ascend.dev/spec-hash": "h"}},
    "spec": {
        "replicas": 2,
        "template": {
            "metadata": {"labels": {"a": "1"}},
            "spec": {
                "containers": [{
                    "name": "engine",
                    "args": ["--x", "1"],
                    "resources": {"requests": {"huawei.com/Ascend910": 1, "memory": "64Gi", "cpu": "8"}},
                    "env": [{"name": "A", "value": "1"}],
                }],
                "volumes": [],
            },
        },
    },
}


def live() -> dict:
    obj = copy.deepcopy(DESIRED)
    obj["metadata"].update(uid="u", resourceVersion="7", managedFields=[{}],
                           annotations={**obj["metadata"]["annotations"], "deployment.kubernetes.io/revision": "1"})
    obj["status"] = {"replicas": 2}
    container = obj["spec"]["template"]["spec"]["containers"][0]
    container["resources"]["requests"] = {"huawei.com/Ascend910": "1", "memory": "65536Mi", "cpu": "8000m"}
    container.update(imagePullPolicy="IfNotPresent", terminationMessagePath="/dev/termination-log")
    container["env"].append({"name": "FOREIGN", "value": "kept"})
    obj["spec"]["template"]["metadata"]["annotations"] = {"kubectl.kubernetes.io/restartedAt": "now"}
    obj["spec"]["template"]["spec"].pop("volumes")  # the server drops an empty list
    obj["spec"]["strategy"] = {"type": "Recreate"}
    return obj


def test_defaults_foreign_additions_and_quantity_forms_are_no_drift() -> None:
    assert find_drift(DESIRED, live()) == []


def test_changed_removed_and_replaced_fields_are_drift_named_by_path() -> None:
    edited = live()
    edited["spec"]["replicas"] = 5
    edited["spec"]["template"]["metadata"]["labels"]["a"] = "edited"
    container = edited["spec"]["template"]["spec"]["containers"][0]
    container["args"] = ["--x", "2"]
    container["env"][0]["value"] = "changed"
    del container["resources"]["requests"]["memory"]
    assert find_drift(DESIRED, edited) == [
        "spec.replicas",
        "spec.template.metadata.labels.a",
        "spec.template.spec.containers[name=engine]",
    ]


def test_status_and_server_metadata_are_never_compared() -> None:
    desired = {**copy.deepcopy(DESIRED), "status": {"replicas": 9}}
    desired["metadata"]["resourceVersion"] = "1"
    assert find_drift(desired, live()) == []


def test_a_cluster_ip_the_builder_sets_otherwise_is_an_immutable_change() -> None:
    headless = {"kind": "Service", "spec": {"clusterIP": "None", "ports": []}}
    allocated = {"kind": "Service", "spec": {"clusterIP": "10.0.0.7", "ports": []}}
    assert immutable_changes(headless, allocated) == ["spec.clusterIP"]
    assert immutable_changes(headless, headless) == []
    # The clients' Service leaves its cluster IP to the server: whatever it chose is no change.
    assert immutable_changes({"kind": "Service", "spec": {"ports": []}}, allocated) == []
    assert immutable_changes({"kind": "ConfigMap", "spec": {"clusterIP": "None"}}, allocated) == []
