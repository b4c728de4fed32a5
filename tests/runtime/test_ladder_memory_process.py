"""The ladder against hanging captures, container restarts and transient failures.

The real `ascend-llm run` process with the fake engine: a graph capture that never finishes
steps down once its budget is spent; the rung and its reason survive a restart of the container
(a new runtime process with the same ``runtime.stateDir``, an emptyDir in a pod); memory running
out inside capture relaunches the same rung instead of demoting it; a relaunch waits (bounded)
for the pod's chips to free the stopped engine's memory.
"""

from __future__ import annotations

import os
import shutil
import signal
import time

from runtime_harness import REPO, is_ready, mode_of

LOGS = REPO / "tests/data/reference-fixtures/vllm-logs"
NPU_SMI = REPO / "tests/data/reference-fixtures/npu-smi"
CAPTURE_LOG = LOGS / "capture-207005-alloc-sqcq-issue2629.log"
CAPTURE_OOM_LOG = REPO / "tests/data/cann-logs/oom-inside-capture-composed.log"
NO_WARMUP = {"warmup": {"enabled": False}}


def test_a_capture_that_never_finishes_steps_down_after_its_budget(runtime_factory):
    runtime = runtime_factory({**NO_WARMUP, "graph": {"captureTimeoutS": 5}}, {"FAKE_ENGINE_CAPTURE_HANG": "1"})
    started = time.monotonic()
    state = runtime.wait_for(is_ready, 60, "Ready after the hung capture")
    assert 5 <= time.monotonic() - started < 30
    assert (state["mode"], state["fallbacks"], state["engineRestarts"]) == ("EAGER", 1, 0)
    assert state["fallbackKind"] == "capture_timeout"
    assert state["fallbackDeterministic"] is False  # a hang may not recur: nothing to remember
    assert "graph.captureTimeoutS (5 s)" in state["fallbackReason"]
    assert [mode_of(argv) for argv in runtime.launches()] == ["PIECEWISE", "EAGER"]


def test_a_start_budget_spent_after_capture_began_steps_down(runtime_factory):
    runtime = runtime_factory({**NO_WARMUP, "runtime": {"readyTimeoutS": 10}}, {"FAKE_ENGINE_CAPTURE_HANG": "1"})
    state = runtime.wait_for(is_ready, 60, "Ready after the start budget")
    assert (state["mode"], state["fallbacks"], state["engineRestarts"]) == ("EAGER", 1, 0)
    assert "after graph capture began" in state["fallbackReason"]


def test_the_rung_and_its_reason_survive_a_container_restart(runtime_factory, tmp_path):
    config = {**NO_WARMUP, "image": "registry/runtime:1", "runtime": {"stateDir": str(tmp_path / "pod-state")}}
    env = {"FAKE_ENGINE_CAPTURE_FAIL": str(CAPTURE_LOG), "FAKE_ENGINE_CAPTURE_FAIL_MODES": "PIECEWISE"}
    first = runtime_factory(config, env)
    before = first.wait_for(lambda s: is_ready(s) and s["mode"] == "EAGER", 60, "Ready in EAGER")
    # The kubelet restarts the container: the runtime is killed, the pod (and its emptyDir) stays.
    first.process.kill()
    first.process.wait(timeout=30)
    os.killpg(before["enginePid"], signal.SIGKILL)

    second = runtime_factory(config, env)
    state = second.wait_for(is_ready, 60, "Ready after the container restart")
    assert [mode_of(argv) for argv in second.launches()] == ["EAGER"]  # no second capture attempt
    assert (state["mode"], state["rung"], state["fallbacks"]) == ("EAGER", 1, 1)
    assert state["fallbackReason"] == before["fallbackReason"]
    assert state["fallbackDeterministic"] is True
    assert state["resumed"].startswith("rung 1 (EAGER), kept from this pod's previous container")

    other_image = runtime_factory({**config, "image": "registry/runtime:2"}, env)
    other_image.wait_for(is_ready, 60, "Ready with the new image")
    assert mode_of(other_image.launches()[0]) == "PIECEWISE"  # a new image tries the top again


