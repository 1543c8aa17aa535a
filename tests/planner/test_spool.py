"""A chain's spool folder is its owner's alone (issue 46, item 7, on the chain service's and
``submit``'s paths as on the burst-buffer path): the data jobs' scripts name the job's sources
and destinations, their logs hold the transfers' output."""

from __future__ import annotations

import dataclasses
import os
import stat

import pytest

from scratchkeeper.config import SiteConfig
from scratchkeeper.planner.spool import SPOOL_DIR_MODE, make_spool, spool_dir


@pytest.fixture
def spool_config(tmp_path) -> SiteConfig:
    config = SiteConfig()
    return dataclasses.replace(config, state=dataclasses.replace(config.state,
                                                                  spool=str(tmp_path)))


def test_a_spool_folder_is_made_for_its_owner_alone_whatever_the_umask(spool_config):
    old = os.umask(0o022)
    try:
        folder = make_spool(spool_config, "chain-a")
    finally:
        os.umask(old)
    info = os.stat(folder)
    assert folder == spool_dir(spool_config, "chain-a")
    assert stat.S_IMODE(info.st_mode) == SPOOL_DIR_MODE == 0o700


def test_a_spool_folder_made_by_root_for_a_user_is_the_users(spool_config, skplain):
    folder = spool_dir(spool_config, "chain-b")
    folder.mkdir(parents=True, mode=0o755)  # a folder left open by an earlier version
    make_spool(spool_config, "chain-b", skplain)
    info = os.stat(folder)
    assert (info.st_uid, info.st_gid) == skplain
    assert stat.S_IMODE(info.st_mode) == 0o700


def test_a_link_in_the_spool_folders_place_is_refused_not_followed(spool_config, tmp_path,
                                                                    skplain):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(mode=0o755)
    spool_dir(spool_config, "chain-c").parent.mkdir(parents=True, exist_ok=True)
    spool_dir(spool_config, "chain-c").symlink_to(elsewhere)
    with pytest.raises(OSError):
        make_spool(spool_config, "chain-c", skplain)
    info = os.stat(elsewhere)
    assert info.st_uid == os.getuid() and stat.S_IMODE(info.st_mode) == 0o755
