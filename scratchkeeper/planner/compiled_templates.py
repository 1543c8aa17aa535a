"""The built-in job templates compiled to Python, kept on disk and run without Jinja2.

:mod:`.template_compiler` turns each built-in template into a Python ``render`` function with
Jinja2's output (Jinja2 parses it). The code of all of them is kept in one file in the
``__pycache__`` folder of the built-in templates, as Python keeps a module's bytecode: written by
whoever may write the package (root for an installed runtime, the developer in a checkout; the
runtime install writes it, ``compile_templates``), only read by everyone else, and neither read
nor written where others than the folder's owner may write (what it holds runs as the caller's
code). A short command (``plan``, ``submit``) then renders without importing Jinja2 at all.

The file is used only when it was made by this compiler version for this Python, the same
environment options and filter names, and the same Jinja2 installation, and when every template
it was made from (includes too) still has the text it was compiled from: the file holds those
texts and they are compared with the files. Anything else is compiled again and the file
replaced.

This module is the runtime of the compiled code: lookups that follow Jinja2's
``Environment.getattr``/``getitem`` and an undefined value that behaves as Jinja2's
``StrictUndefined``.
"""

from __future__ import annotations

import functools
import marshal
import os
import stat
import sys
from collections.abc import Callable

#: the code's format and meaning; bumped when :mod:`.template_compiler` changes its output
VERSION = 1
FILE = f"job-templates.{sys.implementation.cache_tag}.v{VERSION}.skt"


class UndefinedError(Exception):
    """A compiled template used a value that is not defined (Jinja2's ``UndefinedError``)."""


