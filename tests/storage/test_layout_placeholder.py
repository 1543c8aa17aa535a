"""A stage-in's layout on the local store: an empty file laid out before the transfer
(``store setstripe --file``) gives its layout to the data the transfer writes there."""

import shutil

from scratchkeeper.storage import LayoutRequest


def test_a_copy_over_the_laid_out_empty_file_keeps_its_layout(local_store, tmp_path):
    source = tmp_path / "in.dat"
    source.write_bytes(bytes(range(256)) * 4096)  # 1 MiB
    placeholder = local_store.create("w/in.dat", LayoutRequest(stripe_count=3,
                                                               stripe_size=128 << 10))
    assert (placeholder.stripe_count, placeholder.stripe_size) == (3, 128 << 10)
    (tmp_path / "scratch" / "w").mkdir()
    shutil.copyfile(source, tmp_path / "scratch" / "w" / "in.dat")  # what the transfer does
    layout = local_store.import_file("w/in.dat", replace=True)
    assert (layout.stripe_count, layout.stripe_size) == (3, 128 << 10)
    assert local_store.read("w/in.dat", 0, 1 << 20) == source.read_bytes()


def test_a_file_with_data_is_replaced_with_the_directory_default(local_store, tmp_path):
    """Only an empty placeholder passes its layout on: a re-staged input takes the default."""
    old = tmp_path / "old"
    old.write_bytes(b"x" * 1000)
    with open(old, "rb") as stream:
        local_store.put_file("w/in.dat", stream.fileno(), 1000,
                             LayoutRequest(stripe_count=2, stripe_size=128 << 10))
    (tmp_path / "scratch" / "w").mkdir()
    (tmp_path / "scratch" / "w" / "in.dat").write_bytes(b"y" * 5000)
    layout = local_store.import_file("w/in.dat", replace=True)
    assert (layout.stripe_count, layout.stripe_size) == (4, 65536)
