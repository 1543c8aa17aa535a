"""``scratchkeeper layout advise``: what it prints, its JSON, and one line per bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from scratchkeeper.cli import main

LOGS = Path(__file__).parent.parent / "data" / "darshan"
SNYDER = LOGS / "snyder_ior-POSIX_id1057716-202103_11-8-64415-6936117869459351096_1.darshan"
TREDDY = LOGS / "treddy_mpi-io-test_id4373053_6-2-60198-9815401321915095332_1.darshan"


@pytest.fixture
def site(tmp_path):
    path = tmp_path / "site.toml"
    path.write_text("[storage]\nost_count = 8\n")
    return path


def run(capsys, site, *argv):
    code = main(["-c", str(site), "layout", "advise", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_numbers_print_each_layout_the_choice_and_the_command(capsys, site):
    code, out, err = run(capsys, site, "--procs", "16", "--per-node", "4", "--request-size",
                         "256K", "--shared")
    assert code == 0 and err == ""
    lines = out.splitlines()
    assert lines[0] == ("workload: 16 processes, 4 per node, one shared file; 16 reads, "
                        "0 writes (0% random), most requests 256K")
    assert lines[2] == "OSTs: 8 (storage.ost_count)"
    # 1-DV by hand: 4 e + 4 s v + 2 alpha + 2 s beta = 0.8 + 1.049 + 0.2 + 4.369 ms
    assert any(line.startswith("1-DV") and "6.418" in line and line.endswith("<- chosen")
               for line in lines)
    assert any(line.startswith("2-D (g=4, 2 OSTs per group)") for line in lines)
    assert any(line.startswith("1-DH") for line in lines)
    assert "stripe count 8, stripe size 256K (the layout paper's §4, one shared file)" in lines
    assert lines[-1] == "lfs setstripe -c 8 -S 256K FILE"


def test_json_holds_every_estimate_and_the_advice(capsys, site):
    code, out, _ = run(capsys, site, "--procs", "4", "--per-node", "1", "--request-size", "1M",
                       "--per-process", "--write", "--pattern", "random", "--osts", "16",
                       "--json", "--target", "/scratch/out")
    data = json.loads(out)
    assert code == 0 and data["osts"] == 16 and data["osts_from"] == "--osts"
    assert [e["layout"] for e in data["estimates"]] == ["1-DV", "2-D", "1-DH"]
    assert data["workload"]["accesses"] == [{"request_size": 1 << 20, "count": 4,
                                             "operation": "write", "pattern": "random"}]
    chosen = min(data["estimates"], key=lambda e: e["seconds"])
    assert data["layout"] == chosen["layout"]
    assert data["command"] == (f"lfs setstripe -c {data['stripe_count']} -S "
                               f"{data['stripe_size'] >> 10}K /scratch/out")


def test_config_layout_section_changes_the_model(capsys, tmp_path):
    site = tmp_path / "site.toml"
    site.write_text("[storage]\nost_count = 16\n[layout]\nconnect_seconds = 0.01\n"
                    'calibrated = "2026-11-24 fio on /scratch"\n')
    code, out, _ = run(capsys, site, "--procs", "4", "--per-node", "1", "--request-size", "1M",
                       "--shared")
    # with e = 10 ms the four connections of 1-DH cost more than it saves (implication 4)
    assert code == 0 and "choice: 1-DV is the cheapest" in out
    assert "(2026-11-24 fio on /scratch)" in out
    site.write_text("[storage]\nost_count = 16\n[layout]\ngroups = 4\n")
    code, out, _ = run(capsys, site, "--procs", "4", "--per-node", "1", "--request-size", "1M",
                       "--shared", "--json")
    assert json.loads(out)["estimates"][1]["groups"] == 4


def test_a_darshan_log_with_hosts(capsys, site):
    pytest.importorskip("darshan")
    code, out, err = run(capsys, site, "--darshan", str(TREDDY))
    assert code == 0, err
    assert out.startswith("workload: 32 processes, 32 per node, one shared file; 128 reads, "
                          "192 writes")
    assert f"log: {TREDDY}: nprocs 32, 33 data files (1 shared)" in out
    assert out.splitlines()[-1].startswith("lfs setstripe -c 8 -S ")


def test_a_darshan_log_without_hosts_needs_the_per_node_count(capsys, site):
    pytest.importorskip("darshan")
    code, out, err = run(capsys, site, "--darshan", str(SNYDER))
    assert code == 2 and out == ""
    assert err == (f"{SNYDER}: the log records no hosts (no DXT traces): give --per-node M, the "
                   "processes per client node\n")
    code, out, _ = run(capsys, site, "--darshan", str(SNYDER), "--per-node", "8", "--json")
    data = json.loads(out)
    assert code == 0 and data["darshan"]["recorded_stripe"] == {"stripe_count": 1,
                                                                "stripe_size": 1 << 20}
    assert data["workload"]["processes"] == 16 and data["workload"]["processes_per_node"] == 8


@pytest.mark.parametrize("argv, message", [
    (["--procs", "16", "--request-size", "1M", "--shared"], "--per-node is needed (or --darshan "
     "LOG)"),
    (["--procs", "16", "--per-node", "4", "--request-size", "1M"], "--shared or --per-process is "
     "needed"),
    (["--procs", "x", "--per-node", "4", "--request-size", "1M", "--shared"],
     "--procs 'x': expected a whole number"),
    (["--procs", "0", "--per-node", "1", "--request-size", "1M", "--shared"],
     "--procs 0: expected at least 1"),
    (["--procs", "4", "--per-node", "8", "--request-size", "1M", "--shared"],
     "--per-node 8: more than the 4 processes"),
    (["--procs", "4", "--per-node", "1", "--request-size", "4Q", "--shared"],
     "--request-size: size '4Q': expected bytes"),
    (["--procs", "4", "--per-node", "1", "--request-size", "0", "--shared"],
     "--request-size '0': expected at least 1 byte"),
    (["--procs", "4", "--per-node", "1", "--request-size", "1M", "--shared", "--osts", "0"],
     "--osts 0: expected at least 1"),
    (["--procs", "4", "--per-node", "1", "--request-size", "1M", "--shared", "--groups", "9"],
     "--groups 9: more than the 8 OSTs"),
    (["--darshan", "x.darshan", "--procs", "4"], "--procs: not with --darshan (the log says)"),
    (["--darshan", "x.darshan", "--pattern", "random"], "--pattern: not with --darshan"),
])
def test_bad_input_is_one_line_and_exit_2(capsys, site, argv, message):
    code, out, err = run(capsys, site, *argv)
    assert code == 2 and out == ""
    assert err.startswith("scratchkeeper: " + message) and err.count("\n") == 1


def test_a_missing_log_is_named(capsys, site, tmp_path):
    pytest.importorskip("darshan")
    code, _, err = run(capsys, site, "--darshan", str(tmp_path / "absent.darshan"))
    assert code == 2 and err == f"{tmp_path / 'absent.darshan'}: no such Darshan log\n"


def test_lustre_sites_give_the_ost_count(capsys, tmp_path):
    site = tmp_path / "site.toml"
    site.write_text('[storage]\nbackend = "lustre"\n')
    argv = ["--procs", "4", "--per-node", "1", "--request-size", "1M", "--shared"]
    code, _, err = run(capsys, site, *argv)
    assert code == 2 and err.startswith("scratchkeeper: --osts N is needed: with "
                                        "storage.backend = lustre")
    code, out, _ = run(capsys, site, *argv, "--osts", "32")
    assert code == 0 and "OSTs: 32 (--osts)" in out
