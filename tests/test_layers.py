"""The layer rule of docs/architecture.rst ("Layers, and the rule that imports flow down") held
against the code: the page's two tables (each room's layer; the arrows allowed sideways inside
a layer, with their reasons) are read as data, and every import of every module of the package,
those inside functions and under ``TYPE_CHECKING`` too, is checked against them. A room is a
package under ``scratchkeeper/`` or a module at its top level; imports inside one room are free.

Imports made by ``importlib`` are not followed: the package makes them only inside the room it
loads from (``cli``'s subcommand modules, ``schedulers``' backends) or from ``cli`` (the command
server's warm-up), the top layer, which may import anything.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "scratchkeeper"
DOC = REPO / "docs" / "architecture.rst"
SECTION = "Layers, and the rule that imports flow down"
BORDER = re.compile(r"^=+(?: +=+)+ *$")


@dataclass(frozen=True)
class Arrow:
    """One import from a module of one room to a module of another."""

    source: str  # dotted module names, ``scratchkeeper.`` included
    line: int
    target: str
    path: Path


def room(module: str) -> str:
    """The room of ``scratchkeeper.a.b`` is ``a``; the package's face is ``scratchkeeper``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


# -- the tables ---------------------------------------------------------------------------------

def _section(text: str) -> list[str]:
    """The lines of the section, up to the next heading (a line underlined with dashes)."""
    lines = text.splitlines()
    start = lines.index(SECTION)
    end = next((i - 1 for i in range(start + 2, len(lines))
                if re.fullmatch(r"-{3,}", lines[i]) and lines[i - 1].strip()), len(lines))
    return lines[start + 2:end]


def simple_tables(lines: list[str]) -> list[list[list[str]]]:
    """The reStructuredText simple tables among ``lines``, each a list of rows of cells
    (header row left out). A line whose first cell is empty goes on the row above, as
    docutils reads it; text may run past its column only in the last one."""
    tables = []
    i = 0
    while i < len(lines):
        if not BORDER.match(lines[i]):
            i += 1
            continue
        spans = [m.span() for m in re.finditer(r"=+", lines[i])]
        assert BORDER.match(lines[i + 2]), f"line {i + 3} of the section: no border under the header"
        rows: list[list[str]] = []
        i += 3
        while not BORDER.match(lines[i]):
            line = lines[i]
            for (_, end), (start, _) in zip(spans, spans[1:]):
                assert not line[end:start].strip(), f"a cell crosses its column: {line!r}"
            cells = [line[a:b].strip() for a, b in spans[:-1]] + [line[spans[-1][0]:].strip()]
            if not line.strip():
                pass
            elif cells[0]:
                rows.append(cells)
            else:
                assert rows, f"a continuation line without a row above: {line!r}"
                rows[-1] = [f"{a} {b}".strip() for a, b in zip(rows[-1], cells)]
            i += 1
        tables.append(rows)
        i += 1
    return tables


def _literal(cell: str) -> str:
    match = re.fullmatch(r"``([\w.]+)``", cell)
    assert match, f"not a ``name``: {cell!r}"
    return match.group(1)


def read_tables(text: str) -> tuple[dict[str, int], dict[tuple[str, str], str]]:
    """The page's layer of each room, and the sideways arrows allowed: (room, module) -> why."""
    layer_rows, arrow_rows = simple_tables(_section(text))
    layers: dict[str, int] = {}
    for layer, _role, name, _holds in layer_rows:
        assert _literal(name) not in layers, f"room {name} has two rows"
        layers[_literal(name)] = int(layer)
    sideways = {}
    for source, target, why in arrow_rows:
        sideways[(_literal(source), f"scratchkeeper.{_literal(target)}")] = why
    return layers, sideways


# -- the code -----------------------------------------------------------------------------------

def modules(package: Path) -> dict[str, Path]:
    """Every Python module under ``package``, by dotted name."""
    found = {}
    for path in sorted(package.rglob("*.py")):
        if "__pycache__" in path.parts:
            continue
        parts = list(path.relative_to(package.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def _targets(module: str, path: Path, node: ast.Import | ast.ImportFrom,
             known: dict[str, Path]) -> list[str]:
    """The package's modules an import statement names (a name taken from a module counts
    as that module; a submodule named in ``from PACKAGE import NAME`` as the submodule)."""
    top = module.split(".")[0]
    if isinstance(node, ast.Import):
        names = [alias.name for alias in node.names]
    else:
        base = node.module or ""
        if node.level:
            package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
            package = package[:len(package) - (node.level - 1)]
            base = ".".join(package + ([node.module] if node.module else []))
        names = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base
                 for alias in node.names]
    found = []
    for name in names:
        if name != top and not name.startswith(top + "."):
            continue
        while name not in known and "." in name:  # a C extension: the package that loads it
            name = name.rpartition(".")[0]
        found.append(name)
    return found


def arrows(package: Path) -> list[Arrow]:
    """Every import from one room into another, wherever in its module it stands."""
    known = modules(package)
    found = set()
    for module, path in known.items():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import | ast.ImportFrom):
                for target in _targets(module, path, node, known):
                    if room(target) != room(module):
                        found.add(Arrow(module, node.lineno, target, path))
    return sorted(found, key=lambda a: (a.source, a.line, a.target))


