"""What a killed recoveryd leaves behind is removed by the next start; an OST the storage does
not have is an input error; a failed ranged read names its byte."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time

import pytest

from scratchkeeper.cli import main
from scratchkeeper.config import TransferConfig
from scratchkeeper.errors import TransferError
from scratchkeeper.recovery import records
from scratchkeeper.recovery.client import RecoveryClient
from scratchkeeper.recovery.service import RecoveryService, resume
from scratchkeeper.state import StateStore
from scratchkeeper.storage import Extent
from scratchkeeper.transfer import gridftp, ranged

from .conftest import NoQueue, read_all, stage, start_recoveryd, write_site

KiB = 1 << 10


def _dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_a_start_removes_the_spool_of_dead_processes_only(site_dir):
    site = write_site(site_dir, ost_count=4)
    scratch = site.root / "scratch"
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        dead = scratch / f".sk-ranged-{_dead_pid()}-abc123"
        older = scratch / ".sk-ranged-q1w2e3"  # named before spools carried their pid
        live = scratch / f".sk-ranged-{sleeper.pid}-def456"
        kept = scratch / "user-data.sk-ranged-1"
        for folder in (dead, older, live):
            folder.mkdir(mode=0o700)
            (folder / "range").write_bytes(b"x" * 1000)
        kept.write_bytes(b"data")
        store = records.open_records(StateStore(site.config.state.database))
        resume(store, site.backend)
        assert not dead.exists() and not older.exists()
        assert (live / "range").exists() and kept.read_bytes() == b"data"
    finally:
        sleeper.kill()
        sleeper.wait()


def test_kill_minus_nine_during_a_globus_url_copy_patch_leaves_no_spool(site_dir, local_cluster,
                                                                        sources):
    site = write_site(site_dir, ost_count=8,
                      extra='[recovery]\nftp_method = "globus-url-copy"\nchunk_size = 65536\n'
                            'check_interval = 3600.0\nscope = "queued-inputs"')
    source, data = sources.make("spool.bin", 8_000_009)
    backend = site.backend
    path = stage(backend, "spool.bin", data, sources.ftp(source), stripe_count=4,
                 stripe_size=64 * KiB)
    backend.fail_ost(backend.layout(path).ost_list[1])
    scratch = site.root / "scratch"
    daemon = start_recoveryd(site)
    try:
        RecoveryClient(site.config.recovery.socket).recover(path, wait=False)
        deadline = time.monotonic() + 60
        while not list(scratch.glob(".sk-ranged-*")):
            assert time.monotonic() < deadline, "no globus-url-copy spool appeared"
            time.sleep(0.005)
    finally:
        os.kill(daemon.pid, signal.SIGKILL)
        daemon.wait(timeout=10)
    time.sleep(0.5)  # a globus-url-copy the daemon ran may still write its range
    assert list(scratch.glob(".sk-ranged-*")), "the kill left a spool folder (the case tested)"
    daemon = start_recoveryd(site)
    try:
        assert list(scratch.glob(".sk-ranged-*")) == [] or all(
            f.name.startswith(f".sk-ranged-{daemon.pid}-") for f in scratch.glob(".sk-ranged-*"))
        status = RecoveryClient(site.config.recovery.socket).wait(path, 120)
        assert status["whole"], status
    finally:
        daemon.send_signal(signal.SIGTERM)
        daemon.wait(timeout=30)
    assert list(scratch.glob(".sk-ranged-*")) == []
    assert read_all(backend, path) == data


def _site_with_file(site_dir):
    site = write_site(site_dir, ost_count=8)
    data = os.urandom(300_001)
    source = site.root / "source.bin"
    source.write_bytes(data)
    path = stage(site.backend, "ost.bin", data, f"file://{source}", stripe_count=2,
                 stripe_size=64 * KiB)
    return site, path


@pytest.mark.parametrize("ost", ["8", "99", "-1"])
def test_recover_an_ost_the_storage_does_not_have_is_an_input_error(site_dir, capsys, ost):
    site, path = _site_with_file(site_dir)
    assert main(["-c", str(site.config_path), "recover", path, "--inline", "--ost", ost]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"scratchkeeper: OST {ost}: no such OST (the storage has OSTs 0-7)"] \
        or (len(err) == 1 and f"OST {ost}: no such OST (the storage has OSTs 0-7)" in err[0])
    service = RecoveryService(site.config, scheduler=NoQueue())
    service.start()
    try:
        assert main(["-c", str(site.config_path), "recover", path, "--ost", ost]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and f"OST {ost}: no such OST" in err[0], err
        assert records.recent_requests(service.store, None) == []  # nothing queued
    finally:
        service.shutdown()


def test_a_mode_e_transfer_cut_in_a_block_names_the_byte():
    wanted = [Extent(1_000_000, 100_000)]
    receiver = gridftp._ModeEReceiver("ftp://h/f", wanted)
    sender, receiving = socket.socketpair()
    try:
        sender.sendall(gridftp._HEADER.pack(0, 100_000, 1_000_000) + b"x" * 40_000)
        sender.close()
        with pytest.raises(TransferError, match="at byte 1040000") as failed:
            list(receiver.receive(receiving))
        assert failed.value.offset == 1_040_000
    finally:
        receiving.close()


def test_any_reader_failure_names_the_first_byte_not_delivered(tmp_path):
    source = tmp_path / "gone.bin"
    with ranged.open_ranged(f"file://{source}", TransferConfig()) as reader:
        with pytest.raises(TransferError, match=r"\(at byte 4096\)") as failed:
            list(reader.fetch([Extent(4096, 10), Extent(0, 10)]))
    assert failed.value.offset == 4096
