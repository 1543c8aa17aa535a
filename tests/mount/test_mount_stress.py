"""The scratch mount under churn: readers killed in the middle of a read (the kernel's INTERRUPT)
or of a wait on a lost stripe, writers changing files, OSTs failing and coming back, recoveryd
patching what it can, all at once for ``SK_MOUNT_STRESS_SECONDS`` (20 s).

What must hold: no reader or writer stuck (a deadlock a run like this found: a read waiting on recoveryd
held its page locked while recoveryd looked the file up through the mount, which waited on that
page), the mount's server alive, and once the faults stop, the staged files no writer touched
read back whole and right.

For a memory check, build the extension with ``-fsanitize=address`` and run this test with
``LD_PRELOAD=$(gcc -print-file-name=libasan.so) ASAN_OPTIONS=detect_leaks=0:verify_asan_link_order=0``.
"""

from __future__ import annotations

import hashlib
import os
import random
import signal
import subprocess
import threading
import time

from test_mount_recovery import file_source, recoveryd, stage

from scratchkeeper.config import load_config
from scratchkeeper.storage import open_backend

MiB = 1 << 20
SECONDS = float(os.environ.get("SK_MOUNT_STRESS_SECONDS", "20"))
STUCK = 90  # seconds: longer than any reader may take (a few waits of recovery_timeout)


def test_readers_killed_writers_and_osts_failing_at_once(make_mount):
    mnt = make_mount(ost_count=8, stripe_count=2, stripe_size=MiB, recovery_timeout=3.0,
                     threads=8, mount_extra="read_log_interval = 0.5")
    backend = open_backend(load_config(mnt.config))
    written = [f"w{k}.bin" for k in range(6)]
    for k, name in enumerate(written):
        (mnt.root / name).write_bytes(os.urandom((k + 1) * 512 * 1024))
    staged: dict[str, str] = {}
    for k in range(6):
        name = f"s{k}.bin"
        data = os.urandom((k + 1) * 700 * 1024)
        stripes = dict(stripe_count=1) if k % 2 else dict(stripe_count=4, stripe_size=MiB)
        stage(mnt, name, data, file_source(mnt, name, data), **stripes)
        staged[name] = hashlib.sha256(data).hexdigest()
    mnt.add_mirror(written[0])
    names = written + list(staged)
    stop = time.monotonic() + SECONDS
    stuck: list[str] = []

    def reader(seed: int) -> None:
        rng = random.Random(seed)
        while time.monotonic() < stop:
            path = mnt.root / rng.choice(names)
            argv = rng.choice([["cat", str(path)], ["sha256sum", str(path)],
                               ["dd", f"if={path}", "of=/dev/null", "bs=64k", "iflag=direct"]])
            process = subprocess.Popen(argv, stdout=subprocess.DEVNULL,
                                       stderr=subprocess.DEVNULL)
            time.sleep(rng.random() * 0.3)
            if rng.random() < 0.5:
                process.send_signal(rng.choice([signal.SIGKILL, signal.SIGINT, signal.SIGTERM]))
            try:
                process.wait(timeout=STUCK)
            except subprocess.TimeoutExpired:
                stuck.append(" ".join(argv))
                process.kill()
                return

    def writer(seed: int) -> None:
        rng = random.Random(seed)
        while time.monotonic() < stop:
            path = mnt.root / rng.choice(written)
            try:
                choice = rng.random()
                if choice < 0.3:
                    with open(path, "r+b") as out:
                        out.seek(rng.randrange(0, 4 * MiB))
                        out.write(os.urandom(rng.randrange(1, 300_000)))
                elif choice < 0.5:
                    os.truncate(path, rng.randrange(0, 4 * MiB))
                elif choice < 0.7:
                    new = path.with_suffix(".new")
                    new.write_bytes(os.urandom(rng.randrange(0, 3 * MiB)))
                    os.rename(new, path)
                else:
                    with open(path, "ab") as out:
                        out.write(os.urandom(rng.randrange(1, 100_000)))
            except OSError:
                pass  # EIO while an OST is down: all or nothing, other tests check which
            time.sleep(rng.random() * 0.2)

    def faults(seed: int) -> None:
        rng = random.Random(seed)
        while time.monotonic() < stop:
            ost = rng.randrange(8)
            backend.fail_ost(ost)
            time.sleep(rng.random() * 2)
            backend.restore_ost(ost)
            time.sleep(rng.random())

    with recoveryd(mnt):
        threads = [threading.Thread(target=reader, args=(k,), daemon=True) for k in range(4)]
        threads += [threading.Thread(target=writer, args=(10 + k,), daemon=True)
                    for k in range(2)]
        threads += [threading.Thread(target=faults, args=(20,), daemon=True)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=SECONDS + STUCK + 30)
        assert not [thread for thread in threads if thread.is_alive()], \
            f"stuck in the mount:\n{mnt.describe()}"
    assert not stuck, stuck
    assert mnt.process.poll() is None, mnt.describe()
    for index in range(8):  # every OST back (the fault thread restores each it failed)
        assert mnt.ost(index).is_dir()
    for name, digest in staged.items():
        got = subprocess.run(["sha256sum", str(mnt.root / name)], capture_output=True,
                             timeout=60, check=True).stdout.split()[0].decode()
        assert got == digest, name
