"""No change of a striped file is half done through the scratch mount (issue 46): with an OST of
the file failed, a truncate, a write, a fallocate or a rename over it either fails with EIO and
changes nothing, or changes the file whole; once the OST is back the file reads the original
bytes or the fully changed ones, never a mix (docs/mount.rst, "All or nothing")."""

from __future__ import annotations

import errno
import hashlib
import os
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from scratchkeeper.config import load_config
from scratchkeeper.storage import open_backend
from scratchkeeper.storage.layout import FileLayout

LOV = "security.scratchkeeper.lov"
STRIPE = 65536
NOTICE_TIMEOUT = 10.0  # seconds the mount may take to see an OST fail or come back


def layout_of(mnt, name: str) -> FileLayout:
    return FileLayout.from_lov(os.getxattr(mnt.mdt / name, LOV), name)


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


class Osts:
    """Fails and restores OSTs with the store's own ``fail_ost``/``restore_ost`` (what
    ``scratchkeeper store fail-ost``/``restore-ost`` run), and waits until the mount saw it."""

    def __init__(self, mnt):
        self.mnt = mnt
        self.store = open_backend(load_config(mnt.config))
        self.failed: set[int] = set()

    def _seen(self, index: int, state: str) -> int:
        return self.mnt.log.read_text().count(f"OST {index} is {state}")

    def _wait(self, index: int, state: str, before: int) -> None:
        deadline = time.monotonic() + NOTICE_TIMEOUT
        while self._seen(index, state) <= before:
            assert time.monotonic() < deadline, f"the mount did not see OST {index} {state}"
            time.sleep(0.01)

    def fail(self, index: int) -> None:
        before = self._seen(index, "failed")
        self.store.fail_ost(index)
        self.failed.add(index)
        self._wait(index, "failed", before)

    def restore(self, index: int) -> None:
        before = self._seen(index, "back")
        self.store.restore_ost(index)
        self.failed.discard(index)
        self._wait(index, "back", before)

    def restore_all(self) -> None:
        for index in sorted(self.failed):
            self.restore(index)


@pytest.fixture
def osts(mnt):
    osts = Osts(mnt)
    try:
        yield osts
    finally:
        osts.restore_all()


def striped_file(mnt, name: str) -> tuple[bytes, FileLayout]:
    """A file of two objects (stripe count 2), each holding several stripes, the last short."""
    data = os.urandom(5 * STRIPE + 1234)
    (mnt.root / name).write_bytes(data)
    layout = layout_of(mnt, name)
    assert len(set(layout.ost_list)) == 2
    return data, layout


def object_ids(mnt) -> set[str]:
    return {entry.name for index in range(4) for entry in os.scandir(mnt.ost(index))}


# -- each operation, with the OST of one object or the other failed --------------------------
# Each returns the bytes the file holds if it succeeds; it raises OSError if it fails.

def o_trunc(path: Path, data: bytes) -> bytes:
    os.close(os.open(path, os.O_WRONLY | os.O_TRUNC))
    return b""


def truncate_to_zero(path: Path, data: bytes) -> bytes:
    os.truncate(path, 0)
    return b""


def truncate_smaller(path: Path, data: bytes) -> bytes:
    os.truncate(path, 2 * STRIPE + 100)  # both objects shrink
    return data[:2 * STRIPE + 100]


def ftruncate_smaller(path: Path, data: bytes) -> bytes:
    fd = os.open(path, os.O_RDWR)
    try:
        os.ftruncate(fd, 3 * STRIPE - 7)
    finally:
        os.close(fd)
    return data[:3 * STRIPE - 7]


def ftruncate_to_zero(path: Path, data: bytes) -> bytes:
    fd = os.open(path, os.O_RDWR)
    try:
        os.ftruncate(fd, 0)
    finally:
        os.close(fd)
    return b""


