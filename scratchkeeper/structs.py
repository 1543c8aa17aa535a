"""``record``: a dataclass whose methods are shared functions instead of generated code.

``dataclasses.dataclass`` writes and compiles the source of ``__init__``, ``__repr__``,
``__eq__``, ``__hash__`` and, when frozen, ``__setattr__``/``__delattr__`` for every class: about
half a millisecond a class, and a short command (``scratchkeeper plan``) imports some forty of
them before it does anything. ``record`` lets ``dataclasses`` do the field bookkeeping only (so
``dataclasses.fields``, ``replace``, ``asdict`` and ``is_dataclass`` work as before) and gives the
class generic methods with the behaviour of the generated ones: positional and keyword
arguments, defaults and default factories, ``__post_init__``, ``field(repr=False)``,
``field(compare=False)``, equality with the same class only, the hash of a frozen class, and
``FrozenInstanceError`` on assignment. tests/test_structs.py holds it to ``dataclass``.
Classes needing ``order``, ``slots``, ``kw_only`` or ``InitVar`` use ``dataclass`` itself.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import MISSING, FrozenInstanceError
from typing import Any, TypeVar, dataclass_transform, overload

T = TypeVar("T")

_REQUIRED, _DEFAULT, _FACTORY = "required", "default", "factory"


# Type checkers read a record as the dataclass it behaves as (PEP 681).
@overload
def record(cls: type[T], /, *, frozen: bool = False) -> type[T]: ...
@overload
def record(cls: None = None, /, *, frozen: bool = False) -> Callable[[type[T]], type[T]]: ...


@dataclass_transform(field_specifiers=(dataclasses.field, dataclasses.Field))
def record(cls: type[T] | None = None, /, *,
           frozen: bool = False) -> Callable[[type[T]], type[T]] | type[T]:
    """``@record`` or ``@record(frozen=True)``, as ``@dataclass`` / ``@dataclass(frozen=True)``."""
    def wrap(cls: type[T]) -> type[T]:
        processed: type[T] = _process(cls, frozen)
        return processed
    return wrap if cls is None else wrap(cls)


def _process(cls: Any, frozen: bool) -> Any:
    if cls.__doc__ is None:    # dataclass would work one out with inspect.signature
        cls.__doc__ = cls.__name__
    for name in ("__init__", "__repr__", "__eq__"):
        if name in cls.__dict__:
            raise TypeError(f"{cls.__name__}: record writes {name}; use dataclass")
    cls = dataclasses.dataclass(init=False, repr=False, eq=False)(cls)
    fields = list(dataclasses.fields(cls))
    if any(f.kw_only or not f.init for f in fields):
        raise TypeError(f"{cls.__name__}: record has no kw_only or init=False fields; use dataclass")
    if "__slots__" in cls.__dict__:
        raise TypeError(f"{cls.__name__}: record sets attributes through __dict__; use dataclass")
    cls.__record_spec__ = tuple(
        (f.name, _DEFAULT, f.default) if f.default is not MISSING else
        (f.name, _FACTORY, f.default_factory) if f.default_factory is not MISSING else
        (f.name, _REQUIRED, None) for f in fields)
    cls.__record_post_init__ = hasattr(cls, "__post_init__")
    cls.__record_repr__ = tuple(f.name for f in fields if f.repr)
    cls.__record_compare__ = tuple(f.name for f in fields if f.compare)
    cls.__record_hash__ = tuple(f.name for f in fields
                                if (f.compare if f.hash is None else f.hash))
    cls.__init__ = _init
    cls.__repr__ = _repr
    cls.__eq__ = _eq
    if frozen:
        cls.__setattr__ = _frozen_setattr
        cls.__delattr__ = _frozen_delattr
        if "__hash__" not in cls.__dict__ or cls.__dict__["__hash__"] is None:
            cls.__hash__ = _hash
    elif "__hash__" not in cls.__dict__:
        cls.__hash__ = None      # as dataclass: equal by value, so not hashable
    # what dataclasses reports about the class (a dataclass inheriting from it checks frozen)
    cls.__dataclass_params__ = _params(frozen)
    return cls


_PARAMS: dict[bool, object] = {}


def _params(frozen: bool) -> object:
    """``__dataclass_params__`` of ``@dataclass(frozen=frozen)``, taken from a probe class."""
    if frozen not in _PARAMS:
        probe: Any = dataclasses.dataclass(frozen=frozen)(type("_RecordParams", (), {}))
        _PARAMS[frozen] = probe.__dataclass_params__
    return _PARAMS[frozen]


def _init(self: Any, *args: Any, **kwargs: Any) -> None:
    cls = type(self)
    spec = cls.__record_spec__
    values = self.__dict__
    if args:
        if len(args) > len(spec):
            raise TypeError(f"{cls.__qualname__}.__init__() takes {len(spec) + 1} positional "
                            f"arguments but {len(args) + 1} were given")
        for (name, _, _), value in zip(spec, args):
            values[name] = value
        rest = spec[len(args):]
    else:
        rest = spec
    used = 0
    for name, kind, default in rest:
        if name in kwargs:
            values[name] = kwargs[name]
            used += 1
        elif kind is _DEFAULT:
            values[name] = default
        elif kind is _FACTORY:
            values[name] = default()
        else:
            raise TypeError(f"{cls.__qualname__}.__init__() missing 1 required positional "
                            f"argument: '{name}'")
    if used != len(kwargs):
        names = [name for name, _, _ in spec]
        for name in kwargs:
            if name not in names:
                problem = "an unexpected keyword argument"
                break
        else:
            problem = "multiple values for argument"
            name = next(n for n in kwargs if n in names[:len(args)])
        raise TypeError(f"{cls.__qualname__}.__init__() got {problem} '{name}'")
    if cls.__record_post_init__:
        self.__post_init__()


def _repr(self: Any) -> str:
    inner = ", ".join(f"{name}={getattr(self, name)!r}" for name in type(self).__record_repr__)
    return f"{type(self).__qualname__}({inner})"


def _eq(self: Any, other: Any) -> Any:
    if other.__class__ is not self.__class__:
        return NotImplemented
    names = type(self).__record_compare__
    return tuple(getattr(self, n) for n in names) == tuple(getattr(other, n) for n in names)


def _hash(self: Any) -> int:
    return hash(tuple(getattr(self, n) for n in type(self).__record_hash__))


def _frozen_setattr(self: Any, name: str, value: Any) -> None:
    raise FrozenInstanceError(f"cannot assign to field {name!r}")


def _frozen_delattr(self: Any, name: str) -> None:
    raise FrozenInstanceError(f"cannot delete field {name!r}")
