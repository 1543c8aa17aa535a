"""The local store of the running local cluster: a GridFTP stage-in written through the scratch
mount (the store served at the scratch root) is a striped store file, and its commit keeps it.

Marked ``cluster``; it never fails an OST, since other tests share the cluster's store.
"""

from __future__ import annotations

import os
import shutil
import uuid

import pytest

from scratchkeeper.config import load_config
from scratchkeeper.storage import open_backend


@pytest.fixture
def cluster_paths(local_cluster):
    tag = f"storage-{uuid.uuid4().hex[:8]}"
    source = local_cluster.source_dir / f"{tag}.dat"
    scratch_dir = local_cluster.scratch_root / "tests" / tag
    scratch_dir.mkdir(parents=True)
    yield source, scratch_dir
    source.unlink(missing_ok=True)
    shutil.rmtree(scratch_dir, ignore_errors=True)


def test_gridftp_stage_in_becomes_a_striped_file(local_cluster, cluster_paths):
    source, scratch_dir = cluster_paths
    content = os.urandom(5 * 1024 * 1024 + 12_345)
    source.write_bytes(content)
    staged = scratch_dir / "input.dat"
    local_cluster.command(["globus-url-copy", f"{local_cluster.gridftp_url}{source}",
                           f"file://{staged}"], timeout=60)
    backend = open_backend(load_config(local_cluster.site_config))
    written = backend.layout(str(staged))  # a store file from its first byte
    layout = backend.import_file(str(staged), stripe_count=4, stripe_size=1 << 20)
    try:
        # the commit kept it where the transfer wrote it, with the layout it got then (the
        # site's default: 4 stripes of 1 MiB)
        assert layout == written and layout.stripe_count == 4 and layout.stripe_size == 1 << 20
        assert staged.read_bytes() == content
        backend.set_xattr(layout.path, "user.scratchkeeper.source",
                          f"{local_cluster.gridftp_url}{source}".encode())
        assert b"".join(backend.open_reader(layout.path)) == content
        assert layout.path in backend.files_on_ost(layout.ost_list[0])
        osts = backend.check_osts(timeout=5.0)
        assert {o.ost_index for o in osts} >= set(layout.ost_list)
    finally:
        backend.remove(layout.path)
    assert not backend.exists(layout.path) and not staged.exists()
