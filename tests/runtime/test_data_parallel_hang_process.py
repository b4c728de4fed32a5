"""A data-parallel engine with one stalled engine core, under the real `ascend-llm run` process.

The fake engine (tests/fakes/fake_engine.py) runs ``--data-parallel-size 2`` as vLLM's API server
does: ``/metrics`` carries one label set per engine (``engine="0"``, ``engine="1"``) and the
``X-data-parallel-rank`` header sends a completion to one engine. Engine 1 stalls (its requests
never finish, its token counter stops) while engine 0 keeps generating, so the pod's summed token
counter keeps advancing: liveness must still fail within ``health.hangTimeoutS``, naming engine 1.
With both engines generating it stays live.
"""

from __future__ import annotations

import concurrent.futures
import json
import os
import re
import signal
import time
import urllib.error
import urllib.request

from runtime_harness import http, is_ready

HANG_TIMEOUT_S = 10
#: The runtime reads the engine's /metrics every min(leak.sampleIntervalS, 5 s): every second here.
DATA_PARALLEL = {"warmup": {"enabled": False},
                 "health": {"hangTimeoutS": HANG_TIMEOUT_S, "leak": {"sampleIntervalS": 1}},
                 "engine": {"parallel": {"data": 2}}}
#: A poll to see the stall begin, one to see it reach the limit, and the probe's own poll.
POLL_SLACK_S = 3


def complete_on(runtime, rank: int, timeout: float = 30) -> int | None:
    """One completion on data-parallel engine ``rank``; None when it did not finish in time."""
    body = json.dumps({"model": "fake-model", "prompt": "hello", "max_tokens": 3}).encode()
    request = urllib.request.Request(f"{runtime.engine_url}/v1/completions", data=body, method="POST",
                                     headers={"content-type": "application/json",
                                              "X-data-parallel-rank": str(rank)})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status
    except urllib.error.HTTPError as error:
        return error.code
    except (ConnectionError, OSError):
        return None


def tokens_by_engine(runtime) -> dict[str, float]:
    _, text = http("GET", f"{runtime.engine_url}/metrics")
    return {match[0]: float(match[1]) for match in
            re.findall(r'vllm:generation_tokens_total\{engine="(\d+)"[^}]*\} (\S+)', text)}


def test_one_stalled_engine_of_two_fails_liveness_naming_it(runtime_factory):
    runtime = runtime_factory(DATA_PARALLEL, {"FAKE_ENGINE_HANG_AFTER": "0", "FAKE_ENGINE_HANG_ENGINES": "1"})
    runtime.wait_for(is_ready, 30, "Ready")
    assert "--data-parallel-size" in runtime.launches()[-1]
    assert runtime.probe("live") == 200  # idle is healthy
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        pool.submit(complete_on, runtime, 1, HANG_TIMEOUT_S + POLL_SLACK_S + 20)
        stalled_at = time.monotonic()
        before = tokens_by_engine(runtime)
        state = None
        while time.monotonic() - stalled_at < HANG_TIMEOUT_S + POLL_SLACK_S:
            assert complete_on(runtime, 0) == 200  # engine 0 keeps generating
            state = runtime.state()
            if state is not None and not state["live"]:
                break
            time.sleep(0.2)
        after = tokens_by_engine(runtime)
        try:
            assert state is not None and not state["live"], (
                f"liveness still passes {time.monotonic() - stalled_at:.0f}s after engine 1 stalled "
                f"(limit {HANG_TIMEOUT_S}s); state {state}\n{runtime.log_tail()}")
            assert runtime.probe("live") == 503
            assert state["hung"] is True
            hung = [reason for reason in state["liveReasons"] if "hung" in reason]
            assert len(hung) == 1 and 'engine="1"' in hung[0] and 'engine="0"' not in hung[0], hung
            engines = {entry["engine"]: entry for entry in state["health"]["engine"]["engines"]}
            assert (engines["0"]["hung"], engines["1"]["hung"]) == (False, True)
            assert engines["1"]["running"] == 1 and engines["1"]["stalled_for_s"] >= HANG_TIMEOUT_S
            # The pod's sum advanced all along: only engine 1 stood still.
            assert after["0"] > before["0"] and after["1"] == before["1"]
        finally:
            os.killpg(runtime.state()["enginePid"], signal.SIGKILL)  # ends the hanging request too


def test_two_generating_engines_stay_live(runtime_factory):
    runtime = runtime_factory(DATA_PARALLEL, {"FAKE_ENGINE_REQUEST_S": "0.3"})
    runtime.wait_for(is_ready, 30, "Ready")
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        deadline = time.monotonic() + HANG_TIMEOUT_S + POLL_SLACK_S
        while time.monotonic() < deadline:
            # Both engines busy (running > 0) and both generating, a request at a time each.
            assert list(pool.map(lambda rank: complete_on(runtime, rank), (0, 1))) == [200, 200]
            assert runtime.probe("live") == 200
    tokens = tokens_by_engine(runtime)
    assert tokens["0"] > 0 and tokens["1"] > 0
