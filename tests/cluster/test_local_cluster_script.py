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


def test_slurm_conf_has_one_node_line_per_node_on_its_own_port(script, cluster):
    text = script.render("slurm.conf.in", dict(cluster.values(), mariadb_password="x"))
    node_lines = [line for line in text.splitlines() if line.startswith("NodeName=")]
    assert [re.search(r"Port=(\d+)", line).group(1) for line in node_lines] == ["7100", "7101", "7102"]
    assert "PartitionName=batch Nodes=node[1-3] Default=YES" in text
    assert 'PartitionName=dataxfer Nodes=node[1-3] Default=NO MaxTime=INFINITE State=UP ' \
           'TRESBillingWeights="CPU=0"' in text


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
