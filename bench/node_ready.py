#!/usr/bin/env python3
"""apply -> Ready on a real kubelet against the same image's runtime started bare, in one run.

Run (root, the real node of ../shared/node; tests/node/README.md):
    python bench/node_ready.py [--rounds 3] [--json] [--port-base 21000] [--work-dir DIR]

Set-up as the real-node tier does it (tests/node/node_harness.py): ``images/build.sh operator
cpu`` (cached), the local control plane (../shared/k8s) and the real node, both images imported,
the chart installed with the operator's image, the tiny model written by a pod of the CPU image.
Then rounds alternate (ABBA: node, bare, bare, node, ...):

- **node**: ``examples/cpu-tiny.yaml`` (with the model's node directory and the node's placement,
  as tests/node applies it) applied into a fresh namespace; timed from the apply to the resource's
  ``phase: Ready`` (polled). The pod's and Deployment's timestamps (whole seconds), the runtime's
  own Ready moment (``/state`` ``since``) and the pod's Ready condition split it up.
- **bare**: the same CPU image's runtime, ``ascend-llm run`` with the same engine config (the
  ConfigMap the operator wrote in the first node round, as the pod saw it), started by
  ``ctr run`` in the node's containerd with the pod's command, user, mounts (the model's node
  directory, the config as files, the emptyDirs as fresh directories and a tmpfs), memory limit and
  the node's network namespace; timed from ``ctr run`` to ``/ready`` 200 (polled). No kubelet, no
  operator, no probes, no ConfigMap volume: what is left is the image's runtime and engine.

Each node round is deleted and its containers gone, each bare container stopped (SIGTERM, then
removed), before the next round starts. Figures: seconds of each side per round, node / bare per
pair, and the parts of the difference (medians): before the container runs (operator,
controllers, scheduling, sandbox and network, volumes, image start) against bare's ``ctr run``;
the engine's own start in the pod against bare; the kubelet's probes (runtime Ready -> pod Ready);
the operator's status (pod Ready -> resource Ready). Goal: node <= 1.2 x bare, judged on the range
of the per-pair ratios (bench/verdict.py). Exit status 0 the run completed (the goal is reported,
not enforced), 1 a measurement failed, 2 bad arguments. Every wait is bounded and everything
started is stopped. The pure parts (``alternation``, ``pair_ratios``, ``memory_bytes``,
``bare_container``, ``ctr_run_argv``, ``node_parts``, ``bare_parts``, ``difference``,
``goal_verdict``, ``format_report``) are tested by tests/unit/test_node_ready_bench.py.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import yaml

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
sys.path.insert(0, str(BENCH))
from verdict import Direction, Verdict, judge  # noqa: E402

GOAL_RATIO = 1.2
#: Seconds one side may take to Ready before the measurement fails.
READY_DEADLINE_S = 600.0
POLL_S = 0.5
RUNTIME_PORT = 8080
#: The containerd container id prefix of the bare rounds (kubelet's CRI ignores containers it did not make).
BARE_PREFIX = "ascend-llm-bare"


class BenchError(RuntimeError):
    pass


# --------------------------------------------------------------------------- pure parts
def alternation(rounds: int) -> list[str]:
    """node, bare, bare, node, node, bare, ...: pairs alternate which side goes first (a drift of the
    machine falls on both sides alike); the first round is a node round (it yields the config)."""

    if rounds < 1:
        raise ValueError(f"--rounds must be at least 1, got {rounds}")
    order: list[str] = []
    for index in range(rounds):
        order.extend(("node", "bare") if index % 2 == 0 else ("bare", "node"))
    return order


def pair_ratios(node: Sequence[float], bare: Sequence[float]) -> list[float]:
    """node / bare for the i-th round of each side."""

    if len(node) != len(bare):
        raise ValueError(f"{len(node)} node rounds but {len(bare)} bare rounds; they must pair up")
    if any(value <= 0 for value in bare):
        raise ValueError("a bare round took no time; no ratio can be formed")
    return [n / b for n, b in zip(node, bare)]


def goal_verdict(ratios: Sequence[float]) -> Verdict:
    return judge(ratios, GOAL_RATIO, Direction.AT_MOST)


_QUANTITY = re.compile(r"^(\d+(?:\.\d+)?)(Ki|Mi|Gi|Ti|k|M|G|T)?$")
_FACTORS = {None: 1, "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12,
            "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40}


def memory_bytes(quantity: str) -> int:
    """Bytes of a Kubernetes memory quantity (``8Gi``, ``512M``, ``1000``)."""

    match = _QUANTITY.match(str(quantity).strip())
    if not match:
        raise ValueError(f"not a memory quantity: {quantity!r}")
    return int(float(match.group(1)) * _FACTORS[match.group(2)])


@dataclass
class BareContainer:
    """What ``ctr run`` needs to start the pod's engine container without a kubelet."""

    image: str
    command: list[str]
    user: str
    env: dict[str, str]
    #: (source on the node, destination in the container, read-only)
    binds: list[tuple[str, str, bool]]
    tmpfs: list[str]
    memory_limit: int | None
    #: Files to write before the start: path on the node -> content (the ConfigMaps' keys).
    files: dict[str, str] = field(default_factory=dict)
    #: Directories to make (owned by the container's user): the pod's emptyDirs.
    dirs: list[str] = field(default_factory=list)


