"""Build ``lfs``/``lctl`` command lines and parse their documented output formats.

Only functions here, no I/O: :class:`~scratchkeeper.storage.lustre.LustreBackend` runs the
argv through the runner and hands the output to the parsers. Sources of each format are listed
in ``docs/storage.rst``; the parsers are tested on captured samples in ``tests/data/lfs/``.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass

from ...errors import StorageError
from ..base import OST_ACTIVE, OST_INACTIVE, OST_UNREACHABLE, OstStatus
from ..layout import FileLayout, LayoutComponent, LayoutRequest, StripeObject

# -- argv builders ---------------------------------------------------------------------------


def getstripe_argv(lfs: str, path: str) -> list[str]:
    return [lfs, "getstripe", "--yaml", path]


def setstripe_argv(lfs: str, path: str, request: LayoutRequest, *,
                   default_count: int, default_size: int) -> list[str]:
    """``lfs setstripe -c N -S SIZE [-o LIST] [-p POOL] PATH`` (creates an empty file)."""
    argv = [lfs, "setstripe"]
    argv += _stripe_options(request, default_count=default_count, default_size=default_size)
    return argv + [path]


def _stripe_options(request: LayoutRequest, *, default_count: int, default_size: int) -> list[str]:
    options = []
    if request.ost_list is not None:
        options += ["-c", str(len(request.ost_list))]
    else:
        count = request.stripe_count if request.stripe_count is not None else default_count
        options += ["-c", str(count)]
    options += ["-S", str(request.stripe_size or default_size)]
    if request.ost_list is not None:
        options += ["-o", ",".join(str(i) for i in request.ost_list)]
    if request.pool is not None:
        options += ["-p", request.pool]
    return options


def mirror_extend_argv(lfs: str, path: str, request: LayoutRequest, *, default_count: int,
                       default_size: int) -> list[str]:
    """``lfs mirror extend -N [--flags=prefer] [stripe options] PATH``: add one mirror."""
    return [lfs, "mirror", "extend", "-N"] + (["--flags=prefer"] if request.prefer else []) + \
        _stripe_options(
        request, default_count=default_count, default_size=default_size) + [path]


def mirror_split_argv(lfs: str, path: str, mirror_id: int) -> list[str]:
    """``lfs mirror split --mirror-id ID -d PATH``: drop one mirror and destroy it."""
    return [lfs, "mirror", "split", "--mirror-id", str(mirror_id), "-d", path]


def mirror_verify_argv(lfs: str, path: str) -> list[str]:
    """``lfs mirror verify PATH``: exits non-zero when the mirrors differ."""
    return [lfs, "mirror", "verify", path]


def ladvise_dontneed_argv(lfs: str, path: str, size: int) -> list[str]:
    """``lfs ladvise -a dontneed -s 0 -e SIZE PATH``: the OSTs may drop the range from their
    cache (the Lustre manual's example of ladvise)."""
    return [lfs, "ladvise", "-a", "dontneed", "-s", "0", "-e", str(max(size, 1)), path]


def swap_layouts_argv(lfs: str, path: str, other: str) -> list[str]:
    return [lfs, "swap_layouts", path, other]


def df_argv(lfs: str, mount: str) -> list[str]:
    """``lfs df --lazy MOUNT``: lazy, so a dead OST is reported instead of waited for."""
    return [lfs, "df", "--lazy", mount]


def find_ost_argv(lfs: str, mount: str, ost_index: int) -> list[str]:
    return [lfs, "find", mount, "--ost", str(ost_index), "--type", "f", "--print0"]


def ping_argv(lctl: str, fsname: str, ost_index: int) -> list[str]:
    """Ping one OST through its OSC device (``osc.*.ping`` is the per-target ping)."""
    return [lctl, "set_param", f"osc.{fsname}-OST{ost_index:04x}-osc-*.ping=1"]


# -- lfs getstripe --yaml --------------------------------------------------------------------

_KEY = re.compile(r"^(?P<indent>\s*)(?:-\s+)?(?P<key>[A-Za-z_][\w.]*):\s*(?P<value>.*?)\s*$")
_FLOW_OBJECT = re.compile(r"^\s*-\s+(?:\d+:\s*)?\{\s*l_ost_idx:\s*(?P<idx>\w+),\s*"
                          r"l_fid:\s*\[?(?P<fid>[^\]\s}]+)\]?\s*\}\s*$")


def parse_getstripe_yaml(text: str, path: str = "") -> FileLayout:
    """A :class:`FileLayout` from ``lfs getstripe --yaml`` of a plain or composite file.

    Both object notations liblustreapi prints are accepted: block style (``- l_ost_idx: 0`` /
    ``l_fid: ...``, plain files) and flow style (``- 0: { l_ost_idx: 0, l_fid: [...] }``,
    components of composite files).
    """
    header: dict[str, str] = {}
    components: list[dict] = []
    current: dict | None = None
    objects: list[dict] | None = None
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        flow = _FLOW_OBJECT.match(line)
        if flow:
            if objects is None:
                raise _yaml_error(path, number, "object outside lmm_objects")
            objects.append({"l_ost_idx": flow["idx"], "l_fid": flow["fid"]})
            continue
        match = _KEY.match(line)
        if not match:
            if line.strip().startswith("/"):
                continue  # the path line printed before the layout
            raise _yaml_error(path, number, f"unexpected line {line.strip()!r}")
        key, value = match["key"], match["value"]
        is_item = line.lstrip().startswith("- ")
        if re.fullmatch(r"component\d+", key) and not value:
            current = {}
            components.append(current)
            objects = None
            continue
        if key == "sub_layout":
            continue
        if key == "lmm_objects":
            objects = []
            target = current if current is not None else header
            target["objects"] = objects
            continue
        if objects is not None and (is_item and key == "l_ost_idx"):
            objects.append({"l_ost_idx": value})
            continue
        if objects is not None and key == "l_fid" and objects:
            objects[-1]["l_fid"] = value.strip("[]")
            continue
        if key.startswith("lcme_") and current is None:
            # getstripe without --yaml lists components without 'componentN:' headers
            current = {}
            components.append(current)
        if key == "lcme_id" and current is not None and "lcme_id" in current:
            current = {}
            components.append(current)
            objects = None
        target = current if current is not None else header
        target[key] = value
    if not components:
        if "lmm_stripe_size" not in header:
            raise _yaml_error(path, 1, "no lmm_stripe_size: not getstripe --yaml output")
        return FileLayout((_component(header, path),), _int(header.get("lmm_layout_gen", "0")),
                          path)
    return FileLayout(tuple(_component(c, path) for c in components),
                      _int(header.get("lcm_layout_gen", "0")), path)


def _component(raw: dict, path: str) -> LayoutComponent:
    try:
        stripe_size = _int(raw["lmm_stripe_size"])
        objects = tuple(StripeObject(_int(o["l_ost_idx"]), o.get("l_fid", ""))
                        for o in raw.get("objects", []))
        end = raw.get("lcme_extent.e_end", "EOF")
        return LayoutComponent(
            stripe_size=stripe_size, objects=objects,
            extent_start=_int(raw.get("lcme_extent.e_start", "0")),
            extent_end=None if end in ("EOF", "-1") else _int(end),
            comp_id=_int(raw.get("lcme_id", "0")) if raw.get("lcme_id", "0") != "N/A" else 0,
            mirror_id=_int(raw.get("lcme_mirror_id", "0")) if raw.get("lcme_mirror_id", "0")
            != "N/A" else 0,
            pool=raw.get("lmm_pool") or None, pattern=raw.get("lmm_pattern", "raid0"),
            flags=raw.get("lcme_flags", "init"))
    except KeyError as err:
        raise StorageError(f"{path}: lfs getstripe output lacks {err.args[0]}") from None


def _int(text: str) -> int:
    return int(text, 0)


def _yaml_error(path: str, line: int, message: str) -> StorageError:
    return StorageError(f"{path or 'lfs getstripe'}: output line {line}: {message}")


# -- lfs df ----------------------------------------------------------------------------------

_DF_ROW = re.compile(r"^(?P<uuid>\S+)\s+(?P<total>\d+)\s+(?P<used>\d+)\s+(?P<avail>\d+)\s+"
                     r"(?P<pct>\d+|-)%?\s+(?P<mount>\S+)\[(?P<kind>OST|MDT):(?P<index>\d+)\]"
                     r"(?:\s+(?P<flags>\S+))?\s*$")
_DF_DOWN = re.compile(r"^(?P<name>(?:\S+-)?OST(?P<index>[0-9a-fA-F]{4}))(?:_UUID)?\s*:\s*"
                      r"(?P<message>.+?)\s*$")


def parse_df(text: str) -> list[OstStatus]:
    """OSTs with space (bytes) from ``lfs df``; ``OSTxxxx : inactive device`` rows included."""
    osts: dict[int, OstStatus] = {}
    for line in text.splitlines():
        row = _DF_ROW.match(line)
        if row:
            if row["kind"] != "OST":
                continue
            index = int(row["index"])
            name = row["uuid"].removesuffix("_UUID")
            flags = row["flags"] or ""
            osts[index] = OstStatus(index, name, OST_ACTIVE, int(row["total"]) * 1024,
                                    int(row["used"]) * 1024, int(row["avail"]) * 1024,
                                    f"flags {flags}" if flags else "")
            continue
        down = _DF_DOWN.match(line)
        if down:
            index = int(down["index"], 16)
            message = down["message"]
            state = OST_INACTIVE if "inactive" in message else OST_UNREACHABLE
            osts[index] = OstStatus(index, down["name"], state, detail=message)
    return [osts[i] for i in sorted(osts)]


def fsname_of(osts: list[OstStatus]) -> str | None:
    """The file system name from an OST name such as ``testfs-OST0001``."""
    for ost in osts:
        if "-OST" in ost.name:
            return ost.name.split("-OST", 1)[0]
    return None


def parse_find_print0(text: str) -> list[str]:
    return [p for p in text.split("\0") if p]


# -- changelog (lfs changelog MDT; records as Lustre's manual documents them) ------------------
def changelog_argv(lfs: str, mdt: str) -> list[str]:
    return [lfs, "changelog", mdt]


def changelog_clear_argv(lfs: str, mdt: str, user: str, recno: int) -> list[str]:
    return [lfs, "changelog_clear", mdt, user, str(recno)]


def fid2path_argv(lfs: str, mount: str, fid: str) -> list[str]:
    return [lfs, "fid2path", mount, fid]


def parse_fid2path(text: str) -> list[str]:
    """``lfs fid2path MOUNT FID``: one path per hard link, under the mount point."""
    return [line for line in text.splitlines() if line.startswith("/")]


_RECORD = re.compile(r"^(?P<recno>\d+)\s+(?P<type>\d+)(?P<name>[A-Z]+)\s+(?P<time>\S+)\s+"
                     r"(?P<date>\S+)\s+\S+\s+t=\[(?P<fid>[^\]]+)\]")
_RECORD_UID = re.compile(r"\su=(?P<uid>\d+):\d+(?:\s|$)")


@dataclass(frozen=True)
class ChangelogRecord:
    recno: int
    type_name: str
    fid: str
    when: float = 0.0      # seconds since the epoch (the MDS's local time)
    uid: int | None = None  # u=UID:GID of the extended record (ef=...), when the MDT gives it


def parse_changelog(text: str) -> list[ChangelogRecord]:
    """Records of ``lfs changelog MDT``: ``recno NNTYPE time date flags t=[fid] ...``."""
    found = []
    for line in text.splitlines():
        match = _RECORD.match(line.strip())
        if match:
            uid = _RECORD_UID.search(line)
            found.append(ChangelogRecord(int(match["recno"]), match["name"], match["fid"],
                                         _record_time(match["date"], match["time"]),
                                         int(uid["uid"]) if uid else None))
    return found


def _record_time(date: str, clock: str) -> float:
    """``2026.11.22`` + ``10:31:01.229213148`` -> epoch seconds (0.0 when unreadable)."""
    try:
        whole, _, fraction = clock.partition(".")
        moment = time.mktime(time.strptime(f"{date} {whole}", "%Y.%m.%d %H:%M:%S"))
        return moment + (float("0." + fraction) if fraction.isdigit() else 0.0)
    except ValueError:
        return 0.0
