"""Files made, written, read and removed by several processes at once, as fast as they can: the
mount's table of inodes under the kernel's forgets (a FORGET may arrive the moment an answer
left: found by AddressSanitizer, a getxattr's reply sent before it gave its inode back, which
the forget of the removed file had freed; the heap corrupted, the mount died minutes later).

What can be seen from outside without a sanitizer is checked: the server alive and answering,
no descriptor left open by it, no object left on the OSTs, and each file read back as written.
"""

from __future__ import annotations

import os
import subprocess
import sys

from waiting import wait_released

# one process of churn: make, write (the kernel asks security.capability on the first write),
# read back, ask an attribute, remove; its own names (argv: folder, rounds)
CHURN = """
import errno, os, sys
folder, rounds = sys.argv[1], int(sys.argv[2])
for i in range(rounds):
    path = os.path.join(folder, f"c{i % 16}")
    data = os.urandom(1 + i % 3000)
    with open(path, "wb") as f:
        f.write(data)
    with open(path, "rb") as f:
        assert f.read() == data, path
    try:
        os.getxattr(path, "user.churn")
    except OSError as err:
        assert err.errno == errno.ENODATA, err
    os.unlink(path)
"""

PROCESSES = 4
ROUNDS = 600


def test_concurrent_churn_of_small_files_leaves_the_mount_whole(make_mount):
    mnt = make_mount(threads=8)
    server = mnt.process.pid
    (mnt.root / "warm").write_bytes(b"w")
    base = len(os.listdir(f"/proc/{server}/fd"))
    folders = []
    for n in range(PROCESSES):
        folder = mnt.root / f"p{n}"
        folder.mkdir()
        folders.append(folder)
    workers = [subprocess.Popen([sys.executable, "-c", CHURN, str(folder), str(ROUNDS)],
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
               for folder in folders]
    failures = []
    for worker in workers:
        out, _ = worker.communicate(timeout=300)
        if worker.returncode != 0:
            failures.append(out[-2000:])
    assert mnt.process.poll() is None, mnt.describe()
    assert not failures, failures[0]
    assert mnt.answers()
    wait_released(mnt.root)
    assert len(os.listdir(f"/proc/{server}/fd")) <= base + PROCESSES + 2
    objects = [p for i in range(4) for p in mnt.ost(i).iterdir()]
    assert len(objects) == 2  # the objects of "warm" only
