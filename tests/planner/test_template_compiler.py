"""Job templates compiled to Python (template_compiler, compiled_templates) against Jinja2 itself:
the same text for every construct the compiler translates, the same failures, and the cache of
compiled code beside the built-in templates."""

from __future__ import annotations

import os
import types

import jinja2
import pytest

from scratchkeeper.config import SiteConfig, TemplatesConfig
from scratchkeeper.planner import compiled_templates, render
from scratchkeeper.planner.template_compiler import Unsupported, compile_template

from .test_render import CASES, rendered


def environment(templates: dict[str, str]) -> jinja2.Environment:
    env = jinja2.Environment(loader=jinja2.DictLoader(templates), undefined=jinja2.StrictUndefined,
                             finalize=render._finalize, **render._OPTIONS)
    env.filters.update(render.FILTERS)
    return env


def both(templates: dict[str, str], values: dict, name: str = "t.j2"):
    """(Jinja2's text or exception type, the compiled code's text or exception type)."""
    env = environment(templates)
    source, _ = compile_template(env, name, set(render.FILTERS))
    compiled = compiled_templates.Template(name, "/templates", compile(source, "<t>", "exec"),
                                           render._finalize, render.FILTERS)
    results = []
    for call in (lambda: env.get_template(name).render(**values),
                 lambda: compiled.render(**values)):
        try:
            results.append(call())
        except jinja2.UndefinedError:
            results.append("undefined")
        except compiled_templates.UndefinedError:
            results.append("undefined")
        except (TypeError, ValueError) as err:
            results.append(type(err).__name__)
    return results


Job = types.SimpleNamespace


SAME = [
    ("text only\n  indented\n", {}),
    ("{{ a }} and {{ b }}\n", {"a": "x y", "b": 3}),
    ("{{ a | argv }} {{ a | q }}", {"a": ["x", "it's", "$(y)"]}),
    ("{{ j.name | header }}:{{ j['name'] }}:{{ d.k }}:{{ d['k'] }}", {"j": Job(name="n1"),
                                                                     "d": {"k": "v"}}),
    ("{% if a %}yes{% elif b %}b{% else %}no{% endif %}\n", {"a": 0, "b": 1}),
    ("{% if a %}\n  yes\n{% else %}\n  no\n{% endif %}\nend\n", {"a": ""}),
    ("{% if j.p is not none %}{{ j.p }}{% endif %}{% if j.q is none %}-{% endif %}",
     {"j": Job(p=0, q=None)}),
    ("{% if x is defined %}d{% endif %}{% if y is undefined %}u{% endif %}", {"x": 1}),
    ("{% for a in xs %}\n{{ loop.index0 }}/{{ loop.index }}/{{ loop.length }}"
     "{% if loop.first %}F{% endif %}{% if loop.last %}L{% endif %} {{ a }}\n{% endfor %}",
     {"xs": ["p", "q", "r"]}),
    ("{% for a in xs %}{{ a }}{% else %}empty{% endfor %}", {"xs": []}),
    ("{% for a in xs %}{{ a }}{% else %}empty{% endfor %}", {"xs": ["1"]}),
    ("{% for k, v in xs %}{{ k }}={{ v }};{% endfor %}", {"xs": [("a", 1), ("b", 2)]}),
    ("{% for a in xs %}{% for b in a %}{{ b }}{{ loop.revindex0 }}{% endfor %}|{% endfor %}",
     {"xs": [[1, 2], [3]]}),
    ("{% for a in xs %}{{ ys[loop.index0] | argv }}{% endfor %}",
     {"xs": ["a", "b"], "ys": [("x",), ("y z",)]}),
    ("{{ j.f() }} {{ j.g(2, 'x') }}", {"j": Job(f=lambda: "called", g=lambda n, s: s * n)}),
    ("{{ 'c' if a else 'd' }} {{ a and b }} {{ a or b }} {{ not a }}", {"a": 0, "b": "bb"}),
    ("{{ a == 1 }} {{ a != 1 }} {{ 1 < a <= 3 }} {{ 'x' in s }} {{ 'z' not in s }}",
     {"a": 2, "s": "xy"}),
    ("{{ a ~ '-' ~ b }} {{ [a, b] | argv }} {{ (a, b) | argv }}", {"a": "p", "b": 7}),
    ("{# a comment #}\n  {% if a %}\n    x\n  {% endif %}\n", {"a": 1}),
    ("{% include 'i.j2' %}after {{ a }}\n", {"a": 1, "b": "from include"}),
    ("{{ d.missing_key }}", {"d": {"k": 1}}),     # lookup falls back, then undefined
    ("{{ d.items }}", {"d": {"items": 1}}),      # an attribute wins over an item
    ("{{ xs[5] }}", {"xs": [1]}),
    # failures: the same kind each way
    ("{{ nope }}", {}),
    ("{% if nope %}x{% endif %}", {}),
    ("{% for a in nope %}x{% endfor %}", {}),
    ("{{ j.nope }}", {"j": Job()}),
    ("{{ j.nope.deeper }}", {"j": Job()}),
    ("{{ flag }}", {"flag": True}),
    ("{{ n }}", {"n": None}),
    ("{{ j.name | header }}", {"j": Job(name="a b;c")}),
]


