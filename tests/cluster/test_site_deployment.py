"""Deployment as a site does it, without the cluster: the systemd units, the daemons' log file
(``logging.file``) and the runtime that scripts/local-cluster installs for every user."""

from __future__ import annotations

import configparser
import dataclasses
import json
import logging
import logging.handlers
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from scratchkeeper import config as config_module
from scratchkeeper.cli import build_parser, daemon_logging
from scratchkeeper.errors import ConfigError
from user_runtime import local_cluster_script

REPO = Path(__file__).resolve().parents[2]
UNITS = sorted((REPO / "site-config" / "systemd").glob("*.service"))
GLOBAL_OPTIONS = {"-c": 1, "--config": 1, "-v": 0, "--verbose": 0}


@pytest.fixture(scope="module")
def script():
    return local_cluster_script()


def unit_service(path: Path) -> dict[str, str]:
    parser = configparser.ConfigParser(interpolation=None, strict=False)
    parser.optionxform = str  # systemd keys are case-sensitive
    parser.read(path)
    return dict(parser["Service"])


def subcommand_words(argv: list[str]) -> list[str]:
    """The subcommand of ``scratchkeeper ARGS`` (global options left out), up to its options."""
    words, index = [], 0
    while index < len(argv) and argv[index] in GLOBAL_OPTIONS:
        index += 1 + GLOBAL_OPTIONS[argv[index]]
    for word in argv[index:]:
        if word.startswith("-"):
            break
        words.append(word)
    return words


def test_there_is_a_unit_for_every_service_the_local_cluster_runs(script):
    assert {p.name for p in UNITS} == {f"scratchkeeper-{name}.service"
                                       for name in script.MANAGED_SERVICES}


@pytest.mark.parametrize("unit", UNITS, ids=lambda p: p.name)
def test_unit_runs_the_runtime_the_local_cluster_installs(script, unit):
    argv = shlex.split(unit_service(unit)["ExecStart"])
    assert argv[0] == str(script.RUNTIME_LINK) == "/usr/local/bin/scratchkeeper"
    # the same command line as the local cluster's service of that name, config aside
    name = unit.name.removeprefix("scratchkeeper-").removesuffix(".service")
    assert subcommand_words(argv[1:]) == subcommand_words(script.MANAGED_SERVICES[name])
    assert argv[1:] == script.MANAGED_SERVICES[name]


@pytest.mark.parametrize("unit", UNITS, ids=lambda p: p.name)
def test_unit_command_line_is_one_the_command_accepts(unit):
    argv = shlex.split(unit_service(unit)["ExecStart"])[1:]
    args = build_parser().parse_args(argv)  # SystemExit on an unknown option or subcommand
    assert callable(args.func)
    words = subcommand_words(argv)
    assert words, f"{unit.name}: no subcommand in {argv}"
    helped = subprocess.run([sys.executable, "-m", "scratchkeeper", *words, "--help"],
                            capture_output=True, text=True, timeout=60)
    assert helped.returncode == 0, helped.stderr
    assert f"usage: scratchkeeper {' '.join(words)}" in helped.stdout


@pytest.mark.parametrize("unit", UNITS, ids=lambda p: p.name)
def test_unit_reads_the_default_site_config_and_names_real_config_keys(unit):
    service = unit_service(unit)
    assert service["Environment"] == f"{config_module.ENV_VAR}={config_module.DEFAULT_PATH}"
    assert service["User"] == "root"
    assert service["KillSignal"] == "SIGTERM"
    sections = {f.name: f.type for f in dataclasses.fields(config_module.SiteConfig)
                if not f.metadata.get("internal")}
    # section.key words, not file names (docs/recovery.rst)
    named = re.findall(r"(?<![/\w.-])(" + "|".join(sections) + r")\.([a-z_]+)\b(?![.\w-])",
                       unit.read_text())
    schema = {section: {f.name for f in dataclasses.fields(getattr(config_module.SiteConfig(),
                                                                    section))}
              for section in sections}
    assert named, f"{unit.name} names no config key"
    assert [f"{s}.{k}" for s, k in named if k not in schema[s]] == []
    if "RuntimeDirectory" in service:
        # the socket directory systemd makes is the one of the default recovery.socket
        default_socket = config_module.RecoveryConfig().socket
        assert os.path.dirname(default_socket) == f"/run/{service['RuntimeDirectory']}"


