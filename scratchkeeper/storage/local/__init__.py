"""The embedded striped store: OSTs are directories under ``store_root``, the namespace is an
MDT directory tree beside them (docs/storage.rst, docs/mount.rst).

``store_root/ost0000 ... ostNNNN`` each hold the objects of one OST, one file per object, filled
exactly as Lustre's RAID-0 fills its objects (see :mod:`scratchkeeper.storage.layout`).
``store_root/mdt`` is the namespace: a store file is a sparse MDT inode with the file's size,
owner, mode, times and extended attributes, and its layout in ``security.scratchkeeper.lov``.
``store_root/namespace.db`` holds the OSTs' states, object intents and in-flight rebuilds.

Crash safety without a lock server: every object is created under an *intent* written before
it exists; a new file's inode is prepared whole in ``mdt.staging`` and linked into the MDT only
after its objects are synced and its intents marked committing; objects a commit drops are
doomed after it. Whoever opens the store next collects what a dead process left, so a kill -9
at any line leaves no half file and loses no committed one.

Several users: as on Lustre, users never reach an OST object. The MDT and OST directories are
the store owner's (0700), every object is 0600 with its file's owner; a process of another user
(a user's job, the store being root's) reads through the scratch mount, whose every lookup and
open the kernel checks against the MDT inode's mode and ACL, and every change it asks is
refused.

The modules, each one side of :class:`LocalStripedStore`:

* :mod:`.store`: the file system itself (``LocalStripedStore``), on top of
* :mod:`.mdt`: walking the MDT, preparing and linking inodes;
* :mod:`.namespace`: ``namespace.db``, intents, migrations, garbage collection;
* :mod:`.objects`: OST directories and object files, the ``O_DIRECT`` patch writer;
* :mod:`.placement`: a new file's and a new mirror's OSTs (SUORA or least loaded),
  ``store placement``, ``store rebalance``;
* :mod:`.mirrors`: adding and removing a mirror;
* :mod:`.rebuild`: rebuilding lost stripes on substitute OSTs;
* :mod:`.users`: reading the store as another user, through the scratch mount;
* :mod:`.processes`: the names store processes claim intents and staging entries by.
"""

from .namespace import GarbageReport
from .store import LocalStripedStore

__all__ = ["GarbageReport", "LocalStripedStore"]
