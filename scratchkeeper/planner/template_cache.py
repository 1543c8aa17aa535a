"""Compiled job templates kept on disk, as Python keeps a module's bytecode in ``__pycache__``.

Compiling the templates costs a short command like ``scratchkeeper plan`` more than rendering
them, so the Jinja2 bytecode of each template is kept in the ``__pycache__`` folder of the
built-in templates: the folder the package's own ``.pyc`` files would be in, written by whoever
may write the package (root for an installed runtime, the developer in a checkout) and only read
by everyone else. A folder that others than its owner may write is neither read nor written
(what it holds would run as the caller's code).

A cached template is used only when its source is unchanged (Jinja2 checks a SHA-1 of it), for
the same Python and Jinja2 versions and the same environment options (``tag``, a digest of them,
is part of each file's name); anything else is compiled again and the file replaced.
"""

from __future__ import annotations

import logging
import os
import pickle
import stat
import tempfile

import jinja2
from jinja2.bccache import Bucket

log = logging.getLogger(__name__)

SUFFIX = ".jinja2c"


class TemplateBytecodeCache(jinja2.BytecodeCache):
    """Jinja2 bytecode of each template in ``folder``, one file per template and ``tag``."""

    def __init__(self, folder: str, tag: str):
        self.folder = folder
        self.tag = tag

    def _path(self, bucket: Bucket) -> str:
        return os.path.join(self.folder, f"{bucket.key}.{self.tag}{SUFFIX}")

    def _trusted(self, st: os.stat_result) -> bool:
        """Only the folder's owner may write it, and the owner is root or the caller."""
        return not st.st_mode & (stat.S_IWGRP | stat.S_IWOTH) and st.st_uid in (0, os.geteuid())

    def load_bytecode(self, bucket: Bucket) -> None:
        try:
            if not self._trusted(os.stat(self.folder)):
                return
            with open(self._path(bucket), "rb") as stream:
                if not self._trusted(os.fstat(stream.fileno())):
                    return
                bucket.load_bytecode(stream)
        except FileNotFoundError:
            pass
        except (OSError, EOFError, ValueError, TypeError, pickle.UnpicklingError) as err:
            # a truncated or foreign file: compiled again, and replaced when the folder allows
            log.debug("template cache %s: not used: %s", self._path(bucket), err)
            bucket.reset()

    def dump_bytecode(self, bucket: Bucket) -> None:
        """Write the file under a temporary name and rename it, so a reader sees the whole file
        or none; where the caller may not write the folder, nothing is kept (as Python does
        for a ``.pyc``)."""
        try:
            os.makedirs(self.folder, mode=0o755, exist_ok=True)
            if not self._trusted(os.stat(self.folder)) or not os.access(self.folder, os.W_OK):
                return
            fd, temporary = tempfile.mkstemp(dir=self.folder, prefix=".", suffix=".tmp")
        except OSError as err:
            log.debug("template cache %s: not written: %s", self.folder, err)
            return
        try:
            with os.fdopen(fd, "wb") as stream:
                bucket.write_bytecode(stream)
            os.chmod(temporary, 0o644)  # every user of the package reads it
            os.replace(temporary, self._path(bucket))
        except OSError as err:
            log.debug("template cache %s: not written: %s", self._path(bucket), err)
            try:
                os.unlink(temporary)
            except OSError:
                pass

    def clear(self) -> None:
        for name in os.listdir(self.folder):
            if name.endswith(SUFFIX):
                os.unlink(os.path.join(self.folder, name))

