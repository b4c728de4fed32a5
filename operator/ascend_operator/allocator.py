"""glibc's allocator, tuned for a long-running operator with a pool of API threads.

glibc gives each thread that allocates its own malloc arena and keeps what an arena freed, so a
process whose worker threads read thousands of API responses grows with its threads rather than
its data (what the ``MALLOC_ARENA_MAX`` environment variable limits). At
start-up the operator caps the arenas (``mallopt(M_ARENA_MAX)``; threads are made later, on
demand) and, every :data:`TRIM_INTERVAL_S`, hands the free heap back to the system
(``malloc_trim``). Elsewhere (musl, macOS) both are no-ops.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools

#: mallopt's parameter number for the arena cap (glibc's malloc.h).
M_ARENA_MAX = -8
#: Arenas: the event loop's and one shared by the API threads.
ARENAS = 2
#: Seconds between returns of free heap to the system.
TRIM_INTERVAL_S = 30.0


@functools.cache
def _libc() -> ctypes.CDLL | None:
    name = ctypes.util.find_library("c")
    if not name:
        return None
    try:
        libc = ctypes.CDLL(name)
    except OSError:
        return None
    return libc if hasattr(libc, "mallopt") and hasattr(libc, "malloc_trim") else None


def cap_arenas(arenas: int = ARENAS) -> bool:
    """Cap glibc's malloc arenas; ``True`` when glibc took the setting."""
    libc = _libc()
    return bool(libc is not None and libc.mallopt(M_ARENA_MAX, arenas) == 1)


def trim() -> bool:
    """Return free heap to the system; ``True`` when glibc released some."""
    libc = _libc()
    return bool(libc is not None and libc.malloc_trim(0) == 1)
