"""Two real `ascend-llm run` processes on localhost as one multi-node group (backend mp).

A leader (``LWS_WORKER_INDEX=0``) and a worker (``LWS_WORKER_INDEX=1``) supervise the fake
engine (tests/fakes/fake_engine.py; the worker runs its ``serve --headless`` form). Covers: the
worker waits for the leader's graph mode and launches the headless worker command (start rank,
leader address); a capture failure on the leader makes it fall back to EAGER and the worker
relaunches in EAGER, uncounted; a killed leader engine is relaunched by the leader and the
worker relaunches for the new engine; a crash of the worker's own process ends the worker (the
LeaderWorkerSet recreates the group); readiness is the group's; SIGTERM to both -> both exit 0; a pod whose LeaderWorkerSet
variables contradict the config exits 2. Backend ray with a stand-in for `ray` (CLI and
module): the leader starts the head before it publishes a mode, waits for the worker's
`ray start --block`, then launches the engine; a failing pre-command is a failed launch naming
the command and its output. What the real vLLM does with these command lines is in
tests/engine/test_multinode_cpu.py.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path

from runtime_harness import FAKE_ENGINE, REPO

CAPTURE_LOG = REPO / "tests/data/reference-fixtures/vllm-logs/capture-207005-alloc-sqcq-issue2629.log"

GROUP = {
    "engine": {"parallel": {"data": 2}},
    "warmup": {"enabled": False},
    "distributed": {
        "nodes": 2,
        "backend": "mp",
        "npusPerNode": 1,
        "leaderAddress": "127.0.0.1",
        "workerCommand": [sys.executable, str(FAKE_ENGINE), "serve"],
    },
}
LWS = {"LWS_GROUP_SIZE": "2", "LWS_LEADER_ADDRESS": "127.0.0.1", "POD_IP": "127.0.0.1"}


def is_ready(state: dict) -> bool:
    return state["phase"] == "Ready" and state["ready"]


def start_group(runtime_factory, leader_env: dict[str, str] | None = None,
                worker_env: dict[str, str] | None = None):
    """The leader first (the worker's config needs the leader's runtime port), then the worker."""
    leader = runtime_factory(GROUP, {**LWS, "LWS_WORKER_INDEX": "0", **(leader_env or {})})
    worker_config = {**GROUP, "distributed": {**GROUP["distributed"], "leaderRuntimePort": leader.port}}
    worker = runtime_factory(worker_config, {**LWS, "LWS_WORKER_INDEX": "1", **(worker_env or {})})
    return leader, worker


def option(argv: list[str], name: str) -> str:
    return argv[argv.index(name) + 1]


def test_worker_follows_the_leaders_fallback_and_engine_relaunch(runtime_factory):
    # The leader's first rung fails only after 5 s, longer than the worker's 2 s poll: the
    # worker sees PIECEWISE first and must then follow the fallback.
    leader, worker = start_group(
        runtime_factory,
        leader_env={"FAKE_ENGINE_CAPTURE_FAIL": str(CAPTURE_LOG), "FAKE_ENGINE_CAPTURE_FAIL_AFTER_S": "5"},
    )
    first = worker.wait_for(lambda s: s["engineRestarts"] == 0 and len(worker.launches()) >= 1
                            and s["leaderMode"] == "PIECEWISE", 20, "the worker's launch for PIECEWISE")
    assert first["role"] == "worker"
    assert first["leader"] == f"http://127.0.0.1:{leader.port}/state"
    assert not first["ready"]  # the leader is still starting
    headless = worker.launches()[0]
    assert headless[:2] == ["serve", "fake-model"]
    assert "--headless" in headless
    assert option(headless, "--data-parallel-start-rank") == "1"
    assert option(headless, "--data-parallel-address") == "127.0.0.1"
    assert option(headless, "--data-parallel-size-local") == "1"
    assert "--enforce-eager" not in headless

    leader_state = leader.wait_for(is_ready, 30, "the leader Ready after its fallback")
    assert leader_state["role"] == "leader"
    assert (leader_state["mode"], leader_state["fallbacks"]) == ("EAGER", 1)
    leader_argv = leader.launches()[-1]
    assert "--headless" not in leader_argv
    assert option(leader_argv, "--data-parallel-address") == "127.0.0.1"
    assert "--data-parallel-start-rank" not in leader_argv

    state = worker.wait_for(lambda s: is_ready(s) and s["leaderMode"] == "EAGER", 20, "the worker Ready in EAGER")
    assert state["mode"] == "EAGER"
    assert state["engineRestarts"] == 0  # following the leader is not a failure of the worker
    assert state["warmup"]["outcome"] == "pending"  # the leader's warmup drives the group
    launches = worker.launches()
    assert len(launches) == 2
    assert "--enforce-eager" in launches[1]
    assert worker.probe("ready") == 200

    # The leader's engine dies: the leader relaunches it, the worker relaunches for the new one.
    old_pid = leader_state["enginePid"]
    os.killpg(old_pid, signal.SIGKILL)
    leader_state = leader.wait_for(lambda s: is_ready(s) and s["enginePid"] not in (None, old_pid), 30,
                                   "the leader Ready with a new engine")
    assert leader_state["engineRestarts"] == 1
    state = worker.wait_for(lambda s: is_ready(s) and len(worker.launches()) == 3, 20,
                            "the worker relaunched for the new leader engine")
    assert state["engineRestarts"] == 0
    assert "--enforce-eager" in worker.launches()[2]

    # SIGTERM to both, as when the group is deleted.
    leader.process.send_signal(signal.SIGTERM)
    worker.process.send_signal(signal.SIGTERM)
    assert leader.process.wait(timeout=30) == 0
    assert worker.process.wait(timeout=30) == 0


def test_a_worker_whose_engine_dies_exits_so_the_group_is_recreated(runtime_factory):
    leader, worker = start_group(runtime_factory, leader_env={"FAKE_ENGINE_STARTUP_S": "4"},
                                 worker_env={"FAKE_ENGINE_CRASH_ONCE_AFTER_S": "10"})
    # The worker's engine runs the leader's mode, but the leader is not serving yet.
    state = worker.wait_for(lambda s: s["leaderMode"] is not None and s["enginePid"] is not None, 20,
                            "the worker's first launch")
    assert not state["ready"]
    assert worker.probe("ready") == 503
    worker.wait_for(is_ready, 30, "the worker Ready with its group")
    # Its engine dies: a relaunched rank cannot rejoin the running group, so the pod exits.
    assert worker.process.wait(timeout=30) == 4  # EXIT_CRASHED: it had served
    assert len(worker.launches()) == 1
    assert "exiting so that the LeaderWorkerSet recreates the group" in worker.log_path.read_text()
    assert leader.state()["engineRestarts"] == 0  # the leader's engine was never touched


def test_a_pod_that_cannot_join_its_group_exits_2_naming_the_variable(runtime_factory):
    runtime = runtime_factory(GROUP, {**LWS, "LWS_WORKER_INDEX": "0", "LWS_GROUP_SIZE": "3"})
    assert runtime.process.wait(timeout=30) == 2  # EXIT_CONFIG, before any launch
    assert "LWS_GROUP_SIZE=3 but distributed.nodes is 2" in runtime.log_path.read_text()
    assert runtime.launches() == []


# -- backend ray, with a stand-in for Ray ----------------------------------------------------
# `ray start` and `import ray` are replaced (PATH and PYTHONPATH) by the two scripts below,
# which keep the cluster as files in FAKE_RAY_DIR: the head, and one file per joined node
# that lives as long as its `ray start --block`.

FAKE_RAY_CLI = '''#!{python}
import json, os, signal, sys, time
from pathlib import Path
state = Path(os.environ["FAKE_RAY_DIR"])
with open(state / "calls.jsonl", "a") as handle:
    handle.write(json.dumps(sys.argv[1:]) + "\\n")
args = sys.argv[1:]
if args[:2] == ["start", "--head"]:
    if os.environ.get("FAKE_RAY_HEAD_FAIL"):
        print("ConnectionError: Ray is trying to start at 127.0.0.1:6379, but is already running")
        sys.exit(1)
    (state / "head").write_text("up")
    print("Ray runtime started.")
    sys.exit(0)
if args[:1] == ["start"] and "--block" in args:
    if not (state / "head").exists():
        print("ConnectionError: could not reach the GCS at " + args[args.index("--address") + 1])
        sys.exit(1)
    node = state / f"node-{{os.getpid()}}"
    node.write_text("alive")
    signal.signal(signal.SIGTERM, lambda *_: (node.unlink(missing_ok=True), sys.exit(0)))
    print("Ray runtime started. --block: this process runs until it is stopped.", flush=True)
    while True:
        time.sleep(1)
sys.exit(f"fake ray: unsupported {{args}}")
'''

FAKE_RAY_MODULE = '''
import os
from pathlib import Path

def init(address=None, logging_level=None):
    pass

def shutdown():
    pass

def nodes():
    state = Path(os.environ["FAKE_RAY_DIR"])
    heads = [{"Alive": True}] if (state / "head").exists() else []
    return heads + [{"Alive": True} for _ in state.glob("node-*")]
'''


def fake_ray_env(tmp_path) -> dict[str, str]:
    state = tmp_path / "ray-state"
    bin_dir, module_dir = tmp_path / "ray-bin", tmp_path / "ray-module" / "ray"
    for directory in (state, bin_dir, module_dir):
        directory.mkdir(parents=True)
    cli = bin_dir / "ray"
    cli.write_text(FAKE_RAY_CLI.format(python=sys.executable))
    cli.chmod(0o755)
    (module_dir / "__init__.py").write_text(FAKE_RAY_MODULE)
    return {
        "FAKE_RAY_DIR": str(state),
        "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
        "PYTHONPATH": os.pathsep.join(filter(None, [str(module_dir.parent), os.environ.get("PYTHONPATH")])),
    }


RAY_GROUP = {
    "engine": {"parallel": {"tensor": 2}},
    "warmup": {"enabled": False},
    "distributed": {"nodes": 2, "backend": "ray", "npusPerNode": 1, "leaderAddress": "127.0.0.1"},
}


def ray_calls(env: dict[str, str]) -> list[list[str]]:
    path = os.path.join(env["FAKE_RAY_DIR"], "calls.jsonl")
    with open(path, encoding="utf-8") as handle:
        return [json.loads(line) for line in handle]


def test_ray_leader_starts_the_head_waits_for_the_worker_then_the_engine(runtime_factory, tmp_path):
    ray = fake_ray_env(tmp_path)
    leader = runtime_factory(RAY_GROUP, {**LWS, **ray, "LWS_WORKER_INDEX": "0"})
    waiting = leader.wait_for(lambda s: s["message"] and s["message"].startswith("waiting for 1 worker"), 20,
                              "the leader waiting for its worker")
    assert waiting["enginePid"] is None and leader.launches() == []  # no engine before the group is whole
    worker_config = {**RAY_GROUP, "distributed": {**RAY_GROUP["distributed"], "leaderRuntimePort": leader.port}}
    worker = runtime_factory(worker_config, {**LWS, **ray, "LWS_WORKER_INDEX": "1"})
    leader.wait_for(is_ready, 30, "the leader Ready")
    state = worker.wait_for(is_ready, 20, "the worker Ready")
    assert state["engineRestarts"] == 0
    assert worker.launches() == []  # a Ray worker runs no engine of its own
    assert ray_calls(ray) == [
        ["start", "--head", "--port", "6379", "--node-ip-address", "127.0.0.1"],
        ["start", "--address", "127.0.0.1:6379", "--node-ip-address", "127.0.0.1", "--block"],
    ]
    [engine_argv] = leader.launches()
    assert option(engine_argv, "--distributed-executor-backend") == "ray"
    leader.process.send_signal(signal.SIGTERM)
    worker.process.send_signal(signal.SIGTERM)
    assert leader.process.wait(timeout=30) == 0
    assert worker.process.wait(timeout=30) == 0
    assert list(Path(ray["FAKE_RAY_DIR"]).glob("node-*")) == []  # `ray start --block` was stopped


def test_a_failing_pre_command_is_a_failed_launch_naming_it(runtime_factory, tmp_path):
    ray = fake_ray_env(tmp_path)
    leader = runtime_factory({**RAY_GROUP, "runtime": {"restart": {"maxRestarts": 1}}},
                             {**LWS, **ray, "LWS_WORKER_INDEX": "0", "FAKE_RAY_HEAD_FAIL": "1"})
    assert leader.process.wait(timeout=30) == 3  # EXIT_START_FAILED
    log = leader.log_path.read_text()
    assert "pre-command `ray start --head --port 6379 --node-ip-address 127.0.0.1` exited with code 1" in log
    assert "Ray is trying to start at 127.0.0.1:6379, but is already running" in log
    assert len(ray_calls(ray)) == 2  # the launch and its one restart
    assert leader.launches() == []