def bare_container(pod_spec: Mapping[str, Any], config_maps: Mapping[str, Mapping[str, str]], work: Path,
                   container_id: str, container: str = "engine") -> BareContainer:
    """The pod's ``container`` as a plain container: its image, command, user, plain env, memory
    limit and mounts, with each volume turned into something ``ctr run`` mounts: a ConfigMap (or a
    projection of ConfigMaps) into files under ``work``, an emptyDir into a fresh directory (a
    tmpfs for ``medium: Memory``), a hostPath as itself. Downward-API env gets the container id
    for the pod name and 127.0.0.1 for IPs; other ``valueFrom`` env and other volume kinds are
    refused (this bench's resource has none)."""

    (spec,) = [c for c in pod_spec["containers"] if c["name"] == container]
    security = {**(pod_spec.get("securityContext") or {}), **(spec.get("securityContext") or {})}
    user = f"{security.get('runAsUser', 0)}:{security.get('runAsGroup', security.get('runAsUser', 0))}"
    env: dict[str, str] = {}
    for item in spec.get("env") or []:
        if "value" in item:
            env[item["name"]] = item["value"]
            continue
        field_path = ((item.get("valueFrom") or {}).get("fieldRef") or {}).get("fieldPath")
        if field_path == "metadata.name":
            env[item["name"]] = container_id
        elif field_path in ("status.podIP", "status.hostIP"):
            env[item["name"]] = "127.0.0.1"
        else:
            raise ValueError(f"env {item['name']}: only plain values and the pod's name or IP are supported")
    volumes = {v["name"]: v for v in pod_spec.get("volumes") or []}
    bare = BareContainer(image=spec["image"], command=[*spec.get("command", []), *spec.get("args", [])], user=user,
                         env=env, binds=[], tmpfs=[], memory_limit=None)
    limit = ((spec.get("resources") or {}).get("limits") or {}).get("memory")
    if limit is not None:
        bare.memory_limit = memory_bytes(limit)
    for mount in spec.get("volumeMounts") or []:
        volume = volumes[mount["name"]]
        read_only = bool(mount.get("readOnly"))
        if "configMap" in volume or "projected" in volume:
            sources = ([{"configMap": volume["configMap"]}] if "configMap" in volume
                       else volume["projected"]["sources"])
            directory = work / "volumes" / mount["name"]
            for source in sources:
                ref = source.get("configMap")
                if ref is None:
                    raise ValueError(f"volume {mount['name']}: only ConfigMap projections are supported")
                data = config_maps.get(ref["name"])
                if data is None:
                    if ref.get("optional"):
                        continue
                    raise ValueError(f"volume {mount['name']}: ConfigMap {ref['name']} was not captured")
                items = ref.get("items") or [{"key": key, "path": key} for key in data]
                for item in items:
                    bare.files[str(directory / item["path"])] = data[item["key"]]
            bare.dirs.append(str(directory))
            bare.binds.append((str(directory), mount["mountPath"], True))
        elif "emptyDir" in volume:
            if (volume["emptyDir"] or {}).get("medium") == "Memory":
                bare.tmpfs.append(mount["mountPath"])
            else:
                directory = work / "volumes" / mount["name"]
                bare.dirs.append(str(directory))
                bare.binds.append((str(directory), mount["mountPath"], read_only))
        elif "hostPath" in volume:
            bare.binds.append((volume["hostPath"]["path"], mount["mountPath"], read_only))
        else:
            raise ValueError(f"volume {mount['name']}: {sorted(volume)} is not supported by the bare start")
    return bare


