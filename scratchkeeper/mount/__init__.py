"""The scratch mount (docs/mount.rst): ``storage.scratch_root`` served from the local store's MDT
tree and OST objects by a libfuse3 low-level file system in C.

* :mod:`.serve`: ``scratchkeeper mount``'s Python side, which checks the mount point, opens the
  store and runs the session (:func:`~.serve.serve`);
* ``_fuse``: the C extension built from ``native/`` (the session loop and every request
  handler; ``native/skfs.c`` is its entry point).

Only the CLI imports this package.
"""
