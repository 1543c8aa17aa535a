"""The recovery commands as a user runs them."""

from __future__ import annotations

import json
import os
from pathlib import Path

from scratchkeeper.cli import main
from scratchkeeper.config import load_config
from scratchkeeper.recovery.service import RecoveryService
from scratchkeeper.storage import open_backend

from .conftest import read_all, stage

KiB = 1 << 10


def _damaged(site, sources, name="cli.bin", size=1_234_567, extra_sources=None):
    source, data = sources.make(name, size)
    backend = site.backend
    path = stage(backend, name, data, sources.ftp(source), stripe_count=4, stripe_size=64 * KiB,
                 extra_sources=extra_sources)
    backend.fail_ost(backend.layout(path).ost_list[3])
    return backend, path, data


def test_recover_inline_explain(site, sources, capsys):
    backend, path, data = _damaged(site, sources, extra_sources=[])
    assert main(["-c", str(site.config_path), "recovery", "status", path]) == 1
    assert "damaged (failed OST" in capsys.readouterr().out
    assert main(["-c", str(site.config_path), "recover", path, "--inline", "--explain"]) == 0
    out = capsys.readouterr().out
    assert f"{path}: patched: " in out and "verified by ranges" in out
    assert "chunks" in out and "single-source" in out
    assert read_all(backend, path) == data
    assert main(["-c", str(site.config_path), "recovery", "status", path]) == 0
    assert f"{path}: whole" in capsys.readouterr().out


def test_recover_json_through_the_daemon_and_list(site, sources, capsys):
    backend, path, data = _damaged(site, sources, "daemon.bin",
                                   extra_sources=[])
    service = RecoveryService(site.config)
    service.start()
    try:
        assert main(["-c", str(site.config_path), "recover", path, "--json"]) == 0
        outcome = json.loads(capsys.readouterr().out)
        assert outcome["state"] == "patched" and outcome["plan"]["chunks"] > 0
        assert main(["-c", str(site.config_path), "recovery", "list"]) == 0
        assert "done" in capsys.readouterr().out
    finally:
        service.shutdown()
    assert read_all(backend, path) == data


def test_read_waits_for_the_patch(site, sources, tmp_path):
    backend, path, data = _damaged(site, sources, "read.bin", 2_000_003)
    service = RecoveryService(site.config)
    service.start()  # workers and socket only: the read's own report must trigger the patch
    try:
        output = tmp_path / "copy.bin"
        assert main(["-c", str(site.config_path), "read", path, "-o", str(output)]) == 0
        assert output.read_bytes() == data
    finally:
        service.shutdown()


def test_read_without_the_service_fails_in_one_line(site, sources, capsys, tmp_path):
    _, path, _ = _damaged(site, sources, "nodaemon.bin")
    assert main(["-c", str(site.config_path), "read", path, "-o", str(tmp_path / "x")]) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith("scratchkeeper: recovery service not running") and "\n" not in err


def test_paths_outside_scratch_and_symlinks_out_are_refused(site, capsys):
    assert main(["-c", str(site.config_path), "recover", "/etc/passwd", "--inline"]) == 2
    assert "outside the scratch root" in capsys.readouterr().err
    # links as users make them through the mount: in the store's namespace (its MDT), which
    # recovery resolves them in, never through the mount
    mdt = Path(open_backend(load_config(site.config_path)).mdt_root)
    mdt.mkdir(parents=True, exist_ok=True)
    os.symlink("/etc", mdt / "escape")
    os.symlink("../..", mdt / "up")
    os.symlink(str(site.root / "scratch" / "escape"), mdt / "inside")
    for name in ("escape/passwd", "up/etc/passwd", "inside/passwd"):
        assert main(["-c", str(site.config_path), "recover",
                     str(site.root / "scratch" / name), "--inline"]) == 2
        assert "outside the scratch root" in capsys.readouterr().err, name
    os.symlink("escape", mdt / "link")
    assert main(["-c", str(site.config_path), "recover", str(site.root / "scratch" / "link"),
                 "--inline"]) == 2
    assert "is a symbolic link" in capsys.readouterr().err


def test_recoveryd_once(site, sources, capsys):
    backend, path, data = _damaged(site, sources, "once.bin")
    assert main(["-c", str(site.config_path), "recoveryd", "--once"]) == 0
    assert f"{path}: patched" in capsys.readouterr().out
    assert read_all(backend, path) == data


def test_hook_needs_a_job_id(site, capsys, monkeypatch):
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    monkeypatch.delenv("PBS_JOBID", raising=False)
    assert main(["-c", str(site.config_path), "recovery", "hook"]) == 2
    assert "no job id" in capsys.readouterr().err
