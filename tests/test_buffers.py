"""The receive-buffer pool: page-aligned, reused by exact size, bounded, released at once."""

from __future__ import annotations

import ctypes
import mmap

import pytest

from scratchkeeper.transfer.buffers import BufferPool


def _address(buffer: mmap.mmap) -> int:
    return ctypes.addressof(ctypes.c_char.from_buffer(buffer))


def test_buffers_start_on_a_page_and_are_reused_by_size():
    pool = BufferPool(keep_bytes=4 << 20)
    first = pool.take(1 << 20)
    assert len(first) == 1 << 20 and _address(first) % mmap.PAGESIZE == 0
    first[:5] = b"hello"
    pool.give(first)
    assert pool.idle_bytes == 1 << 20
    assert pool.take(65536) is not first  # another size: a buffer of its own
    again = pool.take(1 << 20)
    assert again is first and again[:5] == b"hello"  # reused, not zeroed (it is overwritten)
    assert pool.idle_bytes == 0


def test_idle_buffers_are_bounded_and_released():
    pool = BufferPool(keep_bytes=3 << 20)
    buffers = [pool.take(1 << 20) for _ in range(5)]
    for buffer in buffers:
        pool.give(buffer)
    assert pool.idle_bytes == 3 << 20  # the rest is dropped, unmapped with its last reference
    pool.release()
    assert pool.idle_bytes == 0 and pool.take(1 << 20) not in buffers


def test_what_is_not_a_pool_buffer_is_ignored():
    pool = BufferPool(keep_bytes=1 << 20)
    pool.give(bytearray(10))
    pool.give(b"bytes")
    closed = mmap.mmap(-1, 4096)
    closed.close()
    pool.give(closed)
    assert pool.idle_bytes == 0
    with pytest.raises(ValueError):
        pool.take(0)