def write_across(path: Path, data: bytes) -> bytes:
    # from the end of stripe 0 (object 0) through stripe 1 (object 1) into stripe 2, in whole
    # pages: the kernel sends it as one request (see the next test for one it splits)
    new = os.urandom(STRIPE + 8192)
    fd = os.open(path, os.O_WRONLY)
    try:
        assert os.pwrite(fd, new, STRIPE - 4096) == len(new)
    finally:
        os.close(fd)
    return data[:STRIPE - 4096] + new + data[STRIPE - 4096 + len(new):]


def fallocate_past_the_end(path: Path, data: bytes) -> bytes:
    fd = os.open(path, os.O_WRONLY)
    try:
        os.posix_fallocate(fd, len(data), 3 * STRIPE)  # stripes 5 to 8: both objects
    finally:
        os.close(fd)
    return data + bytes(3 * STRIPE)


OPERATIONS = [o_trunc, truncate_to_zero, truncate_smaller, ftruncate_smaller, ftruncate_to_zero,
              write_across, fallocate_past_the_end]


@pytest.mark.parametrize("operation", OPERATIONS, ids=lambda f: f.__name__)
@pytest.mark.parametrize("position", [0, 1])
def test_a_change_with_an_object_on_a_failed_ost_fails_whole(mnt, osts, operation, position):
    data, layout = striped_file(mnt, "log")
    path = mnt.root / "log"
    osts.fail(layout.ost_list[position])
    with pytest.raises(OSError) as err:
        operation(path, data)
    assert err.value.errno == errno.EIO
    assert os.stat(path).st_size == len(data)
    osts.restore(layout.ost_list[position])
    assert sha(path.read_bytes()) == sha(data)
    assert layout_of(mnt, "log") == layout  # no mirror to mark stale: the layout is as it was


@pytest.mark.parametrize("position", [0, 1])
def test_a_write_the_kernel_splits_ends_short_with_exactly_its_count_written(mnt, osts,
                                                                             position):
    """A write(2) starting inside a page the kernel has not cached reaches the mount as two
    requests (that page, then the rest): the first may go through and the second fail. The
    caller is told the count, and exactly that many bytes changed, as POSIX allows."""
    data, layout = striped_file(mnt, "s")
    osts.fail(layout.ost_list[position])
    new = os.urandom(STRIPE + 200)  # from 100 bytes before the end of stripe 0 into stripe 2
    fd = os.open(mnt.root / "s", os.O_WRONLY)
    try:
        written = os.pwrite(fd, new, STRIPE - 100)
    except OSError as err:
        assert err.errno == errno.EIO
        written = 0
    finally:
        os.close(fd)
    assert written in (0, 100)  # the first page (object 0) alone, or nothing
    osts.restore(layout.ost_list[position])
    want = data[:STRIPE - 100] + new[:written] + data[STRIPE - 100 + written:]
    assert sha((mnt.root / "s").read_bytes()) == sha(want)


def test_what_no_failed_object_holds_changes_during_the_outage(mnt, osts):
    """Changes that leave the failed OST's object as it is go through, whole."""
    data, layout = striped_file(mnt, "f")
    path = mnt.root / "f"
    osts.fail(layout.ost_list[0])  # object 0: stripes 0, 2 and 4
    os.truncate(path, 5 * STRIPE + 100)  # only the short last stripe (object 1) shrinks
    fd = os.open(path, os.O_RDWR)
    try:
        os.pwrite(fd, b"x" * 1000, 3 * STRIPE + 10)  # stripe 3: object 1
        os.ftruncate(fd, 7 * STRIPE)  # a larger size changes no object
        os.posix_fallocate(fd, 7 * STRIPE + 5, 100)  # stripe 7: object 1
    finally:
        os.close(fd)
    osts.restore(layout.ost_list[0])
    want = bytearray(data[:5 * STRIPE + 100] + bytes(2 * STRIPE + 5))
    want[3 * STRIPE + 10:3 * STRIPE + 1010] = b"x" * 1000
    assert sha(path.read_bytes()) == sha(bytes(want))