def ctr_run_argv(ctr: Sequence[str], bare: BareContainer, container_id: str, log: Path) -> list[str]:
    """``ctr run -d`` of ``bare`` in the node's network namespace (``--net-host``: containerd's own,
    the node's), its output to ``log``."""

    argv = [*ctr, "run", "-d", "--net-host", "--user", bare.user, "--log-uri", f"file://{log}"]
    if bare.memory_limit is not None:
        argv += ["--memory-limit", str(bare.memory_limit)]
    for key, value in sorted(bare.env.items()):
        argv += ["--env", f"{key}={value}"]
    for source, destination, read_only in bare.binds:
        argv += ["--mount", f"type=bind,src={source},dst={destination},options=rbind:{'ro' if read_only else 'rw'}"]
    for destination in bare.tmpfs:
        argv += ["--mount", f"type=tmpfs,src=tmpfs,dst={destination},options=nosuid:nodev:mode=1777"]
    return [*argv, bare.image, container_id, *bare.command]


def api_time(stamp: str) -> float:
    """Unix time of an API timestamp (RFC 3339, whole seconds)."""

    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def node_parts(timeline: Mapping[str, float]) -> dict[str, float]:
    """A node round's parts, seconds, from its moments (Unix times): ``applied``, ``pod_created``,
    ``container_started``, ``runtime_ready``, ``pod_ready``, ``resource_ready``."""

    return {
        "total": timeline["resource_ready"] - timeline["applied"],
        "to pod": timeline["pod_created"] - timeline["applied"],
        "to container": timeline["container_started"] - timeline["applied"],
        "engine": timeline["runtime_ready"] - timeline["container_started"],
        "probes": timeline["pod_ready"] - timeline["runtime_ready"],
        "status": timeline["resource_ready"] - timeline["pod_ready"],
    }


def bare_parts(timeline: Mapping[str, float]) -> dict[str, float]:
    """A bare round's parts from ``started`` (ctr run called), ``container_started`` (it returned),
    ``runtime_ready`` (``/state`` ``since``) and ``observed`` (``/ready`` 200 seen)."""

    return {
        "total": timeline["observed"] - timeline["started"],
        "to container": timeline["container_started"] - timeline["started"],
        "engine": timeline["runtime_ready"] - timeline["container_started"],
    }


def difference(node: Sequence[Mapping[str, float]], bare: Sequence[Mapping[str, float]]) -> dict[str, float]:
    """What node - bare is made of, from the medians of each side's parts: the container's start
    (everything before the engine container runs, against ``ctr run``), the engine's start in
    it, the kubelet's probes, the operator's status; ``rest`` is what those leave of the totals'
    difference (polling, and the medians of sums not being sums of medians)."""

    def median(rounds: Sequence[Mapping[str, float]], key: str) -> float:
        return statistics.median(r[key] for r in rounds)

    parts = {
        "container start": median(node, "to container") - median(bare, "to container"),
        "engine start": median(node, "engine") - median(bare, "engine"),
        "probes": median(node, "probes"),
        "status": median(node, "status"),
    }
    parts["rest"] = median(node, "total") - median(bare, "total") - sum(parts.values())
    parts["total"] = median(node, "total") - median(bare, "total")
    return parts


