"""``open_backend``: picks the configured backend, validates its keys, runs nothing."""

from __future__ import annotations

import pytest

from scratchkeeper.config import parse_config
from scratchkeeper.errors import ConfigError
from scratchkeeper.runner import CommandRunner, get_runner, set_runner
from scratchkeeper.storage import open_backend
from scratchkeeper.storage.local import LocalStripedStore
from scratchkeeper.storage.lustre import LustreBackend


def config(tmp_path, extra: str = ""):
    return parse_config(f"""
[storage]
scratch_root = "{tmp_path / 'scratch'}"
store_root = "{tmp_path / 'store'}"
ost_count = 8
{extra}
""", "site.toml")


def test_local_backend_with_pools_touches_nothing(tmp_path):
    backend = open_backend(config(tmp_path, 'pools = { flash = "4-7", slow = "0,1" }'))
    assert isinstance(backend, LocalStripedStore)
    assert backend.pools == {"flash": (4, 5, 6, 7), "slow": (0, 1)}
    assert not (tmp_path / "store").exists()


def test_lustre_backend_runs_no_command(tmp_path):
    previous = set_runner(CommandRunner())
    try:
        with get_runner().capture() as commands:
            backend = open_backend(config(tmp_path, 'backend = "lustre"\nlfs = "/opt/lfs"'))
        assert isinstance(backend, LustreBackend) and backend.lfs == "/opt/lfs"
        assert commands == []
    finally:
        set_runner(previous)


@pytest.mark.parametrize("extra,message", [
    ('pools = { flash = "4-x" }', "storage.pools.flash"),
    ('pools = { big = "6-9" }', "beyond storage.ost_count"),
    ("stripe_size = 100000", "multiple of 65536"),
])
def test_bad_storage_keys_name_file_and_key(tmp_path, extra, message):
    with pytest.raises(ConfigError, match=message) as caught:
        open_backend(config(tmp_path, extra))
    assert str(caught.value).startswith("site.toml")