@pytest.mark.parametrize("grow", ["truncate", "write", "fallocate"])
def test_bytes_an_object_holds_past_the_end_never_come_back(mnt, grow):
    """A truncate sets the size before it cuts the objects; bytes left past the end (a cut
    that failed, the mount killed in between) are cut before the file grows over them."""
    data = os.urandom(STRIPE + 100)  # object 0: stripe 0; object 1: 100 bytes of stripe 1
    path = mnt.root / "g"
    path.write_bytes(data)
    layout = layout_of(mnt, "g")
    with open(mnt.ost(layout.ost_list[1]) / layout.first.objects[1].object_id, "r+b") as obj:
        obj.seek(100)
        obj.write(os.urandom(STRIPE - 100))  # as if a cut to 100 bytes never happened
    fd = os.open(path, os.O_RDWR)
    try:
        if grow == "truncate":
            os.ftruncate(fd, 3 * STRIPE)
        elif grow == "write":
            os.pwrite(fd, b"z", 3 * STRIPE - 1)
        else:
            os.posix_fallocate(fd, 0, 3 * STRIPE)
    finally:
        os.close(fd)
    want = data + bytes(3 * STRIPE - len(data))
    if grow == "write":
        want = want[:-1] + b"z"
    assert sha(path.read_bytes()) == sha(want)


def test_a_job_rewriting_its_log_during_an_outage(mnt, osts):
    """The issue's reproduction: open(O_TRUNC) of a log with an object on a failed OST."""
    data, layout = striped_file(mnt, "job.log")
    osts.fail(layout.ost_list[1])
    with pytest.raises(OSError) as err:
        with open(mnt.root / "job.log", "wb") as log:
            log.write(b"run 2\n")
    assert err.value.errno == errno.EIO
    osts.restore(layout.ost_list[1])
    assert sha((mnt.root / "job.log").read_bytes()) == sha(data)
    with open(mnt.root / "job.log", "wb") as log:  # the OST back: the rewrite works
        log.write(b"run 3\n")
    assert (mnt.root / "job.log").read_bytes() == b"run 3\n"


def test_a_handle_opened_during_the_outage_writes_once_the_ost_is_back(mnt, osts):
    data, layout = striped_file(mnt, "h")
    osts.fail(layout.ost_list[1])
    fd = os.open(mnt.root / "h", os.O_RDWR)
    try:
        with pytest.raises(OSError) as err:
            os.pwrite(fd, b"y" * 10, STRIPE)  # stripe 1: object 1
        assert err.value.errno == errno.EIO
        osts.restore(layout.ost_list[1])
        assert os.pwrite(fd, b"y" * 10, STRIPE) == 10
    finally:
        os.close(fd)
    assert (mnt.root / "h").read_bytes() == data[:STRIPE] + b"y" * 10 + data[STRIPE + 10:]


def test_rename_over_a_file_on_a_failed_ost_deletes_all_its_objects(mnt, osts):
    victim, layout = striped_file(mnt, "out")
    new = os.urandom(3 * STRIPE)
    (mnt.root / "out.tmp").write_bytes(new)
    kept = object_ids(mnt) - {o.object_id for o in layout.first.objects}
    osts.fail(layout.ost_list[0])
    os.rename(mnt.root / "out.tmp", mnt.root / "out")
    assert sha((mnt.root / "out").read_bytes()) == sha(new)
    osts.restore(layout.ost_list[0])
    assert sha((mnt.root / "out").read_bytes()) == sha(new)
    # the replaced file's objects go, the one on the failed OST once it is back
    deadline = time.monotonic() + NOTICE_TIMEOUT
    while object_ids(mnt) != kept:
        assert time.monotonic() < deadline, object_ids(mnt) ^ kept
        time.sleep(0.01)


def test_a_mirror_on_the_failed_ost_goes_stale_and_the_file_stays_whole(mnt, osts):
    data = os.urandom(4 * STRIPE + 10)
    (mnt.root / "m").write_bytes(data)
    layout = mnt.add_mirror("m")
    osts.fail(layout.components[1].ost_list[0])
    os.truncate(mnt.root / "m", STRIPE + 5)
    after = layout_of(mnt, "m")
    assert "stale" in after.components[1].flags.split(",")
    assert "stale" not in after.components[0].flags.split(",")
    osts.restore(layout.components[1].ost_list[0])
    assert (mnt.root / "m").read_bytes() == data[:STRIPE + 5]
    # the stale mirror is never read, the other failed too: the truncate is not undone
    osts.fail(layout.components[0].ost_list[1])
    osts.restore(layout.components[0].ost_list[1])
    assert (mnt.root / "m").read_bytes() == data[:STRIPE + 5]


