"""SUORA placement in the local store (storage.placement = "suora"): new files' stripes, failed
OSTs, mirrors, tiers, and the rebalance plan after OSTs are added or fail."""

from __future__ import annotations

import json
import os

import pytest

from scratchkeeper.cli import main
from scratchkeeper.placement import PlacementMap, TargetState
from scratchkeeper.storage.layout import LayoutRequest
from scratchkeeper.storage.local import LocalStripedStore
from scratchkeeper.storage.local.placement import PLACEMENT_XATTR, placement_key

STRIPE = 65536


def make_store(tmp_path, *, ost_count=8, placement="suora", pools=None, tiers=None,
               stripe_count=2) -> LocalStripedStore:
    (tmp_path / "scratch").mkdir(exist_ok=True)
    return LocalStripedStore(str(tmp_path / "scratch"), str(tmp_path / "store"),
                             ost_count=ost_count, default_stripe_count=stripe_count,
                             default_stripe_size=STRIPE, pools=pools, placement=placement,
                             tiers=tiers)


def put(store, path, data=b"x" * (3 * STRIPE), request=LayoutRequest()):
    source = store.store_root.parent / "source.bin"
    source.write_bytes(data)
    fd = os.open(source, os.O_RDONLY)
    try:
        return store.put_file(path, fd, len(data), request)
    finally:
        os.close(fd)


def equal_map(indices, bucket="all"):
    """The map of OSTs on one file system (equal weights), built here, not by the store."""
    return PlacementMap.build([(bucket, [(i, 1.0) for i in indices])], units=[1.0])


def first_id(layout):
    return layout.components[0].objects[0].object_id


def test_new_files_take_suoras_distinct_targets(tmp_path):
    store = make_store(tmp_path)
    placement = equal_map(range(8))
    used = set()
    for n in range(40):
        layout = put(store, f"u/f{n}")
        expected = placement.place_distinct(placement_key(first_id(layout)), 0, 2)
        assert layout.ost_list == expected
        assert len(set(layout.ost_list)) == 2
        used.update(layout.ost_list)
        mark = os.getxattr(store.mdt_root / f"u/f{n}", PLACEMENT_XATTR)
        assert mark == f"suora {first_id(layout)}".encode()
        assert store.read(f"u/f{n}", 0, 3 * STRIPE) == b"x" * (3 * STRIPE)
    assert used == set(range(8))  # pseudo-random: not the same least-loaded few


def test_least_loaded_stays_the_default_and_is_unmarked(tmp_path):
    store = make_store(tmp_path, placement="least-loaded")
    layout = put(store, "u/a")
    assert layout.ost_list == (0, 1)
    assert put(store, "u/b").ost_list == (2, 3)
    with pytest.raises(OSError):
        os.getxattr(store.mdt_root / "u/a", PLACEMENT_XATTR)


def test_a_failed_ost_is_never_chosen(tmp_path):
    store = make_store(tmp_path, stripe_count=3)
    store.fail_ost(3)
    placement = equal_map(range(8)).with_state(3, TargetState.FAILED)
    for n in range(40):
        layout = put(store, f"u/f{n}")
        assert 3 not in layout.ost_list
        assert layout.ost_list == placement.place_distinct(placement_key(first_id(layout)), 0, 3)


def test_stripe_count_all_and_too_many_are_reduced_to_the_healthy(tmp_path):
    store = make_store(tmp_path, ost_count=4)
    store.fail_ost(0)
    assert sorted(put(store, "u/all", request=LayoutRequest(stripe_count=-1)).ost_list) == \
        [1, 2, 3]
    assert sorted(put(store, "u/many", request=LayoutRequest(stripe_count=9)).ost_list) == \
        [1, 2, 3]


def test_a_pool_request_places_within_the_pool(tmp_path):
    store = make_store(tmp_path, pools={"flash": (4, 5, 6)})
    placement = equal_map((4, 5, 6), "pool:flash")
    for n in range(20):
        layout = put(store, f"u/f{n}", request=LayoutRequest(pool="flash"))
        assert set(layout.ost_list) <= {4, 5, 6}
        assert layout.ost_list == placement.place_distinct(placement_key(first_id(layout)), 0, 2)


def test_an_explicit_ost_list_is_kept_and_not_marked(tmp_path):
    store = make_store(tmp_path)
    layout = put(store, "u/a", request=LayoutRequest(ost_list=(6, 1)))
    assert layout.ost_list == (6, 1)
    with pytest.raises(OSError):
        os.getxattr(store.mdt_root / "u/a", PLACEMENT_XATTR)


