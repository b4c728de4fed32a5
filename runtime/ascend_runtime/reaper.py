"""Reap the engine's orphans: the runtime may be PID 1 of its container.

vLLM's API server forks an engine core and workers; when the API server dies first, they are
orphaned and re-parented to PID 1. Where the runtime is PID 1 (no init in the image), nobody
else waits for them and every killed one stays a zombie. The image runs ``tini`` as PID 1, and
the runtime reaps as well: it makes itself the *child subreaper* of its process tree
(``prctl(PR_SET_CHILD_SUBREAPER)``), so orphans of the engine re-parent to it wherever it runs,
and :class:`Reaper` waits for the ones that died.

Only orphans are reaped: zombies that are not in the runtime's own process group (the engine
and the commands run in their own sessions) and not started by the runtime itself, whose exit
codes asyncio and ``subprocess`` wait for.
"""

from __future__ import annotations

import ctypes
import logging
import os
import sys

import psutil

__all__ = ["Reaper", "become_subreaper"]

log = logging.getLogger(__name__)

#: linux/prctl.h
PR_SET_CHILD_SUBREAPER = 36


def become_subreaper() -> bool:
    """Make this process the reaper of its descendants' orphans (Linux); False where impossible."""

    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
            log.warning("prctl(PR_SET_CHILD_SUBREAPER) failed: %s", os.strerror(ctypes.get_errno()))
            return False
    except (OSError, AttributeError) as error:
        log.warning("cannot become the subreaper of the engine's processes: %s", error)
        return False
    return True


class Reaper:
    """Waits for dead orphans among this process's children; never for its own subprocesses."""

    def __init__(self) -> None:
        self._own: set[int] = set()

    def own(self, pid: int) -> None:
        """A child the runtime started and someone else (asyncio) waits for."""
        self._own.add(pid)

    def disown(self, pid: int) -> None:
        self._own.discard(pid)

    def reap(self) -> list[int]:
        """Wait for every dead orphan now; the pids reaped."""

        reaped = []
        group = os.getpgrp()
        try:
            children = psutil.Process().children()
        except psutil.Error:
            return reaped
        for child in children:
            if child.pid in self._own:
                continue
            try:
                if child.status() != psutil.STATUS_ZOMBIE or os.getpgid(child.pid) == group:
                    continue  # alive, or a subprocess.run() child of the runtime's own group
                pid, _ = os.waitpid(child.pid, os.WNOHANG)
            except (psutil.Error, ChildProcessError, ProcessLookupError):
                continue
            if pid:
                reaped.append(pid)
        if reaped:
            log.info("reaped %d orphaned process(es) of the engine: %s", len(reaped), reaped)
        return reaped