class _Undefined:
    """An undefined value, as ``jinja2.StrictUndefined``: every use but a test fails."""

    __slots__ = ("_message",)

    def __init__(self, message: str):
        self._message = message

    def _fail(self, *args, **kwargs):
        raise UndefinedError(self._message)

    __str__ = __bool__ = __iter__ = __len__ = __eq__ = __ne__ = __hash__ = __call__ = _fail
    __contains__ = __getitem__ = __lt__ = __le__ = __gt__ = __ge__ = __int__ = __float__ = _fail
    __add__ = __radd__ = __mul__ = __rmul__ = _fail

    def __getattr__(self, name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        self._fail()


def _type_name(obj) -> str:
    """Jinja2's ``object_type_repr``."""
    if obj is None:
        return "None"
    if obj is Ellipsis:
        return "Ellipsis"
    cls = type(obj)
    if cls.__module__ == "builtins":
        return f"{cls.__name__} object"
    return f"{cls.__module__}.{cls.__name__} object"


def _name(ctx: dict, name: str):
    try:
        return ctx[name]
    except KeyError:
        return _Undefined(f"{name!r} is undefined")


def _getattr(obj, attribute: str):
    if isinstance(obj, _Undefined):
        obj._fail()
    try:
        return getattr(obj, attribute)
    except AttributeError:
        pass
    try:
        return obj[attribute]
    except (TypeError, LookupError, AttributeError):
        return _Undefined(f"{_type_name(obj)!r} has no attribute {attribute!r}")


def _getitem(obj, key):
    if isinstance(obj, _Undefined):
        obj._fail()
    try:
        return obj[key]
    except (AttributeError, TypeError, LookupError):
        if isinstance(key, str):
            try:
                return getattr(obj, key)
            except AttributeError:
                pass
            return _Undefined(f"{_type_name(obj)!r} has no attribute {key!r}")
        return _Undefined(f"{_type_name(obj)!r} has no element {key!r}")


def _call(function, *args):
    try:
        return function(*args)
    except StopIteration:
        return _Undefined("value was undefined because a callable raised a StopIteration "
                          "exception")


class _Loop:
    """The ``loop`` variable of a ``{% for %}``: the fields job templates use."""

    __slots__ = ("index0", "length")

    def __init__(self, index0: int, length: int):
        self.index0 = index0
        self.length = length

    index = property(lambda self: self.index0 + 1)
    first = property(lambda self: self.index0 == 0)
    last = property(lambda self: self.index0 == self.length - 1)
    revindex = property(lambda self: self.length - self.index0)
    revindex0 = property(lambda self: self.length - self.index0 - 1)


class Template:
    """One compiled template: ``render(**values)`` as Jinja2's ``Template.render``."""

    def __init__(self, name: str, folder: str, code, finalize: Callable, filters: dict):
        self.name = name
        self.folder = folder
        namespace = {"_finalize": finalize, "_name": _name, "_getattr": _getattr,
                     "_getitem": _getitem, "_call": _call, "_Loop": _Loop,
                     "_Undefined": _Undefined, "__builtins__": __builtins__}
        exec(code, namespace)
        self._render = namespace["render"]
        self._lines = namespace["LINES"]
        self._filename = code.co_filename
        self._filters = filters

    def render(self, **values) -> str:
        return self._render(values, self._filters)

    def where(self, traceback) -> tuple[str, int] | None:
        """The template file and line of the innermost frame of this code in ``traceback``."""
        found = None
        while traceback is not None:
            if traceback.tb_frame.f_code.co_filename == self._filename:
                found = traceback.tb_lineno
            traceback = traceback.tb_next
        if found is None:
            return None
        best = None
        for pyline, template, line in self._lines:
            if pyline <= found:
                best = (os.path.join(self.folder, template), line)
        return best


def _trusted(st: os.stat_result) -> bool:
    """Only the folder's owner may write it, and the owner is root or the caller."""
    return not st.st_mode & (stat.S_IWGRP | stat.S_IWOTH) and st.st_uid in (0, os.geteuid())


def _jinja2_stamp() -> str:
    """Which Jinja2 installation the code came from (its lexer trims the text), found as
    ``import jinja2`` would find it but without importing it."""
    for entry in sys.path:
        try:
            st = os.stat(os.path.join(entry or ".", "jinja2", "__init__.py"))
        except OSError:
            continue
        return f"{entry}:{st.st_size}:{st.st_mtime_ns}"
    return "-"


def cache_key(tag: str) -> str:
    return f"{VERSION}|{tag}|{_jinja2_stamp()}"


Loaded = tuple[dict, dict]   # ({template name: source text}, {template name: Template})


def unchanged(folder: str, sources: dict[str, str]) -> bool:
    """Every template file still has the text it was compiled from."""
    try:
        for name, text in sources.items():
            with open(os.path.join(folder, name), encoding="utf-8") as stream:
                if stream.read() != text:
                    return False
    except (OSError, UnicodeDecodeError):
        return False
    return True


def load(folder: str, tag: str, finalize: Callable, filters: dict) -> Loaded | None:
    """The compiled templates of ``folder`` and the sources they were made from, or None when
    the file is missing, not trusted, from another key, or any template changed since."""
    cache = os.path.join(folder, "__pycache__")
    try:
        if not _trusted(os.stat(cache)):
            return None
        with open(os.path.join(cache, FILE), "rb") as stream:
            if not _trusted(os.fstat(stream.fileno())):
                return None
            data = marshal.loads(stream.read())
    except (OSError, EOFError, ValueError, TypeError):
        return None
    try:
        if data["key"] != cache_key(tag) or not unchanged(folder, data["sources"]):
            return None
        return data["sources"], {name: Template(name, folder, code, finalize, filters)
                                 for name, code in data["code"].items()}
    except (KeyError, TypeError, ValueError, AttributeError):
        return None


def build(folder: str, compiled: dict[str, tuple[str, dict]], finalize: Callable,
          filters: dict) -> Loaded:
    """Templates from the compiler's output (name -> (Python source, sources used))."""
    return _sources(compiled), {
        name: Template(name, folder, _code(folder, name, source), finalize, filters)
        for name, (source, _) in compiled.items()}


def _sources(compiled: dict[str, tuple[str, dict]]) -> dict[str, str]:
    sources: dict[str, str] = {}
    for _, used in compiled.values():
        sources.update(used)
    return sources


@functools.lru_cache(maxsize=64)
def _code(folder: str, name: str, source: str):
    """The code object of a template's Python source (compiled once: the same source is both
    stored and run when a process compiles the templates itself)."""
    return compile(source, f"{os.path.join(folder, name)} (compiled)", "exec")


def store(folder: str, tag: str, compiled: dict[str, tuple[str, dict]]) -> bool:
    """Keep the compiled code for the next process (a temporary file renamed into place, so a
    reader sees the whole file or none); nothing is written where the caller may not write the
    folder or does not own it, as Python does for a ``.pyc``. True when written."""
    cache = os.path.join(folder, "__pycache__")
    data = marshal.dumps({"key": cache_key(tag), "sources": _sources(compiled),
                          "code": {name: _code(folder, name, source)
                                   for name, (source, _) in compiled.items()}})
    try:
        os.makedirs(cache, mode=0o755, exist_ok=True)
        if not _trusted(os.stat(cache)) or not os.access(cache, os.W_OK):
            return False
        temporary = os.path.join(cache, f".{FILE}.{os.getpid()}.tmp")
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
    except OSError:
        return False
    try:
        with os.fdopen(fd, "wb") as stream:
            stream.write(data)
        os.chmod(temporary, 0o644)  # every user of the package reads it
        os.replace(temporary, os.path.join(cache, FILE))
        return True
    except OSError:
        try:
            os.unlink(temporary)
        except OSError:
            pass
        return False
