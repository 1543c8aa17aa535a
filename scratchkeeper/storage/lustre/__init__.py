"""The Lustre backend: :class:`LustreBackend` (:mod:`.backend`) drives a real Lustre file system
through ``lfs`` and ``lctl``, whose command lines and output formats are built and parsed in
:mod:`.lfs` (functions only, no I/O: the chain service and replicad read the MDT changelog with
them too)."""

from .backend import LustreBackend

__all__ = ["LustreBackend"]
