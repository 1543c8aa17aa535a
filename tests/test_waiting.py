"""tests/waiting.py: a wait returns the condition's value, or fails saying what it waited for."""

from __future__ import annotations

import itertools

import pytest

from waiting import wait_for


def test_a_wait_returns_the_first_true_value_of_its_condition():
    calls = itertools.count()
    assert wait_for(lambda: max(0, next(calls) - 2), "the third call", interval=0) == 1


def test_a_wait_past_its_deadline_fails_naming_what_it_waited_for():
    with pytest.raises(AssertionError, match="for the impossible"):
        wait_for(lambda: False, "the impossible", timeout=0.05, interval=0.01)