def format_report(report: Mapping[str, Any]) -> str:
    node, bare = report["node"], report["bare"]
    lines = [f"apply -> Ready on the real node against the image's runtime started bare ({report['bare_kind']}), "
             f"{len(node)} pairs, order {' '.join(report['order'])}"]
    for index, (n, b) in enumerate(zip(node, bare)):
        lines.append(f"  pair {index}: node {n['total']:6.1f}s (to pod {n['to pod']:.0f}, to container "
                     f"{n['to container']:.0f}, engine {n['engine']:.1f}, probes {n['probes']:.1f}, status "
                     f"{n['status']:.1f})  bare {b['total']:6.1f}s (to container {b['to container']:.1f}, engine "
                     f"{b['engine']:.1f})  node/bare {report['ratios'][index]:.2f}")
    if node and bare:
        lines.append(f"  median: node {statistics.median(n['total'] for n in node):.1f}s, bare "
                     f"{statistics.median(b['total'] for b in bare):.1f}s")
        lines.append("  the difference (medians): " + ", ".join(
            f"{key} {value:+.1f}s" for key, value in report["difference"].items()))
    verdict = report["verdict"]
    lines += ["Goals:", f"- node <= {GOAL_RATIO} x bare: {verdict['outcome']} ({verdict['reason']})"]
    return "\n".join(lines)


# --------------------------------------------------------------------------- the run
sys.path.insert(0, str(ROOT / "tests" / "node"))


def _harness() -> Any:
    import node_harness  # tests/node: it puts tests/cluster on sys.path

    return node_harness


def start_control_plane(workdir: Path, port_base: int) -> str:
    pack = Path(os.environ.get("ASCEND_LLM_K8S_PACK") or ROOT.parent / "shared" / "k8s")
    workdir.mkdir(parents=True, exist_ok=True)
    up = subprocess.run(["bash", str(pack / "up.sh"), str(workdir), "--port-base", str(port_base)],
                        capture_output=True, text=True, timeout=300, check=False)
    if up.returncode != 0:
        raise BenchError(f"../shared/k8s up.sh failed (exit {up.returncode}):\n{up.stderr[-4000:]}")
    return up.stdout.strip().splitlines()[-1].split("=", 1)[1]


def stop_control_plane(workdir: Path) -> None:
    pack = Path(os.environ.get("ASCEND_LLM_K8S_PACK") or ROOT.parent / "shared" / "k8s")
    subprocess.run(["bash", str(pack / "down.sh"), str(workdir), "--wipe"], capture_output=True, timeout=120,
                   check=False)


def get_json(node: Any, *args: str) -> dict[str, Any]:
    result = node.kubectl.run("get", *args, "-o", "json", check=False)
    return json.loads(result.stdout) if result.returncode == 0 else {}


def runtime_state(node: Any, host: str) -> dict[str, Any] | None:
    code, body = node.http(f"http://{host}:{RUNTIME_PORT}/state", timeout_s=5)
    return json.loads(body) if code == 200 else None


def condition_time(pod: Mapping[str, Any], kind: str) -> float:
    (condition,) = [c for c in pod["status"]["conditions"] if c["type"] == kind]
    return api_time(condition["lastTransitionTime"])


@dataclass
class Capture:
    pod_spec: dict[str, Any] | None = None
    config_maps: dict[str, dict[str, str]] = field(default_factory=dict)