def test_mirrors_avoid_the_primarys_osts(tmp_path):
    store = make_store(tmp_path, ost_count=6)
    placement = equal_map(range(6))
    for n in range(15):
        layout = put(store, f"u/f{n}")
        primary = set(layout.ost_list)
        mirrored = store.add_mirror(f"u/f{n}")
        mirror = mirrored.osts(max(mirrored.mirror_ids))
        assert not mirror & primary and len(mirror) == 2
        key = placement_key(first_id(layout))
        assert mirror == set(placement.place_distinct(key, 0, 2, exclude=primary))
        assert store.read(f"u/f{n}", 0, 3 * STRIPE) == b"x" * (3 * STRIPE)


def test_with_tiers_the_primary_is_on_the_slow_class_and_the_mirror_on_the_next(tmp_path):
    store = make_store(tmp_path, pools={"disk": (0, 1, 2, 3), "flash": (4, 5)},
                       tiers=[("disk", ["disk"]), ("flash", ["flash"])])
    for n in range(10):
        layout = put(store, f"u/f{n}")
        assert set(layout.ost_list) <= {0, 1, 2, 3}
        mirrored = store.add_mirror(f"u/f{n}")
        assert mirrored.osts(max(mirrored.mirror_ids)) == {4, 5}
    # OSTs in no tiered pool are not in the map: 6 and 7 are never chosen
    assert not any({6, 7} & set(store.layout(f"u/f{n}").ost_list) for n in range(10))


def test_rebalance_after_adding_osts_moves_only_onto_the_new_ones(tmp_path):
    store = make_store(tmp_path, ost_count=6, stripe_count=1)
    before = {}
    for n in range(120):
        layout = put(store, f"u/f{n}", data=b"y" * 1000)
        before[layout.path] = layout
    put(make_store(tmp_path, ost_count=6, placement="least-loaded"), "u/plain")
    assert store.rebalance_plan().moves == []
    grown = make_store(tmp_path, ost_count=8, stripe_count=1)
    plan = grown.rebalance_plan()
    assert plan.files_checked == 120 and plan.files_not_suora == 1
    new_map = equal_map(range(8))
    expected = {path for path, layout in before.items()
                if new_map.place_distinct(placement_key(first_id(layout)), 0, 1)
                != layout.ost_list}
    assert {move.path for move in plan.moves} == expected
    # about 2/8 of the files, and every one of them onto an added OST
    assert 10 <= len(plan.moves) <= 50
    for move in plan.moves:
        assert set(move.placed_osts) <= {6, 7}
        assert move.objects == 1 and move.bytes == 1000


def test_rebalance_after_a_failure_moves_only_its_files(tmp_path):
    store = make_store(tmp_path, ost_count=6)
    for n in range(60):
        put(store, f"u/f{n}")
    store.fail_ost(2)
    plan = store.rebalance_plan()
    on_failed = {layout.path for layout in (store.layout(f"u/f{n}") for n in range(60))
                 if 2 in layout.ost_list}
    assert on_failed and {move.path for move in plan.moves} == on_failed
    for move in plan.moves:
        assert 2 not in move.placed_osts
        assert set(move.current_osts) - set(move.placed_osts) == {2}
        assert move.objects == 1 and move.bytes == 2 * STRIPE - STRIPE * (
            move.current_osts.index(2) == 1)


@pytest.fixture
def config(tmp_path):
    def write(ost_count):
        path = tmp_path / "site.toml"
        path.write_text(f"""
[storage]
backend = "local"
scratch_root = "{tmp_path / 'scratch'}"
store_root = "{tmp_path / 'store'}"
ost_count = {ost_count}
stripe_count = 1
stripe_size = 65536
placement = "suora"
pools = {{ disk = "0-3", flash = "4-5" }}

[logging]
level = "WARNING"
""")
        return str(path)
    (tmp_path / "scratch").mkdir()
    return write


