"""Reading the site configuration: a TOML file checked key by key against :mod:`.sections`.

:func:`load_config` finds and reads the file, :func:`parse_config` checks its text: unknown
keys and wrong values are refused with ``FILE:LINE: key 'section.name': expected ..., got ...``
(:class:`_KeyLocator` finds the line), then the rules that tie one key to another.
:func:`describe_schema` lists every key for ``scratchkeeper config --schema``.
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
import sys
import typing
from pathlib import Path
from typing import Any

from ..errors import ConfigError
from ..inputfiles import read_limited
from .sections import SiteConfig, StorageConfig
from .values import _class_name, normal_path, parse_ost_ranges

DEFAULT_PATH = "/etc/scratchkeeper/site.toml"
ENV_VAR = "SCRATCHKEEPER_CONFIG"

#: A site configuration is a few KiB; anything far larger is not one.
CONFIG_SIZE_MAX = 1 << 20
#: What no string of the configuration holds: C0 and C1 controls (NUL, newline, ESC, U+0085
#: NEL...), DEL, the Unicode line and paragraph separators, and the bidirectional overrides
#: and isolates. Each of them breaks or disguises a line where the value is shown or used (a
#: log record, a job script, a command line): one rule for every string key and list item.
_CONTROL_CHARACTER = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


def load_config(path: str | os.PathLike | None = None) -> SiteConfig:
    """Read and validate the site configuration.

    ``path`` wins, then ``$SCRATCHKEEPER_CONFIG``, then ``/etc/scratchkeeper/site.toml``; with
    none of them present the defaults are used. A named file that is missing is an error, and
    so is anything but a regular file (a device or FIFO is refused, not read).
    """
    explicit = path is not None or ENV_VAR in os.environ
    chosen = Path(path if path is not None else os.environ.get(ENV_VAR, DEFAULT_PATH))
    if not chosen.exists():
        if explicit:
            raise ConfigError("no such configuration file", path=str(chosen))
        return SiteConfig()
    data = read_limited(chosen, CONFIG_SIZE_MAX, what="site configuration", error=ConfigError)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        line = data.count(b"\n", 0, err.start) + 1
        column = err.start - (data.rfind(b"\n", 0, err.start) + 1) + 1
        key = _KeyLocator(data.decode("utf-8", "replace")).key_at(line)
        raise ConfigError(f"{'key ' + _show(key) + ': ' if key else ''}not UTF-8: byte "
                          f"0x{data[err.start]:02x} at column {column}", path=str(chosen),
                          line=line) from err
    return parse_config(text, str(chosen))


def parse_config(text: str, source: str = "<string>") -> SiteConfig:
    """Validate TOML ``text``; errors name ``source``, the line and the key."""
    import tomllib

    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as err:
        match = re.search(r"line (\d+)", str(err))
        raise ConfigError(f"not valid TOML: {err}", path=source,
                          line=int(match.group(1)) if match else None) from err
    except RecursionError as err:
        raise ConfigError("not valid TOML: arrays or tables nested too deeply", path=source,
                          line=_deep_nesting_line(text)) from err
    except ValueError as err:  # an integer of more digits than int() converts
        match = re.search(r"\d{%d}" % (sys.get_int_max_str_digits() + 1), text)
        raise ConfigError(f"not valid TOML: {str(err).split(':')[0]}", path=source,
                          line=text.count("\n", 0, match.start()) + 1 if match else None) from err
    locator = _KeyLocator(text)
    config = _build(SiteConfig, raw, "", source, locator)
    _check_across_keys(config, source, locator)
    return dataclasses.replace(config, source=source)


def _check_across_keys(config: SiteConfig, source: str, locator: _KeyLocator) -> None:
    """Rules that tie one key to another (each key alone was checked by :func:`_convert`)."""
    ost_count = config.storage.ost_count
    # ost_count is the local store's; a Lustre file system has the OSTs its servers have
    pools = config.storage.pools if config.storage.backend == "local" else {}
    for name, members in pools.items():
        beyond = [i for i in parse_ost_ranges(members) if i >= ost_count]
        if beyond:
            dotted = f"storage.pools.{name}"
            raise ConfigError(f"key '{dotted}': OSTs {_show(beyond)} beyond storage.ost_count = "
                              f"{ost_count} (indices 0..{ost_count - 1})", path=source,
                              line=locator.line_of(dotted))
    _check_tiers(config.storage, source, locator)
    if config.tiering.lower_watermark > config.tiering.upper_watermark:
        raise ConfigError(f"key 'tiering.lower_watermark': expected at most "
                          f"tiering.upper_watermark ({config.tiering.upper_watermark:g}), got "
                          f"{config.tiering.lower_watermark:g}", path=source,
                          line=locator.line_of("tiering.lower_watermark"))


def _check_tiers(storage: StorageConfig, source: str, locator: _KeyLocator) -> None:
    """storage.pool_tiers names pools of storage.pools; storage.tier_order lists each of its
    classes once, and nothing else."""
    for pool, tier in storage.pool_tiers.items():
        dotted = f"storage.pool_tiers.{pool}"
        if pool not in storage.pools:
            raise ConfigError(f"key '{dotted}': no pool {pool!r} in storage.pools (pools: "
                              f"{', '.join(sorted(storage.pools)) or 'none'})", path=source,
                              line=locator.line_of(dotted))
        if tier not in storage.tier_order:
            raise ConfigError(f"key '{dotted}': class {tier!r} is not in storage.tier_order "
                              f"({storage.tier_order})", path=source, line=locator.line_of(dotted))
    classes = set(storage.pool_tiers.values())
    for position, tier in enumerate(storage.tier_order):
        problem = _class_name(tier)
        if problem is None and tier in storage.tier_order[:position]:
            problem = "each class once"
        if problem is None and tier not in classes:
            problem = "a class some pool has in storage.pool_tiers"
        if problem:
            raise ConfigError(f"key 'storage.tier_order': expected {problem}, got {tier!r}",
                              path=source, line=locator.line_of("storage.tier_order"))


_BARE_KEY = r'[A-Za-z0-9_-]+|"[^"]*"|\'[^\']*\''
_DOTTED_KEY = re.compile(rf"\s*((?:{_BARE_KEY})(?:\s*\.\s*(?:{_BARE_KEY}))*)\s*")


def _key_path(text: str) -> str:
    return ".".join(part.strip().strip("\"'") for part in
                    re.findall(_BARE_KEY, text))


def _deep_nesting_line(text: str, depth: int = 100) -> int | None:
    """The first line where ``[``/``{`` nest deeper than ``depth`` (strings not parsed: only
    to name a line in an error)."""
    level = 0
    for number, line in enumerate(text.splitlines(), 1):
        for character in line:
            level += character in "[{"
            level -= character in "]}"
            if level > depth:
                return number
    return None


class _KeyLocator:
    """Finds the line of ``section.key`` in the TOML text, for error messages: the line that
    sets it or, where it sits in an inline table or its table has no line of its own, the line
    of the nearest enclosing key or ``[table]`` header."""

    def __init__(self, text: str):
        self.lines = text.splitlines()

    def _entries(self):
        """``(line number, dotted key, is a [table] header)`` of every key line, in order."""
        current = ""
        for number, line in enumerate(self.lines, 1):
            stripped = line.strip()
            header = re.match(rf"^\[\[?({_DOTTED_KEY.pattern})\]\]?", stripped)
            if header:
                current = _key_path(header.group(1))
                yield number, current, True
                continue
            assignment = re.match(rf"^({_DOTTED_KEY.pattern})=", stripped)
            if assignment:
                key = _key_path(assignment.group(1))
                yield number, f"{current}.{key}" if current else key, False

    def key_at(self, number: int) -> str | None:
        """The dotted key set on line ``number`` (or the table its header opens)."""
        return next((key for line, key, _ in self._entries() if line == number), None)

    def line_of(self, dotted: str) -> int | None:
        best, best_depth = None, -1
        for number, full, header in self._entries():
            if full == dotted and not header:
                return number
            if (full == dotted or dotted.startswith(full + ".")) and full.count(".") > best_depth:
                best, best_depth = number, full.count(".")
        return best


def _build(cls, raw: Any, prefix: str, source: str, locator: _KeyLocator):
    if not isinstance(raw, dict):
        raise ConfigError(f"key '{prefix.rstrip('.')}': expected a table, got {_show(raw)}",
                          path=source, line=locator.line_of(prefix.rstrip(".")))
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls) if not f.metadata.get("internal")}
    for key in raw:
        if key not in fields:
            dotted = prefix + key
            raise ConfigError(f"unknown key {_show(dotted)} (known: {', '.join(sorted(fields))})",
                              path=source, line=locator.line_of(dotted))
    values = {}
    for name, fld in fields.items():
        if name not in raw:
            continue
        values[name] = _convert(hints[name], raw[name], prefix + name, fld.metadata, source, locator)
    return cls(**values)


def _convert(hint, value, dotted, meta, source, locator):
    def fail(expected: str):
        raise ConfigError(f"key {_show(dotted)}: expected {expected}, got {_show(value)}",
                          path=source, line=locator.line_of(dotted))

    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if dataclasses.is_dataclass(hint):
        return _build(hint, value, dotted + ".", source, locator)
    if origin is typing.Union or origin is getattr(__import__("types"), "UnionType", None):
        inner = [a for a in args if a is not type(None)]
        return _convert(inner[0], value, dotted, meta, source, locator)
    if origin is dict:
        if not isinstance(value, dict):
            fail("a table")
        for name in value:
            if not re.fullmatch(r"[A-Za-z0-9_.-]{1,64}", name):
                dotted = f"{dotted}.{name}"
                value = name
                fail("a name of 1 to 64 letters, digits, '_', '-' or '.'")
        return {k: _convert(args[1], v, f"{dotted}.{k}", meta, source, locator)
                for k, v in value.items()}
    if origin is list:
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            fail("a list of strings")
        if any(_CONTROL_CHARACTER.search(v) for v in value):
            fail("strings without control or line-breaking characters (NUL, newline, U+0085, "
                 "U+2028, ...)")
        return list(value)
    if hint is bool:
        if not isinstance(value, bool):
            fail("true or false")
        return value
    if hint is int:
        if isinstance(value, bool) or not isinstance(value, int):
            fail("an integer")
    elif hint is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            fail("a number")
        if isinstance(value, int) and abs(value) > 2 ** 53:
            fail("a number of at most 2**53")
        if not math.isfinite(value):
            fail("a finite number")
        value = float(value)
    elif hint is str:
        if not isinstance(value, str):
            fail("a string")
        if _CONTROL_CHARACTER.search(value):
            fail("a string without control or line-breaking characters (NUL, newline, U+0085, "
                 "U+2028, ...)")
    choices = meta.get("choices")
    if choices and value not in choices:
        fail("one of " + ", ".join(repr(c) for c in choices))
    low, high = meta.get("minimum"), meta.get("maximum")
    if low is not None and (value < low or (meta.get("exclusive_minimum") and value == low)):
        fail(f"a value {'>' if meta.get('exclusive_minimum') else '>='} {low:g}")
    if high is not None and value > high:
        fail(f"a value <= {high:g}")
    kind = meta.get("path")
    if kind and not (value == "" and kind == "absolute or empty"):
        if not os.path.isabs(value):
            fail(f"an {kind} path")
        if ".." in value.split("/"):
            fail("a path without '..'")
        value = normal_path(value)
    check = meta.get("expected")
    if check is not None and (expected := check(value)):
        fail(expected)
    return value


def _show(value: Any) -> str:
    if isinstance(value, dict):
        return "a table"
    text = repr(value)
    return text if len(text) <= 80 else f"{text[:60]}... ({len(text)} characters)"


def describe_schema() -> list[tuple[str, str, Any, str]]:
    """Every key as ``(dotted name, type, default, doc)``, for ``scratchkeeper config --schema``."""
    rows = []

    def walk(cls, prefix):
        hints = typing.get_type_hints(cls)
        default = cls()
        for fld in dataclasses.fields(cls):
            if fld.metadata.get("internal"):
                continue
            hint = hints[fld.name]
            if dataclasses.is_dataclass(hint):
                walk(hint, prefix + fld.name + ".")
                continue
            type_name = getattr(hint, "__name__", str(hint)).replace("typing.", "")
            rows.append((prefix + fld.name, type_name, getattr(default, fld.name),
                         fld.metadata.get("doc", "")))

    walk(SiteConfig, "")
    return rows
