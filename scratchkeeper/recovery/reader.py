"""A reader that, on an I/O error, reports the failed OST and waits for the patch (the thesis, §4.6.2).

``scratchkeeper read`` uses it; programs can too::

    with RecoveringReader(backend, client, "/scratch/u/input.dat") as reader:
        for chunk in reader.chunks():
            ...

When a stripe's OST has failed, :class:`TargetUnavailable` names the OST; the reader sends
"file F, OST i failed" to the recovery service, waits until F is whole again and resumes at the
byte it stopped at. It fails only when the service says the file is lost (or the wait times out).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

from ..errors import RecoveryError, ScratchkeeperError, TargetUnavailable
from ..storage import StorageBackend
from ..storage.base import DEFAULT_CHUNK
from .client import RecoveryClient

log = logging.getLogger(__name__)


class RecoveringReader:
    """Streams a file; waits for recovery instead of failing on a lost stripe."""

    def __init__(self, backend: StorageBackend, client: RecoveryClient, path: str, *,
                 wait_timeout: float = 3600.0, max_waits: int = 8, count_reads: bool = False):
        self.backend = backend
        self.client = client
        self.path = backend.paths.resolve(path)
        self.wait_timeout = wait_timeout
        self.max_waits = max_waits
        self.waits = 0  # how many times reading had to wait for a patch
        self.count_reads = count_reads  # tell recoveryd the reads when done (tiering)

    def chunks(self, offset: int = 0, length: int | None = None,
               chunk_size: int = DEFAULT_CHUNK) -> Iterator[bytes]:
        """The bytes of ``[offset, offset+length)`` in order, patched where needed."""
        size = self.backend.stat(self.path).size
        end = size if length is None else min(size, offset + length)
        position = offset
        reads = 0
        while position < end:
            try:
                for chunk in self.backend.open_reader(self.path, offset=position,
                                                      length=end - position,
                                                      chunk_size=chunk_size):
                    position += len(chunk)
                    reads += 1
                    yield chunk
                break
            except TargetUnavailable as err:
                self._wait_for_patch(err, position)
        if self.count_reads and reads:
            self._tell_reads(reads, position - offset)

    def _tell_reads(self, reads: int, nbytes: int) -> None:
        """Best effort: a reader without recoveryd still reads."""
        try:
            self.client.reads(self.path, min(reads, 1 << 20), nbytes)
        except (ScratchkeeperError, OSError) as err:
            log.debug("%s: reads not counted: %s", self.path, err)

    def _wait_for_patch(self, err: TargetUnavailable, position: int) -> None:
        self.waits += 1
        if self.waits > self.max_waits:
            raise RecoveryError(f"{self.path}: still unreadable at byte {position} after "
                                f"{self.max_waits} patches: {err}") from err
        log.warning("%s: I/O error at byte %d (%s); asking the recovery service", self.path,
                    position, err)
        self.client.report(self.path, err.ost_index)
        status = self.client.wait(self.path, self.wait_timeout)
        if not status.get("whole"):
            why = status.get("reason") or status.get("state")
            if status.get("timed_out"):
                why = f"not patched within {self.wait_timeout:g}s"
            raise RecoveryError(f"{self.path}: byte {position} lost on OST {err.ost_index} and "
                                f"not recoverable: {why}") from err

    def read(self) -> bytes:
        return b"".join(self.chunks())

    def __enter__(self) -> RecoveringReader:
        return self

    def __exit__(self, *exc) -> None:
        pass
