"""Checks of scripts/local-cluster that need no running cluster: templates and argument errors."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from user_runtime import LOCAL_CLUSTER_SCRIPT as SCRIPT, local_cluster_script


@pytest.fixture(scope="module")
def script():
    return local_cluster_script()


@pytest.fixture
def cluster(script, tmp_path):
    nodes = ["node1", "node2", "node3"]
    status = {"nodes": nodes, "pids": {},
              "ports": {"slurmctld": 7001, "slurmdbd": 7002, "mariadb": 7003, "gridftp": 7004,
                        "http": 7005, "slurmd": {n: 7100 + i for i, n in enumerate(nodes)}}}
    return script.Cluster(script.Layout(tmp_path / "local"), status)


@pytest.mark.parametrize("template", ["slurm.conf.in", "slurmdbd.conf.in", "gridftp.conf.in",
                                      "nginx.conf.in", "site.toml.in"])
def test_every_placeholder_of_a_template_gets_a_value(script, cluster, template):
    values = dict(cluster.values(), mariadb_password="secret", scheduler_kind="slurm")
    text = script.render(template, values)
    assert not re.search(r"@[a-z_]+@", text)
    assert text.startswith(script.GENERATED_MARKER)


def test_slurm_conf_has_one_node_line_per_host_on_its_own_address(script, cluster):
    text = script.render("slurm.conf.in", dict(cluster.values(), mariadb_password="x"))
    node_lines = [line for line in text.splitlines() if line.startswith("NodeName=")]
    found = [re.search(r"NodeName=(\S+) NodeHostname=\1 NodeAddr=(\S+) CPUs=(\d+)", line).groups()
             for line in node_lines]
    assert found == [("dtn1", "198.18.77.3", "12"), ("node1", "198.18.77.11", "4"),
                     ("node2", "198.18.77.12", "4"), ("node3", "198.18.77.13", "4")]
    assert "SlurmctldHost=" in text and "(198.18.77.1)" in text
    assert "PartitionName=batch Nodes=node[1-3] Default=YES" in text
    assert "PartitionName=replica Nodes=node[1-3] Default=NO" in text
    assert 'PartitionName=dataxfer Nodes=dtn1 Default=NO MaxTime=INFINITE State=UP ' \
           'TRESBillingWeights="CPU=0"' in text


def test_the_hosts_have_addresses_on_the_bridge_and_roles(script):
    hosts = script.topology(["node1", "node2"])
    assert [(h.name, h.address, h.role) for h in hosts] == [
        ("head", "198.18.77.1", "head"), ("login", "198.18.77.2", "login"),
        ("dtn1", "198.18.77.3", "dtn"), ("node1", "198.18.77.11", "compute"),
        ("node2", "198.18.77.12", "compute")]
    assert script.hostnet.roles(hosts) == {"head": ["head"], "login": ["login"],
                                           "dtn": ["dtn1"], "compute": ["node1", "node2"]}


def test_a_command_on_a_host_enters_its_namespaces_without_remounting_sys(script):
    node = script.topology(["node1"])[-1]
    argv = script.hostnet.enter(node, ["slurmd", "-D"], cwd="/var/lib/x")
    assert argv == ["nsenter", "--mount=/run/sk-hosts/node1.mnt", "--uts=/run/sk-hosts/node1.uts",
                    "--net=/run/netns/sk-node1", "--wdns=/var/lib/x", "--", "slurmd", "-D"]
    # a cwd in one of the host's own folders is not the head's folder: the host's root instead
    assert "--wdns=/" in script.hostnet.enter(node, ["true"], cwd="/tmp/pytest-of-root")
    as_nobody = script.hostnet.enter(node, ["id"], user="nobody")
    assert as_nobody[as_nobody.index("--") + 1:][:4] == ["setpriv", "--reuid=nobody",
                                                         "--regid=65534", "--init-groups"]
    assert as_nobody[-1] == "/usr/bin/id"
    head = script.topology([])[0]
    assert script.hostnet.enter(head, ["true"]) == ["true"]


def test_22_05_keeps_its_state_and_database_and_24_11_gets_its_own(script, tmp_path):
    """`up --slurm 24.11` must not convert 22.05's controller state and accounting tables (22.05
    could not read them back): each release has its own; 22.05's stay where they always were."""
    def rendered(release):
        status = {"nodes": ["node1"], "pids": {}, "slurm": release,
                  "ports": {"slurmctld": 7001, "slurmdbd": 7002, "mariadb": 7003,
                            "gridftp": 7004, "http": 7005, "slurmd": {"node1": 7100}}}
        cluster = script.Cluster(script.Layout(tmp_path / "local"), status, slurm=release)
        values = dict(cluster.values(), mariadb_password="x")
        return (script.render("slurm.conf.in", values), script.render("slurmdbd.conf.in", values),
                cluster.description())
    local = tmp_path / "local"
    conf, dbd, described = rendered("22.05")
    assert f"StateSaveLocation={local}/slurm/ctld\n" in conf
    assert f"SlurmdSpoolDir={local}/slurm/d/%n\n" in conf
    assert "StorageLoc=slurm_acct_db\n" in dbd
    assert (described["slurm"], described["slurm_bin"]) == ("22.05", "/usr/bin")
    conf, dbd, described = rendered("24.11")
    assert f"StateSaveLocation={local}/slurm-24.11/ctld\n" in conf
    assert f"SlurmdSpoolDir={local}/slurm-24.11/d/%n\n" in conf
    assert "StorageLoc=slurm_acct_db_24_11\n" in dbd
    assert (described["slurm"], described["slurm_bin"]) == (
        "24.11", str(script.SLURM_PREFIXES["24.11"] / "bin"))