def node_round(node: Any, harness: Any, model: Path, index: int, capture: Capture) -> dict[str, float]:
    namespace = f"nodeready-{index}-{uuid.uuid4().hex[:4]}"
    node.kubectl.run("create", "namespace", namespace)
    deadline = time.monotonic() + 30
    while node.kubectl.run("get", "serviceaccount", "default", "-n", namespace, check=False).returncode != 0:
        if time.monotonic() > deadline:
            raise BenchError(f"no ServiceAccount default in {namespace}")
        time.sleep(0.5)
    resource = harness.user_resource(namespace, model)
    name = resource["metadata"]["name"]
    try:
        applied = time.time()
        node.kubectl.run("apply", "-f", "-", stdin=yaml.safe_dump(resource))
        deadline = time.monotonic() + READY_DEADLINE_S
        pod: dict[str, Any] = {}
        while True:
            status = get_json(node, "ald", name, "-n", namespace).get("status", {})
            if status.get("phase") == "Ready":
                resource_ready = time.time()
                break
            if not pod:
                pods = get_json(node, "pods", "-n", namespace, "-l", f"app.kubernetes.io/instance={name}")
                pod = (pods.get("items") or [{}])[0]
                if pod and capture.pod_spec is None:
                    capture.pod_spec = pod["spec"]
                    for volume in pod["spec"].get("volumes") or []:
                        refs = ([volume["configMap"]] if "configMap" in volume else
                                [s["configMap"] for s in (volume.get("projected") or {}).get("sources", [])
                                 if "configMap" in s])
                        for ref in refs:
                            data = get_json(node, "configmap", ref["name"], "-n", namespace).get("data")
                            if data is not None:
                                capture.config_maps[ref["name"]] = data
            if time.monotonic() > deadline:
                raise BenchError(f"{name} in {namespace} not Ready after {READY_DEADLINE_S:.0f}s: {status}")
            time.sleep(POLL_S)
        (pod,) = [p for p in get_json(node, "pods", "-n", namespace, "-l",
                                      f"app.kubernetes.io/instance={name}")["items"]
                  if not p["metadata"].get("deletionTimestamp")]
        state = runtime_state(node, pod["status"]["podIP"])
        if not state or not state.get("ready"):
            raise BenchError(f"the pod's runtime is not ready although the resource is: {state}")
        (engine,) = [c for c in pod["status"]["containerStatuses"] if c["name"] == "engine"]
        if engine["restartCount"]:
            raise BenchError(f"the engine container restarted {engine['restartCount']} times")
        timeline = {"applied": applied, "pod_created": api_time(pod["metadata"]["creationTimestamp"]),
                    "container_started": api_time(engine["state"]["running"]["startedAt"]),
                    "runtime_ready": state["since"], "pod_ready": condition_time(pod, "Ready"),
                    "resource_ready": resource_ready}
        parts = node_parts(timeline)
        parts["mode"] = state.get("mode")  # type: ignore[assignment]
        parts["fallbacks"] = state.get("fallbacks", 0)
        return parts
    finally:
        node.kubectl.run("delete", "ald", name, "-n", namespace, "--wait", "--timeout=180s", check=False)
        node.kubectl.run("delete", "namespace", namespace, "--wait=false", check=False)
        harness.wait_gone(node, namespace)


def ctr_command(node: Any) -> list[str]:
    return node.env["REALNODE_CTR"].split()


def stop_bare(node: Any, container_id: str) -> None:
    ctr = ctr_command(node)
    subprocess.run([*ctr, "task", "kill", "--signal", "SIGTERM", container_id], capture_output=True, timeout=30,
                   check=False)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        listed = subprocess.run([*ctr, "task", "ls"], capture_output=True, text=True, timeout=30, check=False).stdout
        if not any(line.split()[:1] == [container_id] and "RUNNING" in line for line in listed.splitlines()):
            break
        time.sleep(1.0)
    subprocess.run([*ctr, "task", "delete", "--force", container_id], capture_output=True, timeout=60, check=False)
    subprocess.run([*ctr, "containers", "delete", container_id], capture_output=True, timeout=60, check=False)


def bare_round(node: Any, capture: Capture, work: Path, index: int) -> dict[str, float]:
    if capture.pod_spec is None:
        raise BenchError("no pod spec captured: a node round must come first")
    container_id = f"{BARE_PREFIX}-{index}-{uuid.uuid4().hex[:4]}"
    round_dir = work / container_id
    bare = bare_container(capture.pod_spec, capture.config_maps, round_dir, container_id)
    uid, gid = (int(part) for part in bare.user.split(":"))
    for directory in bare.dirs:
        Path(directory).mkdir(parents=True, exist_ok=True)
        os.chown(directory, uid, gid)
    for path, content in bare.files.items():
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text(content, encoding="utf-8")
        Path(path).chmod(0o644)
    log = round_dir / "container.log"
    started = time.time()
    result = subprocess.run(ctr_run_argv(ctr_command(node), bare, container_id, log), capture_output=True,
                            text=True, timeout=300, check=False)
    container_started = time.time()
    try:
        if result.returncode != 0:
            raise BenchError(f"ctr run failed (exit {result.returncode}): {result.stderr[-2000:]}")
        deadline = time.monotonic() + READY_DEADLINE_S
        while True:
            code, _ = node.http(f"http://127.0.0.1:{RUNTIME_PORT}/ready", timeout_s=5)
            if code == 200:
                observed = time.time()
                break
            if time.monotonic() > deadline:
                tail = log.read_text(errors="replace")[-3000:] if log.exists() else ""
                raise BenchError(f"the bare runtime not ready after {READY_DEADLINE_S:.0f}s:\n{tail}")
            time.sleep(POLL_S)
        state = runtime_state(node, "127.0.0.1")
        if not state or not state.get("ready"):
            raise BenchError(f"/ready said 200 but /state says {state}")
        parts = bare_parts({"started": started, "container_started": container_started,
                            "runtime_ready": state["since"], "observed": observed})
        parts["mode"] = state.get("mode")  # type: ignore[assignment]
        parts["fallbacks"] = state.get("fallbacks", 0)
        return parts
    finally:
        stop_bare(node, container_id)


