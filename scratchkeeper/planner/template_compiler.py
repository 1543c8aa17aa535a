"""Compile Jinja2 job templates into plain Python, so rendering them does not import Jinja2.

Jinja2 parses each template (its lexer applies ``trim_blocks``/``lstrip_blocks``, so the text
pieces are already what Jinja2 would write); this module turns the parsed tree into a Python
function with the same output, run by :mod:`.compiled_templates`. It knows the part of the
template language the built-in job templates use:

- text, ``{{ expression }}`` (through the environment's ``finalize``), ``{# comments #}``;
- ``{% if %}``/``{% elif %}``/``{% else %}``, ``{% for x in xs %}`` (also ``for a, b in``, an
  ``{% else %}``, and ``loop.index0``/``index``/``first``/``last``/``length``/``revindex(0)``),
  ``{% include "name" %}`` of a constant name outside loops;
- names, ``a.b``, ``a[b]``, calls with positional arguments, constants, lists and tuples,
  ``not``/``and``/``or``, ``x if c else y``, comparisons, ``~``, the site's own filters (with
  positional arguments) and the tests ``none``, ``defined`` and ``undefined``.

Anything else raises :class:`Unsupported`, and that template set is rendered by Jinja2 itself.
Attribute and item lookup follow Jinja2's ``Environment.getattr``/``getitem``, and an undefined
value behaves as ``StrictUndefined``: any use but the tests above is an error. The tests in
tests/planner/test_template_compiler.py render every construct both ways and compare.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import jinja2

_COMPARE = {"eq": "==", "ne": "!=", "gt": ">", "gteq": ">=", "lt": "<", "lteq": "<=",
            "in": "in", "notin": "not in"}
_LOOP_FIELDS = ("index0", "index", "first", "last", "length", "revindex", "revindex0")


class Unsupported(Exception):
    """A construct this compiler does not translate (Jinja2 renders the template instead)."""


def compile_template(env: jinja2.Environment, name: str, filters: set[str]) -> tuple[str, dict]:
    """The Python source of ``render(ctx, filters)`` for template ``name`` and the sources it
    was made from (``{template name: source text}``, the includes too), which the cache
    compares with the files before using it. Raises :class:`Unsupported`."""
    return _Compiler(env, filters).module(name)


class _Compiler:
    def __init__(self, env, filters: set[str]):
        import jinja2.nodes

        self.env = env
        self.nodes = jinja2.nodes
        self.filters = filters
        self.globals = set(env.globals)
        self.sources: dict[str, str] = {}
        self.lines: list[str] = []
        self.linemap: list[tuple[int, str, int]] = []   # (python line, template, template line)
        self.counter = 0
        self.including: list[str] = []

    # -- the module ---------------------------------------------------------------------------
    def module(self, name: str) -> tuple[str, dict]:
        self.lines = ["def render(ctx, filters):", "    _out = []", "    _w = _out.append"]
        self._template(name, depth=1, scope={})
        self.lines.append("    return ''.join(_out)")
        self.lines.append(f"LINES = {self.linemap!r}")
        return "\n".join(self.lines) + "\n", dict(self.sources)

    def _template(self, name: str, depth: int, scope: dict) -> None:
        if name in self.including:
            raise Unsupported(f"{name} includes itself")
        source, filename, _ = self.env.loader.get_source(self.env, name)
        self.sources[name] = source
        tree = self.env.parse(source, name, filename)
        self.including.append(name)
        self._body(tree.body, depth, scope, name)
        self.including.pop()

    def _emit(self, depth: int, code: str, template: str = "", lineno: int = 0) -> None:
        self.lines.append("    " * depth + code)
        if template:
            self.linemap.append((len(self.lines), template, lineno))

    def _fresh(self, stem: str) -> str:
        self.counter += 1
        return f"_{stem}{self.counter}"

    # -- statements ---------------------------------------------------------------------------
    def _body(self, body, depth: int, scope: dict, template: str) -> None:
        start = len(self.lines)
        for node in body:
            self._statement(node, depth, scope, template)
        if len(self.lines) == start:
            self._emit(depth, "pass")

    def _statement(self, node, depth: int, scope: dict, template: str) -> None:
        n = self.nodes
        if isinstance(node, n.Output):
            for child in node.nodes:
                if isinstance(child, n.TemplateData):
                    if child.data:
                        self._emit(depth, f"_w({child.data!r})")
                else:
                    self._emit(depth, f"_w(str(_finalize({self._expr(child, scope)})))",
                               template, child.lineno)
        elif isinstance(node, n.If):
            self._emit(depth, f"if {self._expr(node.test, scope)}:", template, node.lineno)
            self._body(node.body, depth + 1, scope, template)
            for branch in node.elif_:
                self._emit(depth, f"elif {self._expr(branch.test, scope)}:", template,
                           branch.lineno)
                self._body(branch.body, depth + 1, scope, template)
            if node.else_:
                self._emit(depth, "else:")
                self._body(node.else_, depth + 1, scope, template)
        elif isinstance(node, n.For):
            self._for(node, depth, scope, template)
        elif isinstance(node, n.Include):
            if not isinstance(node.template, n.Const) or not isinstance(node.template.value, str) \
                    or node.ignore_missing or not node.with_context or scope:
                raise Unsupported("only {% include \"name\" %} of a constant name outside loops")
            self._template(node.template.value, depth, scope)
        else:
            raise Unsupported(f"{type(node).__name__} statement")

    def _for(self, node, depth: int, scope: dict, template: str) -> None:
        n = self.nodes
        if node.recursive or node.test is not None:
            raise Unsupported("recursive or filtered loop")
        targets = [node.target] if isinstance(node.target, n.Name) else \
            list(node.target.items) if isinstance(node.target, n.Tuple) else []
        if not targets or not all(isinstance(t, n.Name) for t in targets):
            raise Unsupported("loop target")
        inner = dict(scope)
        for target in targets:
            inner[target.name] = self._fresh(f"l_{target.name}_")
        # each loop has its own ``loop`` (unless its target is named so)
        uses_loop = any(x.name == "loop" for x in node.find_all(n.Name)
                        if x.ctx == "load") and "loop" not in [t.name for t in targets]
        items = self._fresh("items")
        self._emit(depth, f"{items} = {self._expr(node.iter, scope)}", template, node.lineno)
        if uses_loop or node.else_:
            self._emit(depth, f"{items} = list({items})")
        if uses_loop:
            inner["loop"] = self._fresh("loop")
        index = self._fresh("i")
        self._emit(depth, f"for {index}, _item in enumerate({items}):")
        if len(targets) == 1:
            self._emit(depth + 1, f"{inner[targets[0].name]} = _item")
        else:
            names = ", ".join(inner[t.name] for t in targets)
            self._emit(depth + 1, f"{names}, = _item")
        if uses_loop:
            self._emit(depth + 1, f"{inner['loop']} = _Loop({index}, len({items}))")
        self._body(node.body, depth + 1, inner, template)
        if node.else_:  # Jinja2's loop else: when there was nothing to iterate
            self._emit(depth, f"if not {items}:")
            self._body(node.else_, depth + 1, scope, template)

    # -- expressions --------------------------------------------------------------------------
    def _expr(self, node, scope: dict) -> str:
        n = self.nodes
        if isinstance(node, n.Const):
            if node.value is None or isinstance(node.value, (str, int, float, bool)):
                return repr(node.value)
            raise Unsupported(f"constant {node.value!r}")
        if isinstance(node, n.Name):
            if node.ctx != "load":
                raise Unsupported("assignment")
            if node.name in scope:
                return scope[node.name]
            if node.name in self.globals:
                raise Unsupported(f"Jinja2 global {node.name}")
            return f"_name(ctx, {node.name!r})"
        if isinstance(node, n.Getattr):
            if node.node.__class__ is n.Name and scope.get(node.node.name, "").startswith("_loop"):
                if node.attr not in _LOOP_FIELDS:
                    raise Unsupported(f"loop.{node.attr}")
                return f"{scope[node.node.name]}.{node.attr}"
            return f"_getattr({self._expr(node.node, scope)}, {node.attr!r})"
        if isinstance(node, n.Getitem):
            if isinstance(node.arg, n.Slice):
                raise Unsupported("slice")
            return f"_getitem({self._expr(node.node, scope)}, {self._expr(node.arg, scope)})"
        if isinstance(node, n.Filter):
            if node.name not in self.filters or node.kwargs or node.dyn_args or node.dyn_kwargs:
                raise Unsupported(f"filter {node.name}")
            args = [self._expr(node.node, scope)] + [self._expr(a, scope) for a in node.args]
            return f"filters[{node.name!r}]({', '.join(args)})"
        if isinstance(node, n.Test):
            if node.args or node.kwargs or node.dyn_args or node.dyn_kwargs:
                raise Unsupported(f"test {node.name} with arguments")
            value = self._expr(node.node, scope)
            if node.name == "none":
                return f"({value} is None)"
            if node.name == "defined":
                return f"(not isinstance({value}, _Undefined))"
            if node.name == "undefined":
                return f"isinstance({value}, _Undefined)"
            raise Unsupported(f"test {node.name}")
        if isinstance(node, n.Not):
            return f"(not {self._expr(node.node, scope)})"
        if isinstance(node, n.And):
            return f"({self._expr(node.left, scope)} and {self._expr(node.right, scope)})"
        if isinstance(node, n.Or):
            return f"({self._expr(node.left, scope)} or {self._expr(node.right, scope)})"
        if isinstance(node, n.CondExpr):
            if node.expr2 is None:
                raise Unsupported("x if c without else")
            return (f"({self._expr(node.expr1, scope)} if {self._expr(node.test, scope)} "
                    f"else {self._expr(node.expr2, scope)})")
        if isinstance(node, n.Compare):
            parts = [self._expr(node.expr, scope)]
            for operand in node.ops:
                parts += [_COMPARE[operand.op], self._expr(operand.expr, scope)]
            return f"({' '.join(parts)})"
        if isinstance(node, n.Concat):
            return "''.join((" + "".join(f"str({self._expr(x, scope)}), "
                                         for x in node.nodes) + "))"
        if isinstance(node, (n.List, n.Tuple)):
            items = "".join(f"{self._expr(x, scope)}, " for x in node.items)
            return f"[{items}]" if isinstance(node, n.List) else f"({items})"
        if isinstance(node, n.Call):
            if node.kwargs or node.dyn_args or node.dyn_kwargs:
                raise Unsupported("call with keyword arguments")
            args = [self._expr(node.node, scope)] + [self._expr(a, scope) for a in node.args]
            return f"_call({', '.join(args)})"
        raise Unsupported(f"{type(node).__name__} expression")
