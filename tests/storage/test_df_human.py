"""``store df -h``: the columns and units of ``lfs df -h``; the plain form unchanged."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from scratchkeeper.cli import main
from scratchkeeper.storage import OST_ACTIVE, OstStatus
from scratchkeeper.storage.df import human_lines, human_size, summary, use_percent
from scratchkeeper.storage.lustre.lfs import parse_df

DATA = Path(__file__).parent.parent / "data" / "lfs"


@pytest.mark.parametrize("value, text", [
    (0, "0"), (1023, "1023"), (1024, "1.0K"), (1536, "1.5K"), (44_600_000, "42.5M"),
    (1 << 30, "1.0G"), (int(1.1 * (1 << 40)), "1.1T"), (3 << 50, "3.0P"), (5 << 60, "5.0E"),
    (2000 << 60, "2000.0E"),
])
def test_sizes_are_powers_of_1024_with_one_decimal(value, text):
    assert human_size(value) == text


def test_use_percent_is_used_over_used_plus_available_rounded():
    assert use_percent(56330708, 37850660) == 60  # lfs df's OST0000 row: 59.8%
    assert use_percent(0, 0) == 0 and use_percent(0, 10) == 0 and use_percent(10, 0) == 100


def test_the_captured_lfs_df_renders_as_lfs_df_h_would():
    osts = parse_df((DATA / "df.txt").read_text())
    lines = human_lines(osts, "/mnt/testfs")
    # the header and the row layout of lfs df -h: UUID in 20 columns, sizes right-aligned in 12
    assert lines[0] == "UUID                       bytes        Used   Available Use% Mounted on"
    assert lines[1] == ("testfs-OST0000_UUID        89.8G       53.7G       36.1G  60% "
                        "/mnt/testfs[OST:0]")
    assert lines[3] == "OST0002             : inactive: inactive device"
    assert lines[5] == "OST0004             : unreachable: Resource temporarily unavailable"
    assert lines[-2] == ""
    # the sums of the OSTs that answered (0, 1 and 3): lfs df's own summary line, in -h units
    total = 3 * 94181368 * 1024
    used = (56330708 + 56385748 + 54352012) * 1024
    avail = (37850660 + 37795620 + 39829356) * 1024
    assert lines[-1] == (f"filesystem_summary: {human_size(total):>12}{human_size(used):>12}"
                         f"{human_size(avail):>12} {use_percent(used, avail):3d}% /mnt/testfs")
    assert lines[-1].split()[1:4] == ["269.5G", "159.3G", "110.1G"]
    # the columns line up with the rows', as in the samples of lfs df -h
    assert lines[-1].index("269.5G") + 6 == lines[1].index("89.8G") + 5


def test_osts_sharing_one_file_system_count_its_space_once():
    osts = [OstStatus(i, f"ost{i:04d}", OST_ACTIVE, 100 << 30, used << 20, 40 << 30)
            for i, used in enumerate((5, 7, 0))]
    shared = summary(osts, shared_space=True)
    assert (shared.total_bytes, shared.used_bytes, shared.available_bytes) == \
        (100 << 30, 12 << 20, 40 << 30)
    added = summary(osts)
    assert (added.total_bytes, added.available_bytes) == (300 << 30, 120 << 30)
    assert summary([OstStatus(0, "ost0000", "failed")]) is None


@pytest.fixture
def config(tmp_path):
    path = tmp_path / "site.toml"
    path.write_text(f"""
[storage]
backend = "local"
scratch_root = "{tmp_path / 'scratch'}"
store_root = "{tmp_path / 'store'}"
ost_count = 3

[logging]
level = "WARNING"
""")
    return str(path)


def test_store_df_h_on_the_local_store(config, tmp_path, capsys):
    local = tmp_path / "in.bin"
    local.write_bytes(os.urandom(3 << 20))
    assert main(["-c", config, "store", "put", str(local), "f", "--stripe-count", "3",
                 "--stripe-size", "1M"]) == 0
    assert main(["-c", config, "store", "fail-ost", "2"]) == 0
    capsys.readouterr()
    assert main(["-c", config, "store", "df"]) == 0
    plain = capsys.readouterr().out.splitlines()
    # the plain form as it was: raw byte counts in its own columns
    assert plain[0].split() == ["OST", "name", "state", "used", "available", "detail"]
    assert plain[1].split()[:4] == ["0", "ost0000", "active", str(1 << 20)]
    assert main(["-c", config, "store", "df", "-h"]) == 0
    lines = capsys.readouterr().out.splitlines()
    statvfs = os.statvfs(tmp_path)
    size = human_size(statvfs.f_blocks * statvfs.f_frsize)
    scratch = str(tmp_path / "scratch")
    assert lines[0] == "UUID                       bytes        Used   Available Use% Mounted on"
    assert lines[1].split() == ["ost0000_UUID", size, "1.0M", lines[1].split()[3],
                                lines[1].split()[4], f"{scratch}[OST:0]"]
    assert lines[3] == "ost0002             : failed: failed by fail-ost"
    summary_line = lines[-1].split()
    # one file system: its size once, the objects' 2 MiB on the two OSTs that answer
    assert summary_line[:3] == ["filesystem_summary:", size, "2.0M"]
    assert summary_line[-1] == scratch
    assert main(["-c", config, "store", "df", "--human-readable"]) == 0
    assert capsys.readouterr().out.splitlines() == lines
    with pytest.raises(SystemExit) as help_exit:
        main(["-c", config, "store", "df", "--help"])
    assert help_exit.value.code == 0
    assert "-h, --human-readable" in capsys.readouterr().out
