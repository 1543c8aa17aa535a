"""Recovery never writes outside the scratch root and never follows a symlink out of it."""

from __future__ import annotations

import os

from ..errors import InputError


def check_inside_scratch(full: str, scratch_root: str) -> None:
    """Refuse ``full`` if, with every symbolic link on the way resolved, it leaves the root.

    The path itself need not exist (the local store's files live in its namespace); the
    directories it names are checked as far as they exist.
    """
    root = os.path.realpath(scratch_root)
    real = os.path.realpath(full)
    if real != root and not real.startswith(root.rstrip("/") + "/"):
        raise InputError(f"{full}: leads outside the scratch root {root} (through a symbolic "
                         "link); refusing to touch it")
    if os.path.islink(full):
        raise InputError(f"{full}: is a symbolic link; refusing to follow it")

