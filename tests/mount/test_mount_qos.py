"""Read QoS on the real mount (qos.admission): admission per interval, waits, online retrieval
over the copies, the counters of store stats."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from scratchkeeper.config import load_config
from scratchkeeper.storage import open_backend
from scratchkeeper.storage.layout import LayoutRequest

PIECE = 65536


def qos_mount(make_mount, admission: str, *, users: str = "", interval: float = 0.4,
              retrieval: str = "online", threads: int = 4, accesses: int = 1):
    return make_mount(ost_count=9, stripe_count=3, stripe_size=PIECE, threads=threads,
                      mount_extra="dispatch_min_bytes = 0",
                      extra=f'[qos]\nadmission = "{admission}"\ncopies = 3\n'
                            f'accesses = {accesses}\n'
                            f'interval = {interval}\nsamples = 200\n'
                            f'retrieval = "{retrieval}"\n{users}')


def three_copies(mnt, name: str, pieces: int = 24) -> tuple[str, bytes]:
    """A file of ``pieces`` stripe pieces on OSTs 0-2, given its two other copies by the (9,3,1)
    design (store replicate): the blocks through 0, 1 and 2, disjoint."""
    backend = open_backend(load_config(mnt.config))
    path = str(mnt.root / name)
    data = os.urandom(pieces * PIECE)
    backend.create(path, LayoutRequest(ost_list=(0, 1, 2)))
    backend.write(path, 0, data)
    replicated = subprocess.run([sys.executable, "-m", "scratchkeeper", "-c", str(mnt.config),
                                 "store", "replicate", path, "--scheme", "design"],
                                capture_output=True, text=True, timeout=120)
    assert replicated.returncode == 0, replicated.stderr
    assert backend.layout(path).osts() == set(range(9))
    return path, data


def read_pieces(path: str, pieces: int) -> tuple[bytes, float]:
    """One read request per stripe piece (O_DIRECT: no readahead merges them)."""
    started = time.monotonic()
    out = bytearray()
    fd = os.open(path, os.O_RDONLY | os.O_DIRECT)
    try:
        import mmap

        buf = mmap.mmap(-1, PIECE)
        for n in range(pieces):
            got = os.preadv(fd, [buf], n * PIECE)
            out += buf[:got]
    finally:
        os.close(fd)
    return bytes(out), time.monotonic() - started


def stats(mnt) -> dict:
    result = subprocess.run([sys.executable, "-m", "scratchkeeper", "-c", str(mnt.config),
                             "store", "stats", "--json"], capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def test_deterministic_admission_delays_beyond_the_limit_and_spreads_the_copies(make_mount):
    mnt = qos_mount(make_mount, "deterministic")
    path, data = three_copies(mnt, "q.dat")
    read, seconds = read_pieces(path, 24)
    assert read == data
    # S = (3-1)*1 + 3*1 = 5 pieces per 0.4 s interval: 24 one-piece requests take 5
    # intervals, the first of which may have been nearly over
    assert seconds >= 3 * 0.4 - 0.02, seconds
    counters = stats(mnt)
    qos = counters["qos"]
    assert (qos["mode"], qos["limit"], qos["copies"], qos["accesses"]) == \
        ("deterministic", 5, 3, 1)
    assert qos["admitted"] == 24 and qos["admitted_buckets"] == 24
    # 5 + 5 + 5 + 5 + 4 when the reads start early in an interval: 4 waits; when the first
    # interval ends on its own after 4 or 5 pieces, the other 20 or 19 wait 3 times
    assert qos["delayed"] >= 3 and qos["violations"] == 0
    # online retrieval: a piece goes to the copy whose OST served the fewest pieces in the
    # interval, so with 5 one-piece requests an interval the second mirror serves too (the
    # primary alone would read 24 pieces from OSTs 0-2), and no OST serves more than
    # ceil(24 / 5) * 1 pieces over the 5 intervals' worth of M = 1 accesses each
    reads = {o["ost"]: o["reads"] for o in counters["dispatch"]["osts"]}
    assert sum(reads.values()) == 24
    assert sum(reads.get(ost, 0) for ost in (3, 4, 5)) >= 6, reads
    assert max(reads.values()) <= 6, reads
    text = subprocess.run([sys.executable, "-m", "scratchkeeper", "-c", str(mnt.config),
                           "store", "stats"], capture_output=True, text=True, timeout=60)
    assert "admitted 24 request(s)" in text.stdout and "violations 0" in text.stdout


def test_reads_not_under_qos_are_not_admitted(make_mount):
    """A file with fewer copies than qos.copies, or a user not in qos.users, is read at once."""
    mnt = qos_mount(make_mount, "deterministic", users='users = ["12345"]')
    path, data = three_copies(mnt, "q.dat")
    read, seconds = read_pieces(path, 24)        # root is not user 12345
    assert read == data and seconds < 3 * 0.4
    qos = stats(mnt)["qos"]
    assert qos["admitted"] == 0 and qos["bypassed"] >= 24 and qos["users"] == 1


def test_off_admits_nothing(make_mount):
    off = qos_mount(make_mount, "off")
    path, data = three_copies(off, "q.dat")
    read, _ = read_pieces(path, 12)
    assert read == data[:12 * PIECE] and stats(off)["qos"]["mode"] == "off"


def test_statistical_admission_admits_more_than_s_within_epsilon(make_mount):
    mnt = qos_mount(make_mount, "statistical")
    path, data = three_copies(mnt, "s.dat")
    read, _ = read_pieces(path, 24)
    assert read == data
    qos = stats(mnt)["qos"]
    assert qos["mode"] == "statistical" and qos["admitted"] == 24
    # P_k of (9,3,1) stays near 1 a little past S = 5: more pieces per interval than S
    assert qos["admitted_buckets"] / max(1, qos["busy_intervals"]) > 5
    assert qos["risk"] <= 0.01 + 1e-9


@pytest.mark.parametrize("accesses", [1, 2])
def test_interval_retrieval_reads_an_intervals_requests_together_at_the_next_one(make_mount,
                                                                                  accesses):
    """qos.retrieval = "interval" (the flash QoS paper's design-theoretic retrieval): the S requests
    admitted in an interval, arriving spread over it, are given copies together and read at the
    start of the next interval, at most M pieces per OST. At M = 2, S = 14 waiting requests are
    more than the kernel's default of 12 asynchronous requests handed to a FUSE server at once:
    all of them must reach the mount in their interval (mount.threads sets the kernel's
    max_background), not two of them an interval later."""
    import mmap
    import threading

    interval = 0.4
    limit = 2 * accesses * accesses + 3 * accesses     # S = (c-1)M^2 + cM, c = 3
    # each waiting request holds a request thread (docs/qos.rst): more than S
    mnt = qos_mount(make_mount, "deterministic", interval=interval, retrieval="interval",
                    threads=32, accesses=accesses)
    path, data = three_copies(mnt, "i.dat", pieces=3 * limit + 3)
    assert stats(mnt)["qos"]["retrieval"] == "interval"
    for round_ in range(3):
        # start just after a boundary, so that the arrivals (spread over 70 % of the interval,
        # far more than qos.batch) all fall in one interval
        before = {o["ost"]: o["reads"] for o in stats(mnt)["dispatch"]["osts"]}
        fds = [os.open(path, os.O_RDONLY | os.O_DIRECT) for _ in range(limit)]
        now = time.monotonic()
        time.sleep((int(now / interval) + 1) * interval - now + 0.01)
        admitted_in = int(time.monotonic() / interval)
        ends, errors = {}, []

        def reader(n: int) -> None:
            buf = mmap.mmap(-1, PIECE)
            fd = fds[n]
            try:
                piece = round_ * limit + n
                got = os.preadv(fd, [buf], piece * PIECE)
                ends[n] = time.monotonic()
                if buf[:got] != data[piece * PIECE:(piece + 1) * PIECE]:
                    errors.append(n)
            finally:
                os.close(fd)
                buf.close()

        threads = []
        for n in range(limit):
            threads.append(threading.Thread(target=reader, args=(n,)))
            threads[-1].start()
            time.sleep(0.7 * interval / limit)
        for thread in threads:
            thread.join(timeout=30)
        assert not errors and len(ends) == limit
        # every read waited for the next interval, and none took longer than that one
        assert all((admitted_in + 1) * interval <= end < (admitted_in + 2) * interval
                   for end in ends.values()), (admitted_in, sorted(ends.items()))
        after = {o["ost"]: o["reads"] for o in stats(mnt)["dispatch"]["osts"]}
        served = {ost: after[ost] - before.get(ost, 0) for ost in after}
        assert sum(served.values()) == limit and max(served.values()) <= accesses, served
    qos = stats(mnt)["qos"]
    assert qos["admitted"] == 3 * limit and qos["violations"] == 0 and qos["delayed"] == 0


def test_interval_retrieval_with_fewer_threads_than_s_is_warned_at_start(tmp_path, caplog):
    """Each read interval retrieval admits holds a request thread until the next interval: a
    mount with fewer threads than S serves a full interval's last reads late, and says so."""
    import logging

    from scratchkeeper.mount.serve import qos_settings

    def settings(threads: int, retrieval: str):
        path = tmp_path / f"{threads}-{retrieval}.toml"
        path.write_text(f'[storage]\nost_count = 9\n[mount]\nthreads = {threads}\n'
                        f'[qos]\nadmission = "deterministic"\ncopies = 3\naccesses = 3\n'
                        f'retrieval = "{retrieval}"\n')
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="scratchkeeper.mount"):
            found = qos_settings(load_config(path))
        return found, [r.getMessage() for r in caplog.records]

    found, warned = settings(16, "interval")
    assert found[6] == 1 and any("mount.threads = 16 is below S = 27" in w for w in warned)
    assert settings(32, "interval")[1] == []
    found, warned = settings(16, "online")
    assert found[6] == 0 and warned == []
