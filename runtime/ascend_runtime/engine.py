"""The engine child process: launch, stream and classify its output, stop it.

The engine runs in its own process group so that a stop reaches its workers too (vLLM forks
an engine core and workers). Every output line is echoed to the runtime's own stdout (so
``kubectl logs`` shows the engine) and fed to the log classifier; classified events go to a
callback as they happen, which is how a graph capture failure triggers the fallback at once
instead of after a timeout.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import sys
from dataclasses import dataclass, field
from typing import Callable

from ascend_runtime.logclass import ClassifyResult, Event, LineClassifier, classify_lines
from ascend_runtime.redact import Redactor

log = logging.getLogger(__name__)

#: Lines of engine output kept for the post-mortem classification of an exit.
TAIL_LINES = 4000
#: Seconds to wait for the last output after the engine exits. Its children (vLLM's engine
#: core, workers) inherit the pipe and can keep it open after the API server died.
READER_DRAIN_S = 2.0
#: Seconds between checks of the engine's exit status (see :meth:`EngineProcess._wait_exit`).
EXIT_POLL_S = 0.1


@dataclass
class EngineExit:
    returncode: int
    outcome: ClassifyResult


@dataclass
class EngineProcess:
    argv: list[str]
    env: dict[str, str]
    on_event: Callable[[Event], None]
    echo: bool = True
    process: asyncio.subprocess.Process | None = None
    tail: list[str] = field(default_factory=list)
    _reader: asyncio.Task[None] | None = None
    _classifier: LineClassifier = field(default_factory=LineClassifier)
    #: Masks secret values (secret-sourced env, --api-key) in the logged argv and engine output.
    _redactor: Redactor = field(default_factory=Redactor.from_env)

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process else None

    async def start(self) -> None:
        env = dict(os.environ)
        env.update(self.env)
        env.setdefault("PYTHONUNBUFFERED", "1")
        log.info("launching engine: %s", self._redactor.argv(self.argv))
        self.process = await asyncio.create_subprocess_exec(
            *self.argv,
            env=env,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            start_new_session=True,  # its own process group: stop() signals the workers too
            limit=1 << 20,  # long traceback lines must not break the reader
        )
        self._reader = asyncio.create_task(self._read(), name="engine-log-reader")

    async def _read(self) -> None:
        assert self.process is not None and self.process.stdout is not None
        stream = self.process.stdout
        while True:
            try:
                raw = await stream.readline()
            except ValueError:  # a line over the limit: take what is buffered
                raw = await stream.read(1 << 16)
            if not raw:
                return
            line = self._redactor.text(raw.decode("utf-8", errors="replace").rstrip("\n"))
            if self.echo:
                sys.stdout.write(line + "\n")
                sys.stdout.flush()
            self.tail.append(line)
            if len(self.tail) > TAIL_LINES:
                del self.tail[: len(self.tail) - TAIL_LINES]
            event = self._classifier.feed(line)
            if event is not None:
                self.on_event(event)

    async def _drain_reader(self) -> None:
        if self._reader is None or self._reader.done():
            return
        try:
            await asyncio.wait_for(asyncio.shield(self._reader), timeout=READER_DRAIN_S)
        except (asyncio.TimeoutError, asyncio.CancelledError):
            pass

    async def _wait_exit(self) -> int:
        """The exit code, as soon as the process has exited.

        Not ``Process.wait()``: on Python 3.11 it returns only once every pipe is closed, and
        vLLM's engine core keeps the engine's stdout open after the API server died.
        """
        assert self.process is not None
        while self.process.returncode is None:
            await asyncio.sleep(EXIT_POLL_S)
        return self.process.returncode

    async def wait(self) -> EngineExit:
        assert self.process is not None
        returncode = await self._wait_exit()
        await self._drain_reader()
        return EngineExit(returncode=returncode, outcome=classify_lines(self.tail))

    def running(self) -> bool:
        return self.process is not None and self.process.returncode is None

    def signal_group(self, signum: int) -> None:
        if not self.running():
            return
        assert self.process is not None
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signum)

    async def stop(self, timeout: float) -> int | None:
        """SIGTERM the group, wait up to ``timeout`` seconds, then SIGKILL. Returns the exit code."""

        if self.process is None:
            return None
        if self.running():
            self.signal_group(signal.SIGTERM)
            try:
                await asyncio.wait_for(self._wait_exit(), timeout=max(timeout, 0.1))
            except asyncio.TimeoutError:
                log.warning("engine did not stop within %.0f s; killing it", timeout)
                self.signal_group(signal.SIGKILL)
                await self._wait_exit()
        # Stragglers of the group (an engine core or workers that outlived the API server) go too.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.process.pid, signal.SIGKILL)
        await self._drain_reader()
        if self._reader is not None and not self._reader.done():
            self._reader.cancel()
        return self.process.returncode
