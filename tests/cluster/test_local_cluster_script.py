"""Checks of scripts/local-cluster that need no running cluster: templates and argument errors."""

from __future__ import annotations

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