# -- random operations against a model -------------------------------------------------------

SIZES = st.integers(0, 6 * STRIPE + 300)
STEPS = st.one_of(
    st.tuples(st.just("write"), st.integers(0, 1), SIZES, st.integers(1, 2 * STRIPE + 50)),
    st.tuples(st.just("truncate"), st.integers(0, 1), SIZES),
    st.tuples(st.just("o_trunc"), st.integers(0, 1)),
    st.tuples(st.just("fallocate"), st.integers(0, 1), SIZES, st.integers(1, 2 * STRIPE)),
    st.tuples(st.just("fail"), st.integers(0, 3)),
    st.tuples(st.just("restore"), st.integers(0, 3)),
)


def apply_step(step, paths, fds, model, osts, seed: int) -> None:
    """Run one step through the mount; the model takes it only when it succeeded."""
    kind = step[0]
    if kind == "fail":
        if step[1] not in osts.failed:
            osts.fail(step[1])
        return
    if kind == "restore":
        if step[1] in osts.failed:
            osts.restore(step[1])
        return
    which = step[1]
    old = model[which]
    try:
        if kind == "write":
            offset, length = step[2], step[3]
            data = hashlib.shake_256(f"{seed}".encode()).digest(length)
            # the kernel may split it in requests: a short count says what was written
            length = os.pwrite(fds[which], data, offset)
            assert 0 < length, "a write of nothing"
            grown = old + bytes(max(0, offset - len(old)))
            model[which] = grown[:offset] + data[:length] + grown[offset + length:]
        elif kind == "truncate":
            os.ftruncate(fds[which], step[2])
            model[which] = old[:step[2]] + bytes(max(0, step[2] - len(old)))
        elif kind == "o_trunc":
            os.close(os.open(paths[which], os.O_WRONLY | os.O_TRUNC))
            model[which] = b""
        elif kind == "fallocate":
            offset, length = step[2], step[3]
            os.posix_fallocate(fds[which], offset, length)
            model[which] = old + bytes(max(0, offset + length - len(old)))
    except OSError as err:
        assert err.errno == errno.EIO, err
        assert osts.failed, "EIO with every OST up"


@given(steps=st.lists(STEPS, min_size=1, max_size=14))
@settings(suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_random_changes_with_osts_failing_match_a_model(mnt, osts, steps):
    """Each example: two striped files (one with a mirror), random writes, truncates, O_TRUNC
    opens and fallocates, OSTs failing and coming back; after each step every file whose OSTs
    are all up reads back exactly as the model, which took the steps that succeeded."""
    osts.restore_all()
    directory = mnt.root / f"ex{time.monotonic_ns()}"
    directory.mkdir()
    paths = [directory / "plain", directory / "mirrored"]
    model = [os.urandom(3 * STRIPE + 77), os.urandom(2 * STRIPE + 5)]
    for path, data in zip(paths, model):
        path.write_bytes(data)
    mnt.add_mirror(str(paths[1].relative_to(mnt.root)))
    layouts = [layout_of(mnt, str(p.relative_to(mnt.root))) for p in paths]
    fds = [os.open(p, os.O_RDWR) for p in paths]
    try:
        for number, step in enumerate(steps):
            apply_step(step, paths, fds, model, osts, number)
            for path, layout, want in zip(paths, layouts, model):
                if not layout.osts() & osts.failed:
                    assert sha(path.read_bytes()) == sha(want), (step, path.name)
        osts.restore_all()
        for path, want in zip(paths, model):
            assert sha(path.read_bytes()) == sha(want), path.name
    finally:
        for fd in fds:
            os.close(fd)
