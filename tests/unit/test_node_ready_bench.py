"""The pure parts of bench/node_ready.py: the round order, ratios and goal, the bare container made
from the operator's own pod spec for examples/cpu-tiny.yaml (and a LoRA one), its ``ctr run``
argv, the parts of each side and of the difference, and the report."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

from ascend_operator.cli import render_children
from benchload import load_bench

nr = load_bench("node_ready")
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "cpu-tiny.yaml"


def test_rounds_alternate_which_side_goes_first_and_start_on_the_node():
    assert nr.alternation(3) == ["node", "bare", "bare", "node", "node", "bare"]
    with pytest.raises(ValueError, match="--rounds"):
        nr.alternation(0)


def test_ratios_pair_the_sides_and_the_goal_is_judged_on_their_range():
    assert nr.pair_ratios([110.0, 90.0], [100.0, 100.0]) == [1.1, 0.9]
    with pytest.raises(ValueError, match="pair up"):
        nr.pair_ratios([1.0], [1.0, 2.0])
    with pytest.raises(ValueError, match="no time"):
        nr.pair_ratios([1.0], [0.0])
    assert nr.goal_verdict([1.05, 1.1, 1.19]).outcome.value == "met"
    assert nr.goal_verdict([1.1, 1.3, 1.0]).outcome.value == "inconclusive"
    assert nr.goal_verdict([1.3, 1.4, 1.25]).outcome.value == "MISSED"
    assert nr.goal_verdict([1.0, 1.1]).outcome.value == "inconclusive"  # two pairs cannot bound the spread


def test_memory_quantities():
    assert nr.memory_bytes("8Gi") == 8 * 2**30
    assert nr.memory_bytes("512M") == 512 * 10**6
    assert nr.memory_bytes("1000") == 1000
    with pytest.raises(ValueError, match="quantity"):
        nr.memory_bytes("8 gigs")


def rendered(resource: dict) -> tuple[dict, dict[str, dict[str, str]]]:
    children = render_children(resource, "ns")
    (deployment,) = [c for c in children if c["kind"] == "Deployment"]
    config_maps = {c["metadata"]["name"]: c["data"] for c in children if c["kind"] == "ConfigMap"}
    return deployment["spec"]["template"]["spec"], config_maps


def test_the_bare_container_is_the_pods_engine_container_with_its_volumes_as_files_and_dirs(tmp_path: Path):
    resource = yaml.safe_load(EXAMPLE.read_text(encoding="utf-8"))
    resource["spec"]["model"]["hostPath"]["path"] = "/srv/models/tiny"
    pod_spec, config_maps = rendered(resource)
    bare = nr.bare_container(pod_spec, config_maps, tmp_path, "bare-0")
    (engine,) = pod_spec["containers"]
    assert bare.image == engine["image"]
    assert bare.command == ["ascend-llm", "run", "--config", "/etc/ascend-llm/engine-config.yaml"]
    assert bare.user == "1000:1000" and bare.memory_limit == 8 * 2**30
    # The engine config as the pod's volume shows it, byte for byte.
    config_dir = tmp_path / "volumes" / "engine-config"
    assert bare.files == {str(config_dir / "engine-config.yaml"): config_maps["cpu-tiny-config"]["engine-config.yaml"]}
    assert (str(config_dir), "/etc/ascend-llm", True) in bare.binds
    assert ("/srv/models/tiny", "/mnt/model", True) in bare.binds
    assert (str(tmp_path / "volumes" / "runtime-state"), "/var/lib/ascend-llm/state", False) in bare.binds
    assert bare.tmpfs == ["/dev/shm"]  # the memory emptyDir
    assert sorted(bare.dirs) == [str(config_dir), str(tmp_path / "volumes" / "runtime-state")]

    argv = nr.ctr_run_argv(["ctr", "-n", "k8s.io"], bare, "bare-0", tmp_path / "log")
    assert argv[:9] == ["ctr", "-n", "k8s.io", "run", "-d", "--net-host", "--user", "1000:1000", "--log-uri"]
    assert argv[-6:] == [engine["image"], "bare-0", *bare.command]
    assert "type=bind,src=/srv/models/tiny,dst=/mnt/model,options=rbind:ro" in argv
    assert f"type=bind,src={tmp_path}/volumes/runtime-state,dst=/var/lib/ascend-llm/state,options=rbind:rw" in argv
    assert "type=tmpfs,src=tmpfs,dst=/dev/shm,options=nosuid:nodev:mode=1777" in argv
    assert argv[argv.index("--memory-limit") + 1] == str(8 * 2**30)


def test_a_projected_config_volume_skips_a_missing_optional_configmap_and_env_gets_the_downward_values(
        tmp_path: Path):
    resource = yaml.safe_load(EXAMPLE.read_text(encoding="utf-8"))
    resource["spec"]["model"]["hostPath"]["path"] = "/srv/models/tiny"
    resource["spec"]["lora"] = {"maxRank": 8, "adapters": [
        {"name": "sql", "source": {"hostPath": {"path": "/srv/adapters", "subPath": "sql"}}}]}
    pod_spec, config_maps = rendered(resource)
    projected = [v for v in pod_spec["volumes"] if "projected" in v]
    assert projected, pod_spec["volumes"]
    bare = nr.bare_container(pod_spec, config_maps, tmp_path, "bare-1")
    config_dir = tmp_path / "volumes" / "engine-config"
    assert "sql" in bare.files[str(config_dir / "adapters" / "adapters.yaml")]
    without = {k: v for k, v in config_maps.items() if k.endswith("-config")}
    assert str(config_dir / "adapters" / "adapters.yaml") not in nr.bare_container(
        pod_spec, without, tmp_path, "bare-1").files  # optional: the pod starts without it too

    spec = copy.deepcopy(pod_spec)
    spec["containers"][0]["env"] = [
        {"name": "A", "value": "1"},
        {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}]
    assert nr.bare_container(spec, config_maps, tmp_path, "bare-1").env == {
        "A": "1", "POD_NAME": "bare-1", "POD_IP": "127.0.0.1"}
    spec["containers"][0]["env"] = [{"name": "S", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}]
    with pytest.raises(ValueError, match="env S"):
        nr.bare_container(spec, config_maps, tmp_path, "bare-1")
    spec = copy.deepcopy(pod_spec)
    spec["volumes"].append({"name": "claim", "persistentVolumeClaim": {"claimName": "c"}})
    spec["containers"][0]["volumeMounts"].append({"name": "claim", "mountPath": "/c"})
    with pytest.raises(ValueError, match="volume claim"):
        nr.bare_container(spec, config_maps, tmp_path, "bare-1")


def test_the_parts_of_each_side_and_of_the_difference():
    node = nr.node_parts({"applied": 100.0, "pod_created": 101.0, "container_started": 104.0,
                          "runtime_ready": 174.0, "pod_ready": 182.0, "resource_ready": 183.5})
    assert node == {"total": 83.5, "to pod": 1.0, "to container": 4.0, "engine": 70.0, "probes": 8.0,
                    "status": 1.5}
    bare = nr.bare_parts({"started": 0.0, "container_started": 1.0, "runtime_ready": 69.0, "observed": 69.25})
    assert bare == {"total": 69.25, "to container": 1.0, "engine": 68.0}
    diff = nr.difference([node], [bare])
    assert diff["container start"] == 3.0 and diff["engine start"] == 2.0
    assert (diff["probes"], diff["status"]) == (8.0, 1.5)
    assert diff["total"] == 83.5 - 69.25
    assert diff["rest"] == pytest.approx(diff["total"] - 3.0 - 2.0 - 8.0 - 1.5)


def test_the_report_names_each_pair_the_difference_and_the_verdict():
    node = [{"total": 90.0, "to pod": 1.0, "to container": 4.0, "engine": 75.0, "probes": 9.0, "status": 1.0}] * 3
    bare = [{"total": 80.0, "to container": 1.0, "engine": 78.0}] * 3
    ratios = nr.pair_ratios([n["total"] for n in node], [b["total"] for b in bare])
    report = {"bare_kind": "ctr run", "order": nr.alternation(3), "node": node, "bare": bare, "ratios": ratios,
              "difference": nr.difference(node, bare), "verdict": nr.goal_verdict(ratios).as_dict()}
    text = nr.format_report(report)
    assert "pair 2: node   90.0s" in text and "node/bare 1.12" in text
    assert "probes +9.0s" in text
    assert text.splitlines()[-1].startswith("- node <= 1.2 x bare: met (range 1.12-1.12 over 3 samples")