def test_the_kept_mode_survives_a_restart_that_brings_the_remembered_start_mode(runtime_factory, tmp_path):
    # Seen on a real kubelet (tests/node/test_node_restarts.py): after a deterministic fallback the
    # operator remembers the mode and writes graph.startMode into the running pod's ConfigMap, so
    # the restarted container's ladder is shorter than the one the state file was written for.
    config = {**NO_WARMUP, "image": "registry/runtime:1", "runtime": {"stateDir": str(tmp_path / "pod-state")}}
    env = {"FAKE_ENGINE_CAPTURE_FAIL": str(CAPTURE_LOG), "FAKE_ENGINE_CAPTURE_FAIL_MODES": "PIECEWISE"}
    first = runtime_factory(config, env)
    before = first.wait_for(lambda s: is_ready(s) and s["mode"] == "EAGER", 60, "Ready in EAGER")
    first.process.kill()
    first.process.wait(timeout=30)
    os.killpg(before["enginePid"], signal.SIGKILL)

    second = runtime_factory({**config, "graph": {"startMode": "EAGER"}}, env)
    state = second.wait_for(is_ready, 60, "Ready after the container restart")
    assert [mode_of(argv) for argv in second.launches()] == ["EAGER"]
    # The pod's own record stays: it fell back once, from PIECEWISE, for this reason.
    assert (state["mode"], state["rung"], state["fallbacks"]) == ("EAGER", 0, 1)
    assert state["requestedMode"] == "PIECEWISE" and state["fallbackReason"] == before["fallbackReason"]
    assert state["resumed"].startswith("rung 0 (EAGER), kept from this pod's previous container")


def test_memory_running_out_inside_capture_relaunches_the_same_rung(runtime_factory):
    runtime = runtime_factory(NO_WARMUP, {"FAKE_ENGINE_CAPTURE_OOM_LOG": str(CAPTURE_OOM_LOG)})
    state = runtime.wait_for(lambda s: is_ready(s) and s["engineRestarts"] == 1, 60, "Ready after the OOM")
    assert (state["mode"], state["fallbacks"]) == ("PIECEWISE", 0)
    assert [mode_of(argv) for argv in runtime.launches()] == ["PIECEWISE", "PIECEWISE"]


def ascend_pod(tmp_path, npu_smi_sample: str) -> tuple[dict, object]:
    current = tmp_path / "npu-smi-now.txt"
    shutil.copy(NPU_SMI / npu_smi_sample, current)
    env = {"ASCEND_LLM_ASSUME_VERSIONS": "platform=ascend,vllm=0.23.0,vllm_ascend=0.23.0",
           "FAKE_NPU_SMI_OUTPUT": str(current), "ASCEND_VISIBLE_DEVICES": "0",
           "PATH": f"{REPO / 'tests/fakes'}{os.pathsep}{os.environ['PATH']}"}
    return env, current


def test_a_relaunch_waits_for_the_pods_chips_to_free_their_memory(runtime_factory, tmp_path):
    env, npu_smi_now = ascend_pod(tmp_path, "info-910b4-4chip-noproc-issue1401.txt")
    runtime = runtime_factory({**NO_WARMUP, "runtime": {"preflight": True, "deviceFreeWaitS": 60}}, env)
    state = runtime.wait_for(is_ready, 30, "Ready")
    # The engine dies; its memory is still held on NPU 0 (a process row on the pod's chip).
    shutil.copy(NPU_SMI / "info-910b3-8chip-issue6299.txt", npu_smi_now)
    os.killpg(state["enginePid"], signal.SIGKILL)
    waiting = runtime.wait_for(lambda s: "free the stopped engine's memory" in (s["message"] or ""), 20,
                               "the wait for the chips")
    assert "NPU 0 chip 0" in waiting["message"]
    time.sleep(3)
    assert len(runtime.launches()) == 1  # nothing launched into the busy chip
    shutil.copy(NPU_SMI / "info-910b4-4chip-noproc-issue1401.txt", npu_smi_now)
    state = runtime.wait_for(lambda s: is_ready(s) and s["engineRestarts"] == 1, 30, "Ready once the chip is free")
    assert len(runtime.launches()) == 2


def test_the_wait_for_the_chips_is_bounded(runtime_factory, tmp_path):
    env, npu_smi_now = ascend_pod(tmp_path, "info-910b4-4chip-noproc-issue1401.txt")
    runtime = runtime_factory({**NO_WARMUP, "runtime": {"preflight": True, "deviceFreeWaitS": 3}}, env)
    state = runtime.wait_for(is_ready, 30, "Ready")
    shutil.copy(NPU_SMI / "info-910b3-8chip-issue6299.txt", npu_smi_now)  # and it stays busy
    killed = time.monotonic()
    os.killpg(state["enginePid"], signal.SIGKILL)
    runtime.wait_for(lambda s: len(runtime.launches()) == 2, 30, "the relaunch after the bound")
    assert time.monotonic() - killed >= 3