# ---------------------------------------------------------------------------- logging.file

@pytest.fixture
def root_handlers():
    """daemon_logging replaces the root logger's handlers: put pytest's back afterwards."""
    root = logging.getLogger()
    saved, level = list(root.handlers), root.level
    yield
    for handler in list(root.handlers):
        if handler not in saved:
            handler.close()
    root.handlers[:] = saved
    root.setLevel(level)


def _config(tmp_path, log_file: str) -> Path:
    path = tmp_path / "site.toml"
    path.write_text(f'[logging]\nfile = "{log_file}"\n')
    return path


@pytest.mark.parametrize("argv,name", [
    (["replicad"], "replicad"), (["recoveryd"], "recoveryd"),
    (["spank", "chain", "--watch", "5"], "spank-chain"),
])
def test_a_daemon_logs_to_logging_file_named_after_it(tmp_path, root_handlers, argv, name):
    config_path = _config(tmp_path, f"{tmp_path}/log/{{daemon}}.log")
    (tmp_path / "log").mkdir()
    args = build_parser().parse_args(["-c", str(config_path), *argv])
    daemon_logging(args)
    logging.getLogger("scratchkeeper.test").info("a record of %s", name)
    log_path = tmp_path / "log" / f"{name}.log"
    text = log_path.read_text()
    assert f"{name}: logging to {log_path} (pid {os.getpid()})" in text
    assert f"scratchkeeper.test INFO: a record of {name}" in text
    assert log_path.stat().st_mode & 0o777 == 0o640
    # there only, not on standard error as well
    assert [type(h) for h in logging.getLogger().handlers] == [logging.handlers.WatchedFileHandler]


def test_without_logging_file_a_daemon_logs_to_standard_error(tmp_path, root_handlers):
    path = tmp_path / "site.toml"
    path.write_text("[logging]\nlevel = \"INFO\"\n")
    before = list(logging.getLogger().handlers)
    daemon_logging(build_parser().parse_args(["-c", str(path), "replicad"]))
    assert logging.getLogger().handlers == before
    assert not list(tmp_path.glob("*.log"))


