"""Fixtures for the storage tests: a local striped store, and a Lustre backend on a fake ``lfs``.

Lustre cannot run on this machine, so :class:`FakeLustre` is the one stand-in the storage tests
use: a command runner that answers the ``lfs``/``lctl`` command lines the backend builds, in the
documented output formats (the same ones as the captured samples in ``tests/data/lfs/``), over
a plain directory that plays the mount. File data is real; layouts live in the fake.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from scratchkeeper.errors import CommandError, CommandTimeout
from scratchkeeper.runner import CommandResult, CommandRunner, set_runner
from scratchkeeper.storage.local import LocalStripedStore
from scratchkeeper.storage.lustre import LustreBackend

DATA = Path(__file__).resolve().parent.parent / "data" / "lfs"
FSNAME = "testfs"


class FakeLustre(CommandRunner):
    """Answers ``lfs`` and ``lctl`` like a Lustre client of ``ost_count`` OSTs would."""

    def __init__(self, mount: Path, ost_count: int = 8):
        super().__init__()
        self.mount = mount
        self.ost_count = ost_count
        self.layouts: dict[str, dict] = {}
        self.failed: set[int] = set()
        self.hung: set[int] = set()
        self.next_oid = 0x100
        self.layout_gen: dict[str, int] = {}
        self.calls: list[tuple[str, ...]] = []  # every argv the backend handed over
        self.advised: list[tuple[str, int, int, str]] = []  # (advice, start, end, file)

    # -- the runner interface ------------------------------------------------------------------
    def run(self, argv, *, timeout=None, check=True, input=None, env=None, cwd=None,
            mutating=True, text=True):
        argv = tuple(str(a) for a in argv)
        self.calls.append(argv)
        started = time.monotonic()
        try:
            rc, out, err = self._dispatch(list(argv), timeout)
        except _Hang:
            time.sleep(timeout)
            raise CommandTimeout(f"{argv[0]}: timed out after {timeout:g}s",
                                 argv=list(argv)) from None
        result = self._keep(CommandResult(argv, rc, out, err, time.monotonic() - started))
        if check and rc != 0:
            raise CommandError(f"{argv[0]} failed (exit {rc}): {err.strip()}", argv=list(argv),
                               returncode=rc, stdout=out, stderr=err)
        return result

    def _dispatch(self, argv, timeout):
        tool, command, args = argv[0], argv[1], argv[2:]
        if tool.endswith("lctl") and command == "set_param":
            index = int(args[0].split("-OST", 1)[1][:4], 16)
            if index in self.hung:
                raise _Hang()
            if index in self.failed or index >= self.ost_count:
                return 1, "", f"error: set_param: setting {args[0]}: Input/output error\n"
            return 0, "", ""
        handler = getattr(self, "_" + command.replace("-", "_"), None)
        if handler is None:
            return 1, "", f"lfs: unknown command {command}\n"
        return handler(args)

    # -- lfs commands --------------------------------------------------------------------------
    def _stripe_options(self, args):
        count, size, osts, pool, rest = 1, 1 << 20, None, None, []
        i = 0
        while i < len(args):
            if args[i] == "-c":
                count = int(args[i + 1])
                i += 2
            elif args[i] == "-S":
                size = int(args[i + 1])
                i += 2
            elif args[i] == "-o":
                osts = [int(x) for x in args[i + 1].split(",")]
                i += 2
            elif args[i] == "-p":
                pool = args[i + 1]
                i += 2
            else:
                rest.append(args[i])
                i += 1
        return count, size, osts, pool, rest

    def _allocate(self, count, osts, exclude=()):
        if osts is None:
            candidates = [i for i in range(self.ost_count)
                          if i not in self.failed and i not in exclude]
            count = len(candidates) if count == -1 else min(count, len(candidates))
            osts = candidates[:count]
        objects = []
        for index in osts:
            self.next_oid += 1
            objects.append((index, f"0x1{index:04x}0000:{self.next_oid:#x}:0x0"))
        return objects

    def _setstripe(self, args):
        count, size, osts, pool, rest = self._stripe_options(args)
        path = rest[-1]
        if os.path.exists(path):
            return 17, "", f"lfs setstripe: cannot create '{path}': File exists\n"
        if osts and any(i in self.failed or i >= self.ost_count for i in osts):
            return 5, "", f"lfs setstripe: cannot create '{path}': Input/output error\n"
        Path(path).touch()
        self.layouts[path] = {"composite": False, "mirrors": [
            {"id": 1, "size": size, "pool": pool, "objects": self._allocate(count, osts)}]}
        self.layout_gen[path] = 0
        return 0, "", ""

    def _ladvise(self, args):
        """``lfs ladvise -a ADVICE -s START -e END FILE`` (silent on success, as documented)."""
        if len(args) != 7 or args[0] != "-a" or args[2] != "-s" or args[4] != "-e":
            return 22, "", "lfs ladvise: invalid arguments\n"
        if args[1] not in ("willread", "dontneed"):
            return 22, "", f"lfs ladvise: invalid advice type '{args[1]}'\n"
        if int(args[3]) >= int(args[5]):
            return 22, "", "lfs ladvise: invalid range: start must be below end\n"
        path = args[6]
        if path not in self.layouts:
            return 2, "", f"lfs ladvise: cannot open '{path}': No such file or directory\n"
        self.advised.append((args[1], int(args[3]), int(args[5]), path))
        return 0, "", ""

    def _getstripe(self, args):
        path = args[-1]
        if path not in self.layouts:
            return 2, "", f"lfs getstripe: cannot open '{path}': No such file or directory (2)\n"
        mirrors = self.layouts[path]["mirrors"]
        gen = self.layout_gen[path]
        if not self.layouts[path]["composite"]:
            return 0, _plain_yaml(mirrors[0], gen), ""
        return 0, _composite_yaml(mirrors, gen), ""

    def _df(self, args):
        lines = ["UUID                   1K-blocks        Used   Available Use% Mounted on",
                 f"{FSNAME}-MDT0000_UUID      9174328     1020024     8154304  11% "
                 f"{self.mount}[MDT:0]"]
        for index in range(self.ost_count):
            if index in self.failed:
                lines.append(f"OST{index:04x}             : inactive device")
                continue
            used = sum(1 for layout in self.layouts.values() for m in layout["mirrors"]
                       for o in m["objects"] if o[0] == index) * 1024
            lines.append(f"{FSNAME}-OST{index:04x}_UUID     94181368 {used:11d} "
                         f"{94181368 - used:11d}   1% {self.mount}[OST:{index}]")
        return 0, "\n".join(lines) + "\n\nfilesystem_summary:  0 0 0 0% " + str(self.mount) + "\n", ""

    def _find(self, args):
        index = int(args[args.index("--ost") + 1])
        hits = [p for p, layout in self.layouts.items() if os.path.exists(p)
                and any(o[0] == index for m in layout["mirrors"] for o in m["objects"])]
        return 0, "".join(p + "\0" for p in sorted(hits)), ""

    def _mirror(self, args):
        action, rest = args[0], args[1:]
        path = rest[-1]
        layout = self.layouts[path]
        if action == "extend":
            flags = "init,prefer" if "--flags=prefer" in rest else "init"
            count, size, osts, pool, _ = self._stripe_options(
                [a for a in rest[:-1] if a not in ("-N", "--flags=prefer")])
            used = {o[0] for m in layout["mirrors"] for o in m["objects"]}
            if osts and used & set(osts):
                return 22, "", "lfs mirror extend: OSTs overlap\n"
            # a plain file becomes a composite (FLR) one and stays so
            layout["composite"] = True
            layout["mirrors"].append({"id": max(m["id"] for m in layout["mirrors"]) + 1,
                                      "size": size, "pool": pool, "flags": flags,
                                      "objects": self._allocate(count, osts, exclude=used)})
        elif action == "split":
            mirror_id = int(rest[rest.index("--mirror-id") + 1])
            layout["mirrors"] = [m for m in layout["mirrors"] if m["id"] != mirror_id]
        elif action == "verify":
            return 0, "", ""
        self.layout_gen[path] += 1
        return 0, "", ""

    def _swap_layouts(self, args):
        first, second = args
        self.layouts[first], self.layouts[second] = self.layouts[second], self.layouts[first]
        self.layout_gen[first] += 1
        self.layout_gen[second] += 1
        # swapping layouts swaps the objects, hence the data; the inodes (owner, xattrs) stay
        data_first, data_second = Path(first).read_bytes(), Path(second).read_bytes()
        Path(first).write_bytes(data_second)
        Path(second).write_bytes(data_first)
        return 0, "", ""


class _Hang(Exception):
    pass


def _plain_yaml(mirror: dict, gen: int) -> str:
    lines = [f"lmm_stripe_count:  {len(mirror['objects'])}",
             f"lmm_stripe_size:   {mirror['size']}", "lmm_pattern:       raid0",
             f"lmm_layout_gen:    {gen}", f"lmm_stripe_offset: {mirror['objects'][0][0]}"]
    if mirror["pool"]:
        lines.append(f"lmm_pool:          {mirror['pool']}")
    lines.append("lmm_objects:")
    for index, fid in mirror["objects"]:
        lines += [f"      - l_ost_idx: {index}", f"        l_fid:     {fid}"]
    return "\n".join(lines) + "\n\n"


def _composite_yaml(mirrors: list[dict], gen: int) -> str:
    lines = [f"  lcm_layout_gen:    {gen}", f"  lcm_mirror_count:  {len(mirrors)}",
             f"  lcm_entry_count:   {len(mirrors)}"]
    for number, mirror in enumerate(mirrors):
        mirror_id = mirror["id"]
        lines += [f"  component{number}:", f"    lcme_id:             {mirror_id << 16 | 1}",
                  f"    lcme_mirror_id:      {mirror_id}",
                  f"    lcme_flags:          {mirror.get('flags', 'init')}",
                  "    lcme_extent.e_start: 0", "    lcme_extent.e_end:   EOF",
                  "    sub_layout:", f"      lmm_stripe_count:  {len(mirror['objects'])}",
                  f"      lmm_stripe_size:   {mirror['size']}", "      lmm_pattern:       raid0",
                  "      lmm_layout_gen:    0",
                  f"      lmm_stripe_offset: {mirror['objects'][0][0]}"]
        if mirror["pool"]:
            lines.append(f"      lmm_pool:          {mirror['pool']}")
        lines.append("      lmm_objects:")
        for position, (index, fid) in enumerate(mirror["objects"]):
            lines.append(f"      - {position}: {{ l_ost_idx: {index}, l_fid: [{fid}] }}")
        lines.append("")
    return "\n".join(lines) + "\n"


@pytest.fixture
def local_store(tmp_path) -> LocalStripedStore:
    (tmp_path / "scratch").mkdir()
    return LocalStripedStore(str(tmp_path / "scratch"), str(tmp_path / "store"), ost_count=8,
                             default_stripe_count=4, default_stripe_size=65536,
                             pools={"flash": (4, 5, 6, 7)})


@pytest.fixture
def fake_lustre(tmp_path):
    mount = tmp_path / "lustre"
    mount.mkdir()
    fake = FakeLustre(mount)
    previous = set_runner(fake)
    try:
        yield fake
    finally:
        set_runner(previous)


@pytest.fixture
def lustre_backend(tmp_path, fake_lustre) -> LustreBackend:
    return LustreBackend(str(fake_lustre.mount), state_database=str(tmp_path / "state.db"),
                         default_stripe_count=4, default_stripe_size=65536, command_timeout=5)


@pytest.fixture(params=["local", "lustre"])
def backend(request):
    """Each contract test runs once per backend."""
    return request.getfixturevalue(f"{request.param}_store" if request.param == "local"
                                   else "lustre_backend")


@pytest.fixture
def take_down(request):
    """A function failing one OST in whichever backend the test got."""
    def fail(backend, ost_index: int) -> None:
        if isinstance(backend, LocalStripedStore):
            backend.fail_ost(ost_index)
        else:
            request.getfixturevalue("fake_lustre").failed.add(ost_index)
    return fail