def test_cli_placement_and_rebalance(config, tmp_path, capsys):
    site = config(6)
    local = tmp_path / "in.bin"
    local.write_bytes(b"z" * 5000)
    for n in range(30):
        assert main(["-c", site, "store", "put", str(local), f"u/f{n}"]) == 0
    capsys.readouterr()
    assert main(["-c", site, "store", "placement", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["placement"] == "suora"
    assert "not counted" in report["hot_objects"]
    rows = {row["ost_index"]: row for row in report["osts"]}
    assert sum(row["objects"] for row in rows.values()) == 30
    assert rows[4]["pools"] == ["flash"] and rows[0]["pools"] == ["disk"]
    assert all(row["hot_objects"] is None for row in rows.values())
    assert main(["-c", site, "store", "placement"]) == 0
    assert "disk" in capsys.readouterr().out

    site = config(8)
    assert main(["-c", site, "store", "rebalance", "--dry-run", "--json"]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert plan["files_checked"] == 30 and plan["files_to_move"] == len(plan["moves"]) > 0
    assert plan["bytes_to_move"] == 5000 * plan["files_to_move"]
    assert all(set(m["placed_osts"]) <= {6, 7} for m in plan["moves"])
    # just written: in use for the default --quiet 60 s, left where they are
    assert main(["-c", site, "store", "rebalance", "--json"]) == 0
    left = json.loads(capsys.readouterr().out)
    assert left["moved"] == 0 and left["skipped"] == plan["files_to_move"]
    assert main(["-c", site, "store", "rebalance", "--quiet", "0", "--json"]) == 0
    done = json.loads(capsys.readouterr().out)
    assert done["moved"] == plan["files_to_move"] and done["failed"] == 0
    assert main(["-c", site, "store", "rebalance", "--dry-run", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["files_to_move"] == 0
    assert main(["-c", site, "store", "cat", "u/f0"]) == 0
    assert capsys.readouterr().out == "z" * 5000


def test_rebalance_moves_the_bytes_keeps_ids_and_mirrors_and_never_half(tmp_path, monkeypatch):
    store = make_store(tmp_path, ost_count=6, stripe_count=2)
    data = {}
    for n in range(40):
        data[f"u/f{n}"] = os.urandom(5 * STRIPE + 1234)
        put(store, f"u/f{n}", data=data[f"u/f{n}"])
    store.add_mirror("u/f0")                       # a mirrored file moves its primary only
    grown = make_store(tmp_path, ost_count=8, stripe_count=2)
    plan = grown.rebalance_plan()
    assert plan.moves
    # a copy interrupted (killed mid-move): nothing switched, and the next run finishes
    calls = {"n": 0}
    original = grown.write_rebuild

    def dying(rebuild, offset, chunk):
        calls["n"] += 1
        if calls["n"] == 2:
            raise KeyboardInterrupt
        return original(rebuild, offset, chunk)
    monkeypatch.setattr(grown, "write_rebuild", dying)
    with pytest.raises(KeyboardInterrupt):
        grown.rebalance(plan, quiet=0)
    monkeypatch.setattr(grown, "write_rebuild", original)
    assert grown.open_rebuilds() == []             # the interrupted copy was dropped
    first_ids = {m.path: first_id(grown.layout(m.path)) for m in plan.moves}
    results = grown.rebalance(grown.rebalance_plan(), quiet=0)
    assert {r["state"] for r in results} == {"moved"}
    assert grown.rebalance_plan().moves == []
    for move in plan.moves:
        layout = grown.layout(move.path)
        assert first_id(layout) == first_ids[move.path]            # SUORA's key kept
        primary = next(c for c in layout.components if c.objects[0].object_id ==
                       first_ids[move.path])
        assert set(primary.ost_list) == set(move.placed_osts)
    for path, content in data.items():
        assert grown.read(path, 0, len(content)) == content
    assert len(grown.layout("u/f0").mirror_ids) == 2


def test_rebalance_leaves_a_file_written_during_its_move(tmp_path, monkeypatch):
    store = make_store(tmp_path, ost_count=6, stripe_count=1)
    for n in range(30):
        put(store, f"u/f{n}", data=b"a" * 3000)
    grown = make_store(tmp_path, ost_count=8, stripe_count=1)
    plan = grown.rebalance_plan()
    victim = plan.moves[0].path
    original = grown.write_rebuild

    def writer_meanwhile(rebuild, offset, chunk):
        original(rebuild, offset, chunk)
        if rebuild.path == victim:
            grown.write(victim, 0, b"b")           # a job writes while it is copied
    monkeypatch.setattr(grown, "write_rebuild", writer_meanwhile)
    results = {r["path"]: r for r in grown.rebalance(plan, quiet=0)}
    assert results[victim]["state"] == "failed" and "written during" in results[victim]["detail"]
    assert set(grown.layout(victim).ost_list) == set(plan.moves[0].current_osts)
    assert grown.read(victim, 0, 2) == b"ba" and grown.open_rebuilds() == []
    assert all(r["state"] == "moved" for p, r in results.items() if p != victim)


def test_an_ost_in_two_classes_is_refused_when_the_store_opens(tmp_path):
    from scratchkeeper.config import parse_config
    from scratchkeeper.errors import ConfigError
    from scratchkeeper.storage import open_backend

    site = parse_config(f"""
[storage]
scratch_root = "{tmp_path / 'scratch'}"
store_root = "{tmp_path / 'store'}"
placement = "suora"
pools = {{ disk = "0-3", flash = "3-5" }}
pool_tiers = {{ disk = "disk", flash = "flash" }}
tier_order = ["flash", "disk"]
""")
    with pytest.raises(ConfigError, match="OST 3 is in pools of classes"):
        open_backend(site)


def test_a_temporal_replica_goes_to_the_fastest_class_with_room(tmp_path):
    """replicad's OSTs (StorageBackend.replica_osts): SUORA's in the fastest class whose file
    systems have the replica's bytes free, else the next slower one."""
    store = make_store(tmp_path, pools={"disk": [0, 1, 2, 3, 4, 5], "flash": [6, 7]},
                       tiers=[("disk", ["disk"]), ("flash", ["flash"])])
    placement = store._placement_map(None)
    for n in range(10):
        layout = put(store, f"r/f{n}", request=LayoutRequest(pool="disk"))
        osts = store.replica_osts(layout, 3 * STRIPE)
        expected = placement.place_distinct(placement_key(first_id(layout)), 1, 2,
                                            set(layout.osts()))
        assert osts == tuple(sorted(expected)) and set(osts) == {6, 7}
    # no room in the fast class (its file systems' free space below the replica): the disk
    # class, outside the primary's OSTs; no room anywhere: refused
    store._bucket_free = lambda placement: [1 << 40, 1000]
    osts = store.replica_osts(layout, 5000)
    assert set(osts) <= {0, 1, 2, 3, 4, 5} and not set(osts) & set(layout.osts())
    with pytest.raises(Exception, match="no class"):
        store.replica_osts(layout, 1 << 41)
    # least-loaded placement keeps the old rule
    (tmp_path / "plain").mkdir()
    plain = make_store(tmp_path / "plain", placement="least-loaded")
    layout = put(plain, "f")
    assert not set(plain.replica_osts(layout, 3 * STRIPE)) & set(layout.osts())


def test_a_rebuild_substitute_is_suoras_next_target_in_the_failed_osts_class(tmp_path):
    store = make_store(tmp_path, pools={"disk": [0, 1, 2, 3, 4, 5], "flash": [6, 7]},
                       tiers=[("disk", ["disk"]), ("flash", ["flash"])])
    layout = put(store, "s/f", request=LayoutRequest(pool="disk"))
    failed = layout.ost_list[0]
    store.fail_ost(failed)
    substitute = store.pick_substitute(layout, failed=failed)
    expected = store._placement_map(None).place_in(placement_key(first_id(layout)), 0,
                                                   set(layout.osts()))
    assert substitute == expected and substitute in range(6)
    assert substitute not in layout.osts()
    # a status list saying another OST is unhealthy keeps it out too
    statuses = list(store.list_osts())
    unhealthy = [o.__class__(**{**o.__dict__, "state": "failed"}) if o.ost_index == expected
                 else o for o in statuses]
    other = store.pick_substitute(layout, failed=failed, osts=unhealthy)
    assert other not in (expected, *layout.osts()) and other in range(6)


def test_a_move_a_killed_rebalance_left_is_dropped_by_the_next(tmp_path):
    store = make_store(tmp_path, ost_count=6, stripe_count=1)
    for n in range(30):
        put(store, f"u/f{n}", data=b"c" * 3000)
    grown = make_store(tmp_path, ost_count=8, stripe_count=1)
    move = grown.rebalance_plan().moves[0]
    # as a kill -9 after begin_rebuild leaves it: recorded, objects made, nothing switched
    grown.begin_rebuild(move.path, {move.current_osts[0]: move.placed_osts[0]}, same_ids=True)
    assert len(grown.open_rebuilds()) == 1
    results = grown.rebalance(grown.rebalance_plan(), quiet=0)
    assert grown.open_rebuilds() == [] and {r["state"] for r in results} == {"moved"}
    assert grown.read(move.path, 0, 3000) == b"c" * 3000
