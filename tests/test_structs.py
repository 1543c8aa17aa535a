"""``record`` (scratchkeeper/structs.py) behaves as ``dataclass`` for what the project uses."""

from __future__ import annotations

import copy
import dataclasses
import pickle
from dataclasses import dataclass, field

import pytest

from scratchkeeper.structs import record


@record(frozen=True)
class Module:
    """A record pickle can find by name."""
    a: int
    b: tuple = ()


def pair(frozen: bool):
    """The same class made by ``dataclass`` and by ``record``."""
    made = []
    for decorate in (dataclass(frozen=frozen), record(frozen=frozen)):
        class Thing:
            a: int
            b: str = "b"
            c: list = field(default_factory=list)
            d: float = field(default=1.5, repr=False)
            e: int = field(default=0, compare=False)

            @property
            def twice(self) -> int:
                return self.a * 2
        made.append(decorate(Thing))
    return made


def outcome(call):
    try:
        return ("ok", call())
    except Exception as err:  # the kind of failure, compared between the two
        return (type(err).__name__, str(err).split("(")[-1])


@pytest.mark.parametrize("frozen", [False, True])
def test_construction_repr_equality_and_hash_match_dataclass(frozen):
    reference, ours = pair(frozen)
    for args, kwargs in [((1,), {}), ((1, "x", [2], 2.5, 9), {}), ((), {"a": 3, "c": [1]}),
                         ((1,), {"e": 4}), ((), {}), ((1,), {"a": 2}), ((1,), {"z": 1}),
                         ((1, "x", [], 1.0, 0, 7), {})]:
        expected = outcome(lambda: reference(*args, **kwargs))
        got = outcome(lambda: ours(*args, **kwargs))
        assert expected[0] == got[0], (args, kwargs, expected, got)
        if expected[0] != "ok":
            continue
        want, have = expected[1], got[1]
        assert repr(have) == repr(want).replace(reference.__qualname__, ours.__qualname__)
        assert [getattr(have, f.name) for f in dataclasses.fields(have)] == \
            [getattr(want, f.name) for f in dataclasses.fields(want)]
        assert have == ours(*args, **kwargs) and have != want   # other class: not equal
        assert (have == ours(7)) == (want == reference(7))
        assert ours(1, e=5) == ours(1, e=6)       # compare=False is left out, as dataclass does
        if frozen:
            assert hash(ours(1, "x", ())) == hash(ours(1, "x", ()))
            assert hash(ours(1, "x", ())) == hash(reference(1, "x", ()))  # the same tuple hashed
        else:
            with pytest.raises(TypeError):
                hash(have)
        assert have.twice == 2 * have.a


def test_frozen_refuses_assignment_as_dataclass_does():
    reference, ours = pair(True)
    for cls in (reference, ours):
        thing = cls(1)
        with pytest.raises(dataclasses.FrozenInstanceError):
            thing.a = 2
        with pytest.raises(dataclasses.FrozenInstanceError):
            thing.new = 2
        with pytest.raises(dataclasses.FrozenInstanceError):
            del thing.a
    assert ours.__dataclass_params__.frozen and not pair(False)[1].__dataclass_params__.frozen


def test_the_dataclasses_functions_work_on_a_record():
    _, ours = pair(True)
    thing = ours(1, "x", [1, 2])
    assert dataclasses.is_dataclass(thing)
    assert [f.name for f in dataclasses.fields(ours)] == ["a", "b", "c", "d", "e"]
    assert dataclasses.replace(thing, b="y") == ours(1, "y", [1, 2])
    assert dataclasses.asdict(thing) == {"a": 1, "b": "x", "c": [1, 2], "d": 1.5, "e": 0}
    assert pickle.loads(pickle.dumps(Module(1, (2,)))) == Module(1, (2,))
    assert copy.deepcopy(thing) == thing and copy.copy(thing) == thing
    assert ours(1).c is not ours(1).c   # a fresh default from the factory each time


def test_post_init_runs_and_written_methods_are_refused():
    @record
    class Checked:
        n: int

        def __post_init__(self):
            if self.n < 0:
                raise ValueError("negative")
    assert Checked(1).n == 1
    with pytest.raises(ValueError):
        Checked(-1)
    with pytest.raises(TypeError, match="record writes __eq__"):
        @record
        class Own:
            n: int

            def __eq__(self, other):
                return True