def test_a_log_file_that_cannot_be_opened_is_one_error_naming_the_config(tmp_path, root_handlers):
    config_path = _config(tmp_path, f"{tmp_path}/missing-dir/{{daemon}}.log")
    args = build_parser().parse_args(["-c", str(config_path), "replicad"])
    with pytest.raises(ConfigError) as caught:
        daemon_logging(args)
    assert str(caught.value) == (f"{config_path}: key 'logging.file': cannot open "
                                 f"{tmp_path}/missing-dir/replicad.log: No such file or directory")
    result = subprocess.run([sys.executable, "-m", "scratchkeeper", "-c", str(config_path),
                             "replicad", "--once"], capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    assert result.stderr.strip() == str(caught.value)  # one line, no traceback


def test_a_relative_log_file_is_a_config_error(tmp_path):
    config_path = _config(tmp_path, "replicad.log")
    with pytest.raises(ConfigError, match=r"site\.toml:2: key 'logging\.file': expected an "
                                          r"absolute or empty path, got 'replicad\.log'"):
        config_module.load_config(config_path)


# ---------------------------------------------------------------------------- the runtime

def _checkout_copy(script, destination: Path) -> Path:
    for path in script.runtime_source_files(REPO):
        target = destination / path.relative_to(REPO)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(path, target)
    return destination


def test_source_digest_follows_the_sources_and_ignores_caches(script, tmp_path):
    repo = _checkout_copy(script, tmp_path / "repo")
    first = script.source_digest(repo)
    (repo / "scratchkeeper" / "__pycache__").mkdir(exist_ok=True)
    (repo / "scratchkeeper" / "__pycache__" / "x.cpython-311.pyc").write_bytes(b"cache")
    (repo / "scratchkeeper" / "solver" / "_native.cpython-311-x86_64-linux-gnu.so").write_bytes(b"")
    assert script.source_digest(repo) == first
    template = next((repo / "job-templates").rglob("*.j2"))
    template.write_text(template.read_text() + "\n")
    second = script.source_digest(repo)
    assert second != first
    (repo / "scratchkeeper" / "new_module.py").write_text("")
    assert script.source_digest(repo) not in (first, second)


@pytest.mark.slow
def test_runtime_is_reinstalled_when_the_sources_change_and_every_user_runs_it(script,
                                                                                tmp_path):
    if os.geteuid() != 0:
        pytest.skip("installs for every user and checks it as nobody: needs root")
    shared = Path(tempfile.mkdtemp(prefix="sk-runtime-test-", dir="/tmp"))
    try:
        shared.chmod(0o755)
        repo = _checkout_copy(script, tmp_path / "repo")
        runtime = script.Runtime(root=shared / "opt", link=shared / "bin" / "scratchkeeper",
                                 repo=repo)
        first = runtime.ensure()
        assert first["command"] == str(shared / "bin" / "scratchkeeper")
        as_nobody = ["runuser", "-u", "nobody", "--", first["command"]]
        version = subprocess.run([*as_nobody, "--version"], capture_output=True, text=True,
                                 timeout=60)
        assert version.returncode == 0 and version.stdout.startswith("scratchkeeper "), version
        # non-editable: the install does not read the checkout
        installed = subprocess.run(
            [str(shared / "opt" / "current" / "bin" / "python"), "-c",
             "import scratchkeeper; print(scratchkeeper.__file__)"],
            capture_output=True, text=True, timeout=60, cwd="/").stdout.strip()
        assert os.path.realpath(installed).startswith(first["release"] + "/")
        # the job templates are compiled at install, so a user's plan only reads them
        compiled = list(Path(installed).parent.glob("job_templates/__pycache__/*.jinja2c"))
        assert len(compiled) == len(list(Path(installed).parent.glob("job_templates/*/*.j2")))
        assert all(p.stat().st_mode & 0o444 == 0o444 for p in compiled)
        # and to Python, which a user's plan and submit run without importing Jinja2
        (python_code,) = Path(installed).parent.glob("job_templates/__pycache__/*.skt")
        assert python_code.stat().st_mode & 0o444 == 0o444

        assert runtime.ensure() == first  # unchanged sources: nothing installed
        (repo / "scratchkeeper" / "deployment_probe.py").write_text("MARK = 'second'\n")
        second = runtime.ensure()
        assert second["release"] != first["release"]
        probe = subprocess.run(
            ["runuser", "-u", "nobody", "--", str(shared / "opt" / "current" / "bin" / "python"),
             "-c", "import scratchkeeper.deployment_probe as p; print(p.MARK)"],
            capture_output=True, text=True, timeout=60, cwd="/")
        assert probe.stdout.strip() == "second", probe.stderr
        assert os.path.isdir(first["release"])  # the one before is kept for running jobs
        # an older release stays while a process (a service, a job) runs from it
        running = subprocess.Popen([f"{first['release']}/bin/python", "-c",
                                    "import time; time.sleep(120)"], cwd="/")
        try:
            (repo / "scratchkeeper" / "deployment_probe.py").write_text("MARK = 'third'\n")
            third = runtime.ensure()
            assert os.path.isdir(first["release"]) and os.path.isdir(second["release"])
        finally:
            running.kill()
            running.wait()
        (repo / "scratchkeeper" / "deployment_probe.py").write_text("MARK = 'fourth'\n")
        fourth = runtime.ensure()
        kept = sorted(p.name for p in (shared / "opt" / "releases").iterdir())
        assert kept == sorted(os.path.basename(r["release"]) for r in (third, fourth))
    finally:
        shutil.rmtree(shared, ignore_errors=True)


def test_runtime_refuses_a_command_it_did_not_install(script, tmp_path):
    link = tmp_path / "bin" / "scratchkeeper"
    link.parent.mkdir()
    link.write_text("#!/bin/sh\n")
    runtime = script.Runtime(root=tmp_path / "opt", link=link)
    with pytest.raises(script.ClusterError, match="was not installed by local-cluster"):
        runtime._link()
    assert link.read_text() == "#!/bin/sh\n"



# ---------------------------------------------------------------------------- down and stop

@pytest.fixture
def fake_services(script, tmp_path):
    """A cluster status whose services are processes of the runtime's interpreter (sleeping)."""
    processes = {name: subprocess.Popen([script.RUNTIME_PYTHON, "-c",
                                         "import time; time.sleep(120)"])
                 for name in script.MANAGED_SERVICES}
    layout = script.Layout(tmp_path / "local")
    layout.root.mkdir()
    status = {"state": "up", "pids": {name: p.pid for name, p in processes.items()}}
    yield script.Cluster(layout, status), processes
    for process in processes.values():
        process.kill()
        process.wait()


def test_down_stops_the_services_by_their_recorded_pid(script, fake_services):
    cluster, processes = fake_services
    cluster.down()
    for name, process in processes.items():
        assert process.wait(timeout=5) == -15, name  # SIGTERM, as systemd's KillSignal
    assert cluster.status["pids"] == {} and cluster.status["state"] == "down"
    assert json.loads(cluster.layout.status.read_text())["pids"] == {}


def test_stop_stops_only_the_named_services_and_up_would_start_them(script, fake_services):
    cluster, processes = fake_services
    cluster.stop(["spank-chain", "recoveryd"])
    assert processes["spank-chain"].wait(timeout=5) == -15
    assert processes["recoveryd"].wait(timeout=5) == -15
    assert processes["replicad"].poll() is None
    assert set(cluster.status["pids"]) == set(script.MANAGED_SERVICES) - {"spank-chain",
                                                                          "recoveryd"}
    rows = {name: state for name, _, state in cluster.report()[0]}
    assert rows["replicad"] == "running" and rows["spank-chain"] == "DOWN (not started)"
    cluster.stop(["recoveryd"])  # already stopped: nothing to do
    with pytest.raises(script.ClusterError, match="no daemon nonsense"):
        cluster.stop(["nonsense"])


def test_a_new_runtime_or_site_config_restarts_the_services(script, tmp_path, monkeypatch):
    """`up` restarts a daemon whose digest changed: the services' digest covers the runtime's
    installed sources and the site config, so they never keep running an old install."""
    runtime_root = tmp_path / "opt"
    (runtime_root / "current").mkdir(parents=True)
    (runtime_root / "current" / ".source-digest").write_text("first\n")
    runtime_class = script.Runtime
    monkeypatch.setattr(script, "Runtime", lambda: runtime_class(root=runtime_root))
    nodes = ["node1"]
    status = {"nodes": nodes, "pids": {},
              "ports": {"slurmctld": 7001, "slurmdbd": 7002, "mariadb": 7003, "gridftp": 7004,
                        "http": 7005, "slurmd": {"node1": 7100}}}
    cluster = script.Cluster(script.Layout(tmp_path / "local"), status)
    cluster.layout.root.mkdir()
    cluster.layout.site_config.write_text("[logging]\n")

    def digests():
        return {d.name: d.digest() for d in cluster.daemons() if d.name in script.MANAGED_SERVICES}

    before = digests()
    assert set(before) == set(script.MANAGED_SERVICES)
    (runtime_root / "current" / ".source-digest").write_text("second\n")
    after_install = digests()
    assert all(after_install[name] != before[name] for name in before)
    cluster.layout.site_config.write_text("[logging]\nlevel = \"DEBUG\"\n")
    assert all(digests()[name] != after_install[name] for name in before)
