"""The command imports only what its subcommand needs (structural checks, nothing timed: the
speed itself is measured by ``benchmarks/planner``)."""

from __future__ import annotations

import argparse
import contextlib
import importlib
import io
import json
import subprocess
import sys
import textwrap

import pytest

from scratchkeeper import cli

#: Never needed to plan a script or show a help text.
HEAVY = ("sqlite3", "crc32c", "logging.handlers", "pkgutil", "scratchkeeper.state",
         "scratchkeeper.digests", "scratchkeeper.storage", "scratchkeeper.recovery",
         "scratchkeeper.replication", "scratchkeeper.sim", "scratchkeeper.solver",
         "scratchkeeper.chain_service", "scratchkeeper.planner.commit",
         "scratchkeeper.planner.records", "scratchkeeper.planner.jit",
         "scratchkeeper.planner.predict", "scratchkeeper.planner.status")


def _modules_after(code: str) -> set[str]:
    """``sys.modules`` of a fresh interpreter after ``code`` (which may call the command)."""
    wrapper = textwrap.dedent("""
        import contextlib, io, json, sys
        with contextlib.redirect_stdout(io.StringIO()):
            try:
        {code}
            except SystemExit as exit:
                assert exit.code in (0, None), exit.code
        print(json.dumps(sorted(sys.modules)))
    """).format(code=textwrap.indent(textwrap.dedent(code).strip(), " " * 8))
    result = subprocess.run([sys.executable, "-c", wrapper], capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 0, result.stderr
    return set(json.loads(result.stdout))


def _loaded(modules: set[str], names) -> list[str]:
    return sorted(m for m in modules for n in names if m == n or m.startswith(n + "."))


@pytest.fixture
def site(tmp_path):
    scratch = tmp_path / "scratch"
    (scratch / "run").mkdir(parents=True)
    config = tmp_path / "site.toml"
    config.write_text(f'[storage]\nscratch_root = "{scratch}"\n'
                      f'[state]\ndatabase = "{tmp_path / "state.db"}"\n')
    script = tmp_path / "job.sh"
    script.write_text("#!/bin/bash\n#SBATCH --job-name=imports\n"
                      f"#STAGEIN https://data.example.org/a.dat {scratch}/run/a.dat\n"
                      f"#STAGEOUT {scratch}/run/out.h5 gsiftp://dtn.example.org/r/out.h5\n"
                      "srun ./step\n")
    return config, script


def test_importing_the_command_loads_no_subcommand_and_no_configuration():
    modules = _modules_after("import scratchkeeper.cli")
    assert not _loaded(modules, HEAVY + ("scratchkeeper.config", "scratchkeeper.planner",
                                         "jinja2", "tomllib"))
    assert not [m for m in modules if m.startswith("scratchkeeper.cli.")]


def test_plan_dry_run_loads_the_planner_only(site):
    config, script = site
    from scratchkeeper.planner.render import compile_templates

    compile_templates()  # as the install does: the templates' Python code kept beside them
    modules = _modules_after(f"""
        from scratchkeeper.cli import main
        assert main(["-c", {str(config)!r}, "plan", "--dry-run", {str(script)!r}]) == 0
    """)
    assert "scratchkeeper.planner.compiled_templates" in modules  # it did plan
    # the compiled templates render without Jinja2 (or its compiler, or hashlib for its tag)
    assert not _loaded(modules, ("jinja2", "markupsafe", "scratchkeeper.planner.template_compiler",
                                 "scratchkeeper.planner.template_cache", "hashlib"))
    assert not _loaded(modules, HEAVY)
    assert "scratchkeeper.schedulers.pbs" not in modules  # the configured backend only
    assert "subprocess" not in modules  # a dry run starts no command
    assert not _loaded(modules, ("uuid", "platform", "importlib.resources"))
    assert [m for m in modules if m.startswith("scratchkeeper.cli.")] == ["scratchkeeper.cli.planner"]


@pytest.mark.parametrize("argv", [["plan", "--help"], ["status", "--help"],
                                  ["-c", "/nonexistent", "config", "--help"]])
def test_a_help_text_renders_nothing_and_opens_no_state(argv):
    modules = _modules_after(f"""
        from scratchkeeper.cli import main
        main({argv!r})
    """)
    assert not _loaded(modules, HEAVY + ("jinja2", "scratchkeeper.planner"))


def test_every_module_is_in_the_table_with_exactly_the_subcommands_it_registers():
    registered = {}
    for name in cli.command_modules():
        parser = argparse.ArgumentParser()
        importlib.import_module(f"scratchkeeper.cli.{name}").register(parser.add_subparsers())
        (action,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        for command in action.choices:
            registered[command] = name
    assert registered == cli.COMMANDS


@pytest.mark.parametrize("argv, word", [
    (["plan", "x.sh"], "plan"), (["-c", "site.toml", "submit", "x"], "submit"),
    (["-vv", "--config", "plan", "status"], "status"), (["--config=s.toml", "store", "ls"], "store"),
    (["--conf", "s.toml", "-v", "replay"], "replay"), (["-vvc", "s.toml", "recover", "p"], "recover"),
    (["-cs.toml", "stage", "commit"], "stage"), (["--", "solve"], "solve"),
    (["-h", "plan"], None), (["--he"], None), (["-x", "plan"], None), ([], None), (["-c"], None),
])
def test_the_subcommand_is_found_after_the_global_options(argv, word):
    assert cli.command_word(argv) == word


def _subcommands(parser: argparse.ArgumentParser, prefix: tuple[str, ...] = ()):
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield prefix + (name,)
                yield from _subcommands(sub, prefix + (name,))


def test_every_subcommand_has_its_help():
    paths = list(_subcommands(cli.build_parser()))
    assert len(paths) > 30 and ("store", "fail-ost") in paths and ("recovery", "hook") in paths
    for path in paths:
        out = io.StringIO()
        with contextlib.redirect_stdout(out), pytest.raises(SystemExit) as exit:
            cli.main([*path, "--help"])
        assert exit.value.code == 0, path
        assert out.getvalue().startswith(f"usage: scratchkeeper {' '.join(path)}"), path


def test_an_unknown_subcommand_is_named_with_every_known_one(capsys):
    with pytest.raises(SystemExit) as exit:
        cli.main(["no-such-command"])
    assert exit.value.code == 2
    error = capsys.readouterr().err
    assert "invalid choice: 'no-such-command'" in error
    assert all(f"'{command}'" in error for command in cli.COMMANDS)


def test_a_backend_module_is_imported_only_when_asked_for():
    from scratchkeeper import schedulers

    for name, module in schedulers.BACKENDS.items():
        assert importlib.import_module(f"scratchkeeper.schedulers.{module}").NAME == name