def test_a_running_cluster_keeps_its_slurm_release(script, tmp_path, monkeypatch):
    status = {"nodes": ["node1"], "pids": {"slurmctld": 4242}, "hosts": {}, "ports": {}}
    monkeypatch.setattr(script, "process_alive", lambda pid, executable=None: True)
    cluster = script.Cluster(script.Layout(tmp_path / "local"), dict(status), slurm="24.11")
    with pytest.raises(script.ClusterError, match=r"runs Slurm 22\.05; run `local-cluster down` "
                                                  r"before --slurm 24\.11"):
        cluster.plan(1)
    same = script.Cluster(script.Layout(tmp_path / "local"), dict(status), slurm="22.05")
    same.plan(1)  # nothing changes while it runs
    assert same.status == status


def test_use_slurm_puts_a_prefix_first_and_links_its_etc_to_etc_slurm(script, tmp_path,
                                                                       monkeypatch):
    prefix = tmp_path / "slurm-24.11.5"
    monkeypatch.setitem(script.SLURM_PREFIXES, "24.11", prefix)
    monkeypatch.setattr(script, "SLURM_CONF", tmp_path / "etc-slurm" / "slurm.conf")
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    monkeypatch.delenv("SK_SLURM_BIN", raising=False)
    with pytest.raises(script.ClusterError, match="run scripts/bootstrap"):
        script.use_slurm("24.11")
    (prefix / "sbin").mkdir(parents=True)
    (prefix / "sbin" / "slurmctld").touch()
    (prefix / ".built").write_text("24.11.5-4+deb13u1\n")
    script.use_slurm("24.11")
    assert os.environ["PATH"] == f"{prefix}/sbin:{prefix}/bin:/usr/bin:/bin"
    assert os.environ["SK_SLURM_BIN"] == f"{prefix}/bin"
    assert os.readlink(prefix / "etc") == str(tmp_path / "etc-slurm")
    # a user's command on a host finds that release's sbatch first, not Debian's
    node = script.topology(["node1"])[-1]
    argv = script.hostnet.enter(node, ["sbatch", "x.sh"], user="nobody")
    assert argv[argv.index("--init-groups") + 3:][:2] == [
        "env", f"PATH={prefix}/bin:/usr/local/bin:/usr/bin:/bin"]
    # 22.05 changes nothing
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    monkeypatch.delenv("SK_SLURM_BIN")
    script.use_slurm("22.05")
    assert os.environ["PATH"] == "/usr/bin:/bin" and "SK_SLURM_BIN" not in os.environ
    with pytest.raises(script.ClusterError, match="expected one of"):
        script.use_slurm("23.02")


def test_generated_site_config_validates(script, cluster, tmp_path):
    from scratchkeeper.config import parse_config

    text = script.render("site.toml.in", dict(cluster.values(), scheduler_kind="pbs"))
    config = parse_config(text, "site.toml")
    assert config.scheduler.kind == "pbs"
    assert config.storage.scratch_root == str(tmp_path / "local" / "scratch")


def test_a_missing_value_names_template_and_line(script):
    with pytest.raises(script.ClusterError, match=r"slurmdbd\.conf\.in:\d+: no value for placeholder @"):
        script.render("slurmdbd.conf.in", {})


def test_a_local_dir_that_cannot_go_into_config_files_is_refused(script):
    with pytest.raises(script.ClusterError, match="SK_LOCAL_DIR"):
        script.Layout(Path("/tmp/with space"))
    with pytest.raises(script.ClusterError, match="SK_LOCAL_DIR"):
        script.Layout(Path("relative/dir"))


def test_status_without_a_cluster_exits_1(tmp_path):
    result = subprocess.run([sys.executable, str(SCRIPT), "status"], capture_output=True, text=True,
                            env={"SK_LOCAL_DIR": str(tmp_path), "PATH": "/usr/bin:/bin"}, timeout=30)
    assert result.returncode == 1
    assert "not set up" in result.stdout