def violations(package: Path, layers: dict[str, int],
               sideways: dict[tuple[str, str], str]) -> list[str]:
    """What in the code breaks the tables, or what in the tables the code does not bear out:
    one line each."""
    wrong = []
    rooms = {room(module) for module in modules(package)}
    wrong += [f"room {name}: not in the layer table" for name in sorted(rooms - layers.keys())]
    wrong += [f"room {name}: in the layer table, not in the code"
              for name in sorted(layers.keys() - rooms)]
    used = set()
    for arrow in arrows(package):
        here, there = layers.get(room(arrow.source)), layers.get(room(arrow.target))
        if here is None or there is None:
            continue  # told above
        where = f"{arrow.path.relative_to(package.parent)}:{arrow.line}: imports {arrow.target}"
        if there < here:
            wrong.append(f"{where}, up from layer {here} to layer {there}")
        elif there == here:
            if (room(arrow.source), arrow.target) in sideways:
                used.add((room(arrow.source), arrow.target))
            else:
                wrong.append(f"{where}, sideways in layer {here}, and the table of arrows "
                             "inside a layer does not list it")
    for (source, target), why in sorted(sideways.items()):
        if (source, target) not in used:
            wrong.append(f"listed arrow {source} -> {target}: the code has no such import "
                         "between rooms of one layer")
        elif not why:
            wrong.append(f"listed arrow {source} -> {target}: no reason given")
    return wrong


# -- the tests ----------------------------------------------------------------------------------

def test_the_code_keeps_the_layer_rule_of_the_architecture_page():
    layers, sideways = read_tables(DOC.read_text())
    found = violations(PACKAGE, layers, sideways)
    assert not found, "\n".join(found)


def test_the_page_gives_every_layer_a_role_and_every_room_what_it_holds():
    layer_rows, arrow_rows = simple_tables(_section(DOC.read_text()))
    roles = {int(row[0]): row[1] for row in layer_rows if row[1]}
    assert sorted(roles) == list(range(1, max(roles) + 1)), roles
    assert all(row[3] for row in layer_rows) and all(row[2] for row in arrow_rows)


def _tree(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root / "scratchkeeper"


def test_an_import_up_or_sideways_unlisted_is_found_wherever_it_stands(tmp_path):
    package = _tree(tmp_path, {
        "scratchkeeper/__init__.py": "",
        "scratchkeeper/errors.py": "",
        "scratchkeeper/top/__init__.py": "from ..low import helper\n",
        "scratchkeeper/low/__init__.py": "",
        "scratchkeeper/low/helper.py": "def f():\n    from ..top import x\n",
        "scratchkeeper/beside.py": "import scratchkeeper.low.helper\nfrom . import errors\n",
    })
    layers = {"scratchkeeper": 3, "errors": 3, "top": 1, "low": 2, "beside": 2}
    found = violations(package, layers, {})
    assert found == [
        "scratchkeeper/beside.py:1: imports scratchkeeper.low.helper, sideways in layer 2, and "
        "the table of arrows inside a layer does not list it",
        "scratchkeeper/low/helper.py:2: imports scratchkeeper.top, up from layer 2 to layer 1",
    ], found
    # listed, the sideways arrow passes; a listed arrow the code lacks, or a room missing
    # from the table or from the code, is reported
    found = violations(package, {**layers, "gone": 2} | {"top": 1},
                       {("beside", "scratchkeeper.low.helper"): "a reason",
                        ("low", "scratchkeeper.beside"): "a reason"})
    assert "room gone: in the layer table, not in the code" in found
    assert "listed arrow low -> scratchkeeper.beside: the code has no such import between " \
           "rooms of one layer" in found
    assert not [line for line in found if "beside.py" in line]
    del layers["beside"]
    assert "room beside: not in the layer table" in violations(package, layers, {})
