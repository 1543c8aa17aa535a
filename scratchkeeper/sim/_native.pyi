"""Types of the replay's C cores (scratchkeeper/sim/native/_native.c)."""

from collections.abc import Callable, Sequence
from typing import Any

from _typeshed import ReadableBuffer, WriteableBuffer

def simulate(*, submit: ReadableBuffer, run_time: ReadableBuffer, limit: ReadableBuffer,
             input_bytes: ReadableBuffer, nodes: ReadableBuffer, ost_offsets: ReadableBuffer,
             osts: ReadableBuffer, ost_slots: int, system_nodes: int, backfill: bool, policy: int,
             patch_bandwidth: float, patch_latency: float, outage_ost: ReadableBuffer,
             outage_down: ReadableBuffer, outage_up: ReadableBuffer, ready_at: WriteableBuffer,
             first_start: WriteableBuffer, start: WriteableBuffer, end: WriteableBuffer,
             recovery_seconds: WriteableBuffer, kills: WriteableBuffer, version: WriteableBuffer,
             affected: WriteableBuffer,
             progress: Callable[[int, int], object] | None) -> tuple[bytes, bytes, bytes, float, int]: ...
def replicate(*, log_time: ReadableBuffer, log_kind: ReadableBuffer, log_job: ReadableBuffer,
              nodes: ReadableBuffer, input_bytes: ReadableBuffer, end: ReadableBuffer,
              system_nodes: int, first_submit: float, last_end: float, order: int, alpha: float,
              threshold: float, copy_bandwidth: float, scratch_bytes: float, samples: int,
              progress: Callable[[int, int], object] | None,
              progress_events: int) -> tuple[int, int, bytes, bytes]: ...
def read_columns(jobs: Sequence[Any], names: tuple[str, ...], kinds: str, /) -> tuple[bytes, ...]: ...
def write_columns(jobs: Sequence[Any], names: tuple[str, ...], kinds: str,
                  columns: tuple[ReadableBuffer, ...], /) -> None: ...
def read_int_lists(jobs: Sequence[Any], name: str,
                   /) -> tuple[bytes, bytes, int | None, int | None]: ...
def parse_swf(text: ReadableBuffer, limit: int, /) -> tuple[bytes, bytes, bytes, int] | None: ...
def draw_inputs(words: ReadableBuffer, index: int, count: int, mu: float, sigma: float, n: int,
                k: int, setsize: int, /) -> tuple[bytes, bytes]: ...
