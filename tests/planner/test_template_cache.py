"""The compiled job templates kept on disk (scratchkeeper/planner/template_cache.py)."""

import os
import shutil

import jinja2
import pytest

from scratchkeeper.config import SiteConfig
from scratchkeeper.planner import render
from scratchkeeper.planner.template_cache import SUFFIX, TemplateBytecodeCache

TEMPLATE = "{% for word in words %}{{ word | upper }} {% endfor %}\n"


def environment(folder, tag="t1", source=TEMPLATE):
    return jinja2.Environment(loader=jinja2.DictLoader({"a.j2": source}), keep_trailing_newline=True,
                              bytecode_cache=TemplateBytecodeCache(str(folder), tag))


@pytest.fixture
def compiles(monkeypatch):
    """How many templates were compiled from source."""
    count = []
    original = jinja2.Environment.compile

    def counted(self, *args, **kwargs):
        count.append(args[1] if len(args) > 1 else kwargs.get("name"))
        return original(self, *args, **kwargs)

    monkeypatch.setattr(jinja2.Environment, "compile", counted)
    return count


def cached(folder):
    return sorted(p for p in os.listdir(folder) if p.endswith(SUFFIX))


def test_a_second_process_loads_the_compiled_template(tmp_path, compiles):
    folder = tmp_path / "__pycache__"
    first = environment(folder).get_template("a.j2").render(words=["x", "y"])
    assert compiles == ["a.j2"] and len(cached(folder)) == 1
    assert (os.stat(folder / cached(folder)[0]).st_mode & 0o777) == 0o644
    second = environment(folder).get_template("a.j2").render(words=["x", "y"])
    assert second == first == "X Y \n" and compiles == ["a.j2"]


def test_a_changed_source_or_tag_is_compiled_again(tmp_path, compiles):
    folder = tmp_path / "__pycache__"
    environment(folder).get_template("a.j2")
    changed = environment(folder, source="{{ words | length }}\n").get_template("a.j2")
    assert changed.render(words=[1, 2]) == "2\n" and len(compiles) == 2
    environment(folder, tag="t2").get_template("a.j2")
    assert len(compiles) == 3 and len(cached(folder)) == 2


@pytest.mark.parametrize("content", [b"", b"j2 not a cache file", b"\x00" * 64])
def test_a_damaged_file_is_compiled_again_and_replaced(tmp_path, compiles, content):
    folder = tmp_path / "__pycache__"
    environment(folder).get_template("a.j2")
    (name,) = cached(folder)
    good = (folder / name).read_bytes()
    (folder / name).write_bytes(content if content else good[: len(good) // 2])
    assert environment(folder).get_template("a.j2").render(words=["z"]) == "Z \n"
    assert len(compiles) == 2 and (folder / name).read_bytes() == good


def test_a_folder_others_may_write_is_neither_read_nor_written(tmp_path, compiles):
    folder = tmp_path / "__pycache__"
    environment(folder).get_template("a.j2")
    folder.chmod(0o777)
    environment(folder).get_template("a.j2")
    assert len(compiles) == 2
    (name,) = cached(folder)
    os.unlink(folder / name)
    environment(folder).get_template("a.j2")
    assert cached(folder) == []


def test_an_unusable_folder_only_costs_the_compilation(tmp_path, compiles):
    blocker = tmp_path / "file"
    blocker.write_text("")
    assert environment(blocker / "__pycache__").get_template("a.j2").render(words=[]) == "\n"
    assert len(compiles) == 1


def test_the_job_templates_are_kept_beside_the_built_in_ones(tmp_path, monkeypatch, compiles):
    for name in ("slurm", "pbs", "common"):
        shutil.copytree(os.path.join(render.builtin_templates(), name), tmp_path / name)
    monkeypatch.setattr(render, "builtin_templates", lambda: str(tmp_path))
    render._environment.cache_clear()
    try:
        env = render.template_environment(SiteConfig())
        first = env.get_template("slurm/stage.sh.j2")
        render._environment.cache_clear()
        again = render.template_environment(SiteConfig()).get_template("slurm/stage.sh.j2")
    finally:
        render._environment.cache_clear()
    # stage.sh.j2 includes common/data-job.sh.j2 only when rendered
    assert compiles == ["slurm/stage.sh.j2"] and len(cached(tmp_path / "__pycache__")) == 1
    assert first.filename == again.filename


def test_an_installer_compiles_every_built_in_template(tmp_path, monkeypatch):
    for name in ("slurm", "pbs", "common"):
        shutil.copytree(os.path.join(render.builtin_templates(), name), tmp_path / name)
    monkeypatch.setattr(render, "builtin_templates", lambda: str(tmp_path))
    render._environment.cache_clear()
    try:
        names = render.compile_templates()
    finally:
        render._environment.cache_clear()
    assert "slurm/stage.sh.j2" in names and "common/data-job.sh.j2" in names
    assert len(cached(tmp_path / "__pycache__")) == len(names)
