"""ascend_operator.allocator on this machine's C library (glibc on the CI machines)."""

from __future__ import annotations

import ctypes.util
import platform

import pytest
from ascend_operator import allocator

glibc = platform.libc_ver()[0] == "glibc"


@pytest.mark.skipif(not glibc, reason="mallopt and malloc_trim are glibc's")
def test_glibc_takes_the_arena_cap_and_trims() -> None:
    assert allocator.cap_arenas() is True
    blocks = [bytearray(256 * 1024) for _ in range(64)]  # heap to give back
    del blocks
    allocator.trim()  # 1 or 0 (nothing to release) are both fine: it must not fail
    assert allocator._libc() is not None


def test_without_glibc_both_are_no_ops(monkeypatch: pytest.MonkeyPatch) -> None:
    allocator._libc.cache_clear()
    monkeypatch.setattr(ctypes.util, "find_library", lambda name: None)
    try:
        assert allocator.cap_arenas() is False and allocator.trim() is False
    finally:
        allocator._libc.cache_clear()