@pytest.mark.parametrize("source, values", SAME)
def test_the_compiled_code_writes_what_jinja2_writes(source, values):
    templates = {"t.j2": source, "i.j2": "included {{ b }}\n"}
    expected, got = both(templates, values)
    assert got == expected


@pytest.mark.parametrize("source", [
    "{% set x = 1 %}{{ x }}", "{{ a | upper }}", "{{ a | argv(sep=1) }}", "{{ range(3) }}",
    "{% macro m() %}{% endmacro %}", "{{ a[1:2] }}", "{{ a + 1 }}", "{{ f(x=1) }}",
    "{% for a in xs if a %}{% endfor %}", "{% for a in xs %}{% include 'i.j2' %}{% endfor %}",
    "{% include name %}", "{{ a is even }}", "{% block b %}{% endblock %}",
    "{% raw %}{{ a }}{% endraw %}{{ {'a': 1} }}", "{{ loop.cycle(1, 2) }}{% for a in x %}"
    "{{ loop.cycle(1, 2) }}{% endfor %}"])
def test_what_the_compiler_does_not_translate_is_refused(source):
    with pytest.raises(Unsupported):
        compile_template(environment({"t.j2": source, "i.j2": "x"}), "t.j2", set(render.FILTERS))


@pytest.mark.parametrize("script_name, scheduler", CASES)
def test_the_builtin_templates_compiled_write_what_jinja2_writes(script_name, scheduler, config,
                                                                tmp_path, fixed_callback):
    compiled = rendered(script_name, scheduler, config)
    # an (empty) override folder sends every template through Jinja2 itself
    through_jinja2 = rendered(script_name, scheduler, SiteConfig(
        storage=config.storage, state=config.state, templates=TemplatesConfig(
            directory=str(tmp_path))))
    assert [j.script for j in compiled.jobs] == [j.script for j in through_jinja2.jobs]


def test_the_builtin_templates_all_compile():
    compiled = render._compile_builtin()
    assert {"slurm/stage.sh.j2", "pbs/stage.sh.j2", "slurm/compute.sh.j2",
            "common/data-job.sh.j2"} <= set(compiled)
    source, sources = compiled["slurm/stage.sh.j2"]
    assert set(sources) == {"slurm/stage.sh.j2", "common/data-job.sh.j2"}  # its include too


# -- the cache ------------------------------------------------------------------------------

def folder_with(tmp_path, text: str) -> str:
    folder = tmp_path / "templates"
    (folder / "slurm").mkdir(parents=True, exist_ok=True)
    (folder / "slurm" / "compute.sh.j2").write_text(text)
    os.chmod(folder, 0o755)
    return str(folder)


def compiled_from(folder: str) -> dict:
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(folder),
                             undefined=jinja2.StrictUndefined, finalize=render._finalize,
                             **render._OPTIONS)
    return {"slurm/compute.sh.j2": compile_template(env, "slurm/compute.sh.j2",
                                                    set(render.FILTERS))}


def load(folder: str, tag: str = "tag"):
    return compiled_templates.load(folder, tag, render._finalize, render.FILTERS)


def test_the_cache_is_used_while_its_templates_are_unchanged(tmp_path):
    folder = folder_with(tmp_path, "one {{ a }}\n")
    assert load(folder) is None
    assert compiled_templates.store(folder, "tag", compiled_from(folder))
    sources, templates = load(folder)
    assert templates["slurm/compute.sh.j2"].render(a="x") == "one x\n"
    assert compiled_templates.unchanged(folder, sources)
    assert load(folder, tag="other options") is None           # other options or filters
    folder_with(tmp_path, "two {{ a }}\n")                       # the template edited
    assert not compiled_templates.unchanged(folder, sources) and load(folder) is None


def test_a_cache_others_may_write_is_not_read_and_a_corrupt_one_is_ignored(tmp_path):
    folder = folder_with(tmp_path, "one {{ a }}\n")
    assert compiled_templates.store(folder, "tag", compiled_from(folder))
    cache = os.path.join(folder, "__pycache__")
    os.chmod(cache, 0o777)
    assert load(folder) is None
    assert not compiled_templates.store(folder, "tag", compiled_from(folder))
    os.chmod(cache, 0o755)
    assert load(folder) is not None
    with open(os.path.join(cache, compiled_templates.FILE), "r+b") as stream:
        stream.truncate(100)
    assert load(folder) is None
    assert [n for n in os.listdir(cache) if n.endswith(".tmp")] == []


def test_an_error_names_the_template_file_and_line(tmp_path):
    folder = folder_with(tmp_path, "#!/bin/bash\n\n{% if a %}\n{{ b | header }}\n{% endif %}\n")
    _, templates = compiled_templates.build(folder, compiled_from(folder), render._finalize,
                                            render.FILTERS)
    template = templates["slurm/compute.sh.j2"]
    with pytest.raises(ValueError) as caught:
        template.render(a=1, b="x y")
    assert template.where(caught.value.__traceback__) == (
        os.path.join(folder, "slurm/compute.sh.j2"), 4)
