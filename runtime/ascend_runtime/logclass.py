"""Classify vLLM / vllm-ascend engine output, line by line, into a start-up outcome.

The runtime feeds every engine output line to a :class:`LineClassifier`; the classifier keeps
just enough context (per emitting process) to tell *why* an engine died, which decides whether
the runtime steps down the graph-mode ladder or relaunches the same rung. The outcomes, their
signatures, their precedence and what is stripped before matching: ``docs/diagnostics.md``
("How engine output is classified").
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass, field
from typing import Any
from collections.abc import Iterable

__all__ = [
    "ClassifyResult",
    "Event",
    "EventKind",
    "LineClassifier",
    "Outcome",
    "classify_lines",
    "normalize_line",
]


class Outcome(str, enum.Enum):
    GRAPH_CAPTURE_FAILURE = "graph_capture_failure"
    GRAPH_REPLAY_FAILURE = "graph_replay_failure"
    DEVICE_OOM = "device_oom"
    HEALTHY_STARTUP_GRAPH = "healthy_startup_graph"
    HEALTHY_STARTUP_EAGER = "healthy_startup_eager"
    OTHER_FAILURE = "other_failure"
    #: No failure and no completed start-up (yet): a log cut short or an engine still starting.
    INCOMPLETE = "incomplete"

    @property
    def is_failure(self) -> bool:
        return self in _FAILURE_OUTCOMES

    @property
    def is_graph_failure(self) -> bool:
        """A failure that a lower rung of the graph ladder (ultimately eager) may avoid."""
        return self in (Outcome.GRAPH_CAPTURE_FAILURE, Outcome.GRAPH_REPLAY_FAILURE)


_FAILURE_OUTCOMES = frozenset(
    {Outcome.GRAPH_CAPTURE_FAILURE, Outcome.GRAPH_REPLAY_FAILURE, Outcome.DEVICE_OOM, Outcome.OTHER_FAILURE}
)


class EventKind(str, enum.Enum):
    LOADING = "loading"
    CAPTURING_GRAPHS = "capturing_graphs"
    GRAPHS_CAPTURED = "graphs_captured"
    COMPILING = "compiling"
    ENGINE_READY = "engine_ready"
    EAGER_MODE = "eager_mode"
    CAPTURE_FAILURE = "capture_failure"
    REPLAY_FAILURE = "replay_failure"
    DEVICE_OOM = "device_oom"
    FATAL = "fatal"


_FAILURE_KINDS = (EventKind.CAPTURE_FAILURE, EventKind.REPLAY_FAILURE, EventKind.DEVICE_OOM, EventKind.FATAL)
_GRAPH_KINDS = (EventKind.CAPTURING_GRAPHS, EventKind.GRAPHS_CAPTURED, EventKind.COMPILING)

#: Longest event text kept; evidence should stay readable in JSON.
MAX_TEXT = 400


@dataclass(frozen=True)
class Event:
    kind: EventKind
    line_no: int
    text: str

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind.value, "line": self.line_no, "text": self.text}


# --------------------------------------------------------------------------------------------
# Line normalisation
# --------------------------------------------------------------------------------------------

_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b[@-Z\\-_]")
_PREFIXES = (
    re.compile(r"^[\w.-]+\s+\|\s?"),  # docker compose: "qwen3-vl-32b  | "
    re.compile(r"^\[pod/[^\]]+\]\s?"),  # kubectl logs --prefix
    re.compile(r"^\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(?:[.,]\d+)?(?:Z|[+-]\d{2}:?\d{2})?\s+"),
)
_PROCESS = re.compile(r"^\((?P<proc>[^()]*?pid=\d+)\)\s?")
_HEADER = re.compile(
    r"^(?P<level>DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL)"
    r"(?::\s+|\s+(?:\d{2}-\d{2}\s+\d{2}:\d{2}:\d{2}(?:\.\d+)?\s*)?(?:\[(?P<src>[^\]]*)\]\s?)?)"
)


@dataclass(frozen=True)
class NormalizedLine:
    process: str
    level: str | None
    source: str | None
    message: str


def normalize_line(raw: str) -> NormalizedLine:
    """Strip colours and every prefix; return the emitting process, level, source and message."""

    text = _ANSI.sub("", raw.rstrip("\r\n")).replace("\r", " ")
    processes: list[str] = []
    changed = True
    while changed:
        changed = False
        for pattern in _PREFIXES:
            stripped = pattern.sub("", text, count=1)
            if stripped != text:
                text, changed = stripped, True
        match = _PROCESS.match(text)
        if match:
            processes.append(match.group("proc"))
            text, changed = text[match.end() :], True
    level = source = None
    header = _HEADER.match(text)
    if header:
        level = header.group("level")
        source = header.group("src")
        text = text[header.end() :]
    return NormalizedLine(process=" / ".join(processes), level=level, source=source, message=text)


# --------------------------------------------------------------------------------------------
# Signatures (substrings; matched case-sensitively unless lowered below)
# --------------------------------------------------------------------------------------------

_LOADING = (
    "Loading weights took",
    "Loading model weights took",
    "Starting to load model",
    "Loading safetensors checkpoint shards",
    "Loading pt checkpoint shards",
)
_CAPTURING = re.compile(r"Capturing (?:CUDA |ACL |NPU )?graph", re.IGNORECASE)
_CAPTURED = ("Graph capturing finished",)
_COMPILING = (
    "torch.compile takes",
    "Compiling a graph for",
    "Dynamo bytecode transform time",
    "compilation enabled on NPU",
    "batch sizes for ACL graph",
    "ACL graph batch sizes",
    "Directly load the compiled graph",
    "Cache the graph of",
    "Warming up model for the compilation",
    "AOT compiled function",
    "torch_compile_cache",
)
_READY = (
    "Application startup complete",
    "init engine (profile, create kv cache, warmup model) took",
    "Starting vLLM API server",
    "Starting vLLM server on",
)
_EAGER = (
    "Compilation disabled, using eager mode",
    "Cudagraph is disabled under eager mode",
    "No cudagraph will be used",
    "'enforce_eager': True",
    "enforce_eager=True",
    "Enforce eager set",
)

#: Failure text that means graph capture (stream exhaustion, old CANN, capture API errors).
_CAPTURE_SIGNS = (
    "ACL graph capture failed",
    "capture_begin",
    "capture_end",
    "AclmdlRICapture",
    "aclmdlRICapture",
    "rtStreamBeginCapture",
    "begin capture stream failed",
    "Alloc sq cq fail",
    "Stream resources are insufficient",
    "Insufficient_Stream_Resources",
    "EL0009",
    "resource alloc fail stream wait event failed",
    "StreamCapture",
    "Capture cuda graph failed",
    "CUDA graph capture failed",
    "config mode is reduce-overhead",
)
#: Traceback frames (and the code lines under them) of the capture path.
_CAPTURE_FRAMES = (
    "capture_model",
    "_capture_cudagraphs",
    "capture_aclgraph",
    "_capture_graph",
    "cudagraph_capture",
    "in capture",
    "capture_begin",
    "capture_end",
    "torch.npu.graph(",
    "torch.cuda.graph(",
)
#: Failure text of graph replay during serving.
_REPLAY_SIGNS = ("AclmdlRIExecuteAsync", "replay:", "graph replay failed", "ACL graph replay")
#: Stream-sync timeouts and the rtMemcpy capture-mode error: replay only in graph mode and only on
#: an exception line (a lone 107030 in plog is harmless, vllm-ascend #14347).
_REPLAY_CODE = re.compile(r"\b(?:107020|107027|107030)\b|the current capture mode does not support")
_REPLAY_FRAMES = (
    ".replay()",
    "in replay",
    "AclmdlRIExecuteAsync",
    "graph_replay",
    "compilation/acl_graph.py",
    "compilation/cuda_graph.py",
)
#: Graph-mode compilation (torch.compile: Dynamo, AOTAutograd, Inductor, FakeTensor tracing).
_COMPILE_SIGNS = (
    "InvalidCxxCompiler",
    "No working C++ compiler",
    "BackendCompilerFailed",
    "InductorError",
    "torch._dynamo",
    "torch._inductor",
    "PT2 compilation",
    "torch.compile",
    "attempted to run this operator with Meta",
)
_COMPILE_FRAMES = (
    "torch/_inductor/",
    "torch/_subclasses/",
    "torch/_dynamo/convert_frame",
    "torch/_dynamo/symbolic_convert",
    "torch/_dynamo/output_graph",
    "torch/_functorch/",
    "vllm/compilation/backends.py",
    "vllm/compilation/compiler_interface.py",
    "compile_fx",
)
_OOM_SIGNS = re.compile(
    r"out of memory|OutOfMemoryError|Tried to allocate|EL0004|Memory_Allocation_Failure|\b207001\b"
    r"|alloc device memory failed|No available memory for the cache blocks"
    r"|larger than the available KV cache memory",
    re.IGNORECASE,
)
_FATAL_SIGNS = (
    "EngineCore failed to start",
    "Engine core initialization failed",
    "EngineDeadError",
    "WorkerProc hit an exception",
    "Worker failed with error",
    "EngineCore encountered a fatal error",
    "Engine process failed to start",
    "died unexpectedly",
    "WorkerProc failed to start",
)
_EXCEPTION = re.compile(
    r"^\s*(?P<name>(?:[A-Za-z_]\w*\.)*(?:[A-Z]\w*)?(?:Error|Exception|Failed|Unsupported|Compiler|Exit|Interrupt))"
    r"(?::|$)"
)
#: Exceptions that end a process on purpose (shutdown), not failures.
_BENIGN_EXCEPTIONS = ("KeyboardInterrupt", "CancelledError", "SystemExit")
#: Loggers of request-level errors in the API server: a bad request is not an engine failure.
_REQUEST_SOURCES = re.compile(r"^(?:serving_\w+|protocol|launcher|api_server)\.py")
_FRAME = re.compile(r'^\s*File "')
_TRACEBACK_START = (
    "Traceback (most recent call last)",
    "During handling of the above exception",
    "The above exception was the direct cause",
)
_QUIET_LEVELS = ("DEBUG", "INFO", "WARNING", "WARN")
#: A CANN log line at error level: ``[ERROR] RUNTIME(1234,python):...`` or an error code prefix
#: (``EE9999:``, ``EL0009:``, ``EH9999:``).
_CANN_ERROR = re.compile(r"^\s*(?:\[ERROR\]\s*[A-Z][A-Z_]*\(\d+|E[A-Z]\d{4}:)")
#: Stream creation and stream wait-event calls of the CANN runtime (and the words for them).
_STREAM_OP = re.compile(
    r"rtStreamCreate|aclrtCreateStream|rtStreamWaitEvent|aclrtStreamWaitEvent|StreamWaitEvent|StreamCreate"
    r"|(?i:create\s+(?:a\s+)?stream|stream\s+(?:create|creation|setup|wait[\s_-]*event))"
)
#: A runtime error code or failure word beside such a call.
_RUNTIME_CODE = re.compile(
    r"(?i)\b[1-5]07\d{3}\b|\bret(?:code)?\s*[=:]\s*-?(?:0x)?0*[1-9a-f][0-9a-f]*|errcode\s*[=:]\s*0*[1-9]\d*"
    r"|error\s+code\s+(?:is\s+)?0*[1-9]\d*|result\s*=\s*0*[1-9]\d*|\bfail"
)
#: CANN log lines below error level: progress, never a failure.
_CANN_QUIET = re.compile(r"^\s*\[(?:INFO|DEBUG|WARNING|WARN|EVENT|TRACE)\]")


def _has(text: str, needles: Iterable[str]) -> bool:
    return any(needle in text for needle in needles)


@dataclass
class _Context:
    """What the traceback in progress (of one process) has shown so far."""

    in_error: bool = False
    #: The previous line was a ``File "..."`` frame, so this one is its source line.
    code_next: bool = False
    capture: bool = False
    replay: bool = False
    compile: bool = False

    def reset(self) -> None:
        self.capture = self.replay = self.compile = False


@dataclass
class ClassifyResult:
    outcome: Outcome
    events: list[Event] = field(default_factory=list)
    lines: int = 0

    @property
    def deciding(self) -> Event | None:
        """The event the outcome rests on: the first of the winning failure kind, else the last ready."""
        wanted = _OUTCOME_EVENT.get(self.outcome)
        if wanted is not None:
            return next((event for event in self.events if event.kind is wanted), None)
        if self.outcome in (Outcome.HEALTHY_STARTUP_GRAPH, Outcome.HEALTHY_STARTUP_EAGER):
            ready = [e for e in self.events if e.kind in (EventKind.ENGINE_READY, EventKind.GRAPHS_CAPTURED)]
            return ready[-1] if ready else None
        return None

    def details(self) -> dict[str, Any]:
        """JSON-able evidence: the deciding line, every failure line and the mode evidence."""

        deciding = self.deciding
        failures = [e.to_json() for e in self.events if e.kind in _FAILURE_KINDS]
        mode = [e.to_json() for e in self.events if e.kind in (*_GRAPH_KINDS, EventKind.EAGER_MODE)]
        counts: dict[str, int] = {}
        for event in self.events:
            counts[event.kind.value] = counts.get(event.kind.value, 0) + 1
        return {
            "lines": self.lines,
            "deciding": deciding.to_json() if deciding else None,
            "failures": failures[:20],
            "mode_evidence": mode[:10],
            "event_counts": counts,
        }


_OUTCOME_EVENT = {
    Outcome.GRAPH_CAPTURE_FAILURE: EventKind.CAPTURE_FAILURE,
    Outcome.GRAPH_REPLAY_FAILURE: EventKind.REPLAY_FAILURE,
    Outcome.DEVICE_OOM: EventKind.DEVICE_OOM,
    Outcome.OTHER_FAILURE: EventKind.FATAL,
}


class LineClassifier:
    """Streaming classifier: ``feed`` each line; ``result()`` gives the outcome so far."""

    def __init__(self) -> None:
        self.events: list[Event] = []
        self.line_no = 0
        self._contexts: dict[str, _Context] = {}
        self._ready = False
        self._eager = False
        self._graph = False

    # -- public -------------------------------------------------------------------------------
    def feed(self, line: str) -> Event | None:
        self.line_no += 1
        norm = normalize_line(line)
        kind = self._classify(norm)
        if kind is None:
            return None
        event = Event(kind=kind, line_no=self.line_no, text=norm.message.strip()[:MAX_TEXT])
        self.events.append(event)
        if kind in (EventKind.ENGINE_READY, EventKind.GRAPHS_CAPTURED):
            self._ready = True
        if kind in _GRAPH_KINDS:
            self._graph = True
        elif kind is EventKind.EAGER_MODE:
            self._eager = True
        return event

    def result(self) -> ClassifyResult:
        kinds = {event.kind for event in self.events}
        if EventKind.CAPTURE_FAILURE in kinds:
            outcome = Outcome.GRAPH_CAPTURE_FAILURE
        elif EventKind.REPLAY_FAILURE in kinds:
            outcome = Outcome.GRAPH_REPLAY_FAILURE
        elif EventKind.DEVICE_OOM in kinds:
            outcome = Outcome.DEVICE_OOM
        elif EventKind.FATAL in kinds:
            outcome = Outcome.OTHER_FAILURE
        elif self._ready:
            # Capture or graph compilation seen: graph. Otherwise nothing was captured: eager.
            outcome = Outcome.HEALTHY_STARTUP_GRAPH if self._graph else Outcome.HEALTHY_STARTUP_EAGER
        else:
            outcome = Outcome.INCOMPLETE
        return ClassifyResult(outcome=outcome, events=list(self.events), lines=self.line_no)

    # -- internals ----------------------------------------------------------------------------
    def _classify(self, norm: NormalizedLine) -> EventKind | None:
        msg = norm.message
        ctx = self._contexts.setdefault(norm.process, _Context())
        quiet = norm.level in _QUIET_LEVELS
        if quiet:
            ctx.in_error = ctx.code_next = False
            return self._progress(msg)
        if self._cann_capture_failure(msg):
            return EventKind.CAPTURE_FAILURE

        if _has(msg, _TRACEBACK_START):
            ctx.in_error = True
            ctx.code_next = False
            ctx.reset()
            return None

        exception = _EXCEPTION.match(msg)
        if exception and not exception.group("name").endswith(_BENIGN_EXCEPTIONS):
            kind = self._exception_kind(msg, ctx, norm)
            ctx.in_error = True
            ctx.code_next = False
            return kind

        errorish = norm.level in ("ERROR", "CRITICAL") or ctx.in_error
        if _FRAME.match(msg) or ctx.code_next:
            # A frame or its source line: context for the exception to come, not a failure itself.
            ctx.code_next = bool(_FRAME.match(msg))
            if errorish:
                self._remember_frames(msg, ctx)
            return None
        if errorish:
            kind = self._signature_kind(msg)
            if kind is not None:
                return kind
        if _has(msg, _FATAL_SIGNS):
            ctx.in_error = True
            return EventKind.FATAL
        return self._progress(msg)

    def _progress(self, msg: str) -> EventKind | None:
        if _has(msg, _CAPTURED):
            return EventKind.GRAPHS_CAPTURED
        if _CAPTURING.search(msg):
            return EventKind.CAPTURING_GRAPHS
        if _has(msg, _READY):
            return EventKind.ENGINE_READY
        if _has(msg, _EAGER):
            return EventKind.EAGER_MODE
        if _has(msg, _COMPILING):
            return EventKind.COMPILING
        if _has(msg, _LOADING):
            return EventKind.LOADING
        return None

    def _cann_capture_failure(self, msg: str) -> bool:
        """A CANN runtime line that means graph capture failed (docs/diagnostics.md)."""
        if self._ready or self._eager or _CANN_QUIET.match(msg):
            return False  # serving, nothing is captured (a lone plog line is harmless then), or progress
        if (_STREAM_OP.search(msg) or _has(msg, _CAPTURE_SIGNS)) and _RUNTIME_CODE.search(msg):
            return True
        return bool(_CANN_ERROR.match(msg)) and _has(msg, _CAPTURE_SIGNS)

    @staticmethod
    def _remember_frames(msg: str, ctx: _Context) -> None:
        if _has(msg, _CAPTURE_FRAMES):
            ctx.capture = True
        if _has(msg, _REPLAY_FRAMES):
            ctx.replay = True
        if _has(msg, _COMPILE_FRAMES):
            ctx.compile = True

    def _signature_kind(self, msg: str) -> EventKind | None:
        """Failure signatures on an ERROR line or a traceback line that is not an exception."""
        if _has(msg, _CAPTURE_SIGNS):
            return EventKind.CAPTURE_FAILURE
        if _has(msg, _REPLAY_SIGNS) and not _has(msg, _REPLAY_FRAMES):
            return EventKind.REPLAY_FAILURE
        if _OOM_SIGNS.search(msg):
            return EventKind.DEVICE_OOM
        return None

    def _exception_kind(self, msg: str, ctx: _Context, norm: NormalizedLine) -> EventKind | None:
        if _has(msg, _CAPTURE_SIGNS):
            return EventKind.CAPTURE_FAILURE
        if ctx.capture:
            # Out of device memory while capturing is an OOM, not a capture problem (docs/diagnostics.md).
            oom = _OOM_SIGNS.search(msg) and not _REPLAY_CODE.search(msg)
            return EventKind.DEVICE_OOM if oom else EventKind.CAPTURE_FAILURE
        if ctx.replay or _has(msg, _REPLAY_SIGNS):
            return EventKind.REPLAY_FAILURE
        if _REPLAY_CODE.search(msg) and (self._graph or not self._eager):
            return EventKind.REPLAY_FAILURE
        if ctx.compile or _has(msg, _COMPILE_SIGNS):
            # Compiling the graph-mode model: a start-up failure eager avoids; while serving it
            # is the graph path failing under traffic.
            return EventKind.REPLAY_FAILURE if self._ready else EventKind.CAPTURE_FAILURE
        if _OOM_SIGNS.search(msg):
            return EventKind.DEVICE_OOM
        if _has(msg, _FATAL_SIGNS):
            return EventKind.FATAL
        if norm.source and _REQUEST_SOURCES.match(norm.source):
            return None  # a request failed; the engine did not
        return EventKind.FATAL


def classify_lines(lines: Iterable[str]) -> ClassifyResult:
    """Classify a whole log (an iterable of lines, e.g. an open file)."""

    classifier = LineClassifier()
    for line in lines:
        classifier.feed(line)
    return classifier.result()
