"""Ranged readers' choices made before any connection (scratchkeeper.transfer.ranged): which
failures are permanent, the one-line error text, retargeting an idle reader within its server.
No server is reached: the reads of real servers are in tests/recovery/test_ranged_cluster.py."""

from __future__ import annotations

import pytest

from scratchkeeper.config import TransferConfig
from scratchkeeper.errors import TransferError
from scratchkeeper.storage.layout import Extent
from scratchkeeper.transfer import ranged
from scratchkeeper.transfer.ranged import one_line, open_ranged


def test_unreachable_server_is_transient():
    with open_ranged("ftp://127.0.0.1:1/x/y", TransferConfig(), timeout=5) as reader:
        with pytest.raises(TransferError) as caught:
            list(reader.fetch([Extent(0, 10)]))
    assert not caught.value.permanent


def test_bad_uri_is_permanent():
    with pytest.raises(TransferError, match="unknown URI scheme") as caught:
        open_ranged("hsi://archive/x", TransferConfig())
    assert caught.value.permanent
    with pytest.raises(TransferError) as caught:
        open_ranged("scp://host/x", TransferConfig())
    assert caught.value.permanent


def test_one_line_keeps_distinct_lines():
    assert one_line("500-a\n500-a\n\n 500 b \n") == "500-a; 500 b"
    assert len(one_line("x" * 1000)) == 300


def test_an_idle_gridftp_reader_is_retargeted_only_within_its_server():
    from scratchkeeper.transfer.uri import parse_location
    reader = ranged.open_ranged("ftp://127.0.0.1:2811/data/a.bin", TransferConfig())
    other_file = ranged.open_ranged("ftp://127.0.0.1:2811/data/b.bin", TransferConfig())
    assert reader.server == other_file.server
    reader.retarget(parse_location("ftp://127.0.0.1:2811/data/b.bin"))
    assert reader.location.path == "/data/b.bin" and reader.uri.endswith("/b.bin")
    for elsewhere in ("ftp://127.0.0.1:2812/data/b.bin", "ftp://alice:pw@127.0.0.1:2811/b.bin",
                      "ftp://localhost:2811/data/b.bin"):
        with pytest.raises(ValueError, match="not a file of this reader's server"):
            reader.retarget(parse_location(elsewhere))
        assert ranged.open_ranged(elsewhere, TransferConfig()).server != reader.server
    http = ranged.open_ranged("http://127.0.0.1:8080/a.bin", TransferConfig())
    assert http.server is None
    with pytest.raises(ValueError, match="serves only"):
        http.retarget(parse_location("http://127.0.0.1:8080/b.bin"))
