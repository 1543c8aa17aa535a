"""What the recovery benchmark's sections share: a private store and state with sources on the
local cluster's servers (:class:`Bench`), and the medians and spreads its tables print."""

from __future__ import annotations

import hashlib
import os
import shutil
import statistics
import uuid
from pathlib import Path

from scratchkeeper import digests
from scratchkeeper.config import parse_config
from scratchkeeper.planner import records as planner_records
from scratchkeeper.recovery.outcome import PATCHED
from scratchkeeper.recovery.reconstruct import Recoverer
from scratchkeeper.state import StateStore
from scratchkeeper.storage import LayoutRequest, open_backend
from scratchkeeper.storage.base import XATTR_PREFIX

MiB = 1 << 20


class Bench:
    """A private store and state; sources in a private folder of the cluster's source dir."""

    def __init__(self, cluster: dict, workdir: Path, *, ost_count: int = 40, extra: str = ""):
        self.cluster = cluster
        self.workdir = workdir
        self.source_dir = Path(cluster["source_dir"]) / f"recovery-bench-{uuid.uuid4().hex[:8]}"
        self.source_dir.mkdir()
        os.chmod(self.source_dir, 0o755)
        (workdir / "scratch").mkdir(parents=True, exist_ok=True)
        self.config = parse_config(
            f'[storage]\nbackend = "local"\nscratch_root = "{workdir}/scratch"\n'
            f'store_root = "{workdir}/store"\nost_count = {ost_count}\n'
            f'[state]\ndatabase = "{workdir}/state.db"\n'
            f'[recovery]\nprobe_timeout = 5.0\n{extra}\n')
        self.backend = open_backend(self.config)
        self.store = StateStore(self.config.state.database)
        self._digested: tuple = (None, "", None)  # the last bytes staged, their digests

    def source(self, name: str, size: int) -> tuple[Path, bytes]:
        data = os.urandom(size)
        path = self.source_dir / name
        path.write_bytes(data)
        os.chmod(path, 0o644)
        return path, data

    def uri(self, path: Path, scheme: str) -> str:
        if scheme == "http":
            return self.cluster["http_source_url"] + str(path.relative_to(self.cluster["source_dir"]))
        return self.cluster["gridftp_url"] + str(path)

    def stage(self, name: str, data: bytes, uri: str, stripe_count: int, stripe_size: int,
              with_digests: bool = True, osts: tuple[int, ...] | None = None) -> str:
        """Stage as ``stage commit`` does (xattrs; block digests unless told otherwise)."""
        backend = self.backend
        if backend.exists(name):
            backend.remove(name)
        backend.create(name, LayoutRequest(stripe_count=stripe_count, stripe_size=stripe_size,
                                           ost_list=osts))
        for offset in range(0, len(data), 16 * MiB):
            backend.write(name, offset, data[offset:offset + 16 * MiB])
        # the same bytes are staged again and again: their digests are computed once
        if self._digested[0] is not data:
            self._digested = (data, hashlib.sha256(data).hexdigest(),
                              digests.digest_bytes(data, self.config.recovery.digest_block))
        _, sha256, blocks = self._digested
        backend.set_xattr(name, XATTR_PREFIX + "source", uri.encode())
        backend.set_xattr(name, XATTR_PREFIX + "sha256", sha256.encode())
        backend.set_xattr(name, XATTR_PREFIX + "size", str(len(data)).encode())
        # the record recovery trusts (trusted.*, the source's endpoint), as stage commit does
        planner_records.write_recovery_record(backend, planner_records.open_records(self.store),
                                              name, source=uri, sha256=sha256, size=len(data))
        full = backend.paths.resolve(name)
        if with_digests:
            digests.record(self.store, full, sha256, blocks)
        else:
            digests.forget(self.store, full)
        return full

    def patch_once(self, path: str, config=None):
        """Fail one OST of the file, recover it; the outcome."""
        backend = self.backend
        failed = backend.layout(path).ost_list[0]
        backend.fail_ost(failed)
        try:
            outcome = Recoverer(backend, config or self.config, store=self.store).recover(path)
        finally:
            backend.restore_ost(failed)
        if outcome.state != PATCHED:
            raise SystemExit(f"benchmarks.recovery: {path}: {outcome.state}: {outcome.reason}")
        return outcome

    def cleanup(self) -> None:
        shutil.rmtree(self.source_dir, ignore_errors=True)


def median(values):
    """The median of ``values`` (the tables' figure; the spread beside it)."""
    return statistics.median(values)


def spread(middle: float, low: float, high: float) -> str:
    """``median (min-max)``, as the tables print it."""
    return f"{middle:.3f} ({low:.3f}-{high:.3f})"


def summary(times: list[float], size: int) -> dict:
    """Median, spread and throughput of ``times`` for ``size`` bytes."""
    return {"seconds": median(times), "min": min(times), "max": max(times), "bytes": size,
            "bytes_per_s": size / median(times), "all": times}