def run(rounds: int, port_base: int, work: Path) -> dict[str, Any]:
    harness = _harness()
    reason = harness.why_no_node()
    if reason:
        raise BenchError(reason)
    from install_harness import tool  # tests/cluster, on sys.path through node_harness

    work.mkdir(parents=True, exist_ok=True)
    control_plane = ROOT / ".cache" / "k8s"
    node_workdir = Path(os.environ.get("ASCEND_LLM_NODE_WORKDIR") or ROOT / ".cache" / "node")
    setup_started = time.monotonic()
    images = harness.build_images()
    kubeconfig = start_control_plane(control_plane, port_base)
    try:
        node = harness.start_node(control_plane, node_workdir, images, tool("kubectl"), tool("helm4"), kubeconfig)
        try:
            model_root = node_workdir.parent / "node-models"
            model_root.mkdir(parents=True, exist_ok=True)
            os.chown(model_root, 1000, 1000)
            release = harness.install_operator(node, images, "ascend-llm", f"llm-system-{uuid.uuid4().hex[:4]}",
                                               model_root)
            try:
                model = harness.write_tiny_model(node, release.namespace, images.cpu_ref, model_root)
                setup_s = time.monotonic() - setup_started
                print(f"set-up {setup_s:.0f}s", file=sys.stderr)
                capture = Capture()
                results: dict[str, list[dict[str, float]]] = {"node": [], "bare": []}
                order = alternation(rounds)
                for index, side in enumerate(order):
                    load = os.getloadavg()[0]
                    parts = (node_round(node, harness, model, index, capture) if side == "node"
                             else bare_round(node, capture, work, index))
                    parts["load"] = load
                    results[side].append(parts)
                    print(f"round {index} {side}: {parts['total']:.1f}s {parts}", file=sys.stderr)
            finally:
                harness.uninstall_operator(node, release)
        finally:
            harness.stop_node(node_workdir)
    finally:
        stop_control_plane(control_plane)
    ratios = pair_ratios([r["total"] for r in results["node"]], [r["total"] for r in results["bare"]])
    return {"bare_kind": "ctr run of the CPU image in the node's containerd", "order": order,
            "setup_s": setup_s, "node": results["node"], "bare": results["bare"], "ratios": ratios,
            "difference": difference(results["node"], results["bare"]),
            "verdict": goal_verdict(ratios).as_dict(), "image": images.cpu_ref}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3, help="pairs of rounds (node and bare each)")
    parser.add_argument("--port-base", type=int, default=int(os.environ.get("ASCEND_LLM_K8S_PORT_BASE", "20000")))
    parser.add_argument("--work-dir", type=Path, default=ROOT / ".cache" / "node-ready")
    parser.add_argument("--json", action="store_true", help="print the report as JSON too")
    args = parser.parse_args(argv)
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")
    # A SIGTERM (a timeout) unwinds like an error: the node, the control plane and any bare
    # container are stopped by the finally blocks.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    try:
        report = run(args.rounds, args.port_base, args.work_dir)
    except RuntimeError as error:  # BenchError, or a set-up step (NodeSetupError)
        print(f"node_ready: {error}", file=sys.stderr)
        return 1
    finally:
        shutil.rmtree(args.work_dir, ignore_errors=True)
    print(format_report(report))
    if args.json:
        print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
