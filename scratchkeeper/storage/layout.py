"""File layouts and the RAID-0 stripe arithmetic Lustre uses, shared by both backends.

A file's layout is a list of components (Lustre PFL/FLR ``lcme`` entries). Each component
covers the byte extent ``[extent_start, extent_end)`` of one mirror and stripes it round-robin
over its objects: byte ``offset`` lives on stripe position ``(offset // stripe_size) %
stripe_count`` at object offset ``(offset // (stripe_size * stripe_count)) * stripe_size +
offset % stripe_size``. Lustre computes both from the absolute file offset, not from the start of
the component, so objects of later components are sparse; we do the same.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import NamedTuple

from ..errors import InputError, StorageError

EOF = None  # extent_end of a component that runs to the end of the file


class Extent(NamedTuple):
    """A byte range ``[offset, offset + length)`` of a file."""

    offset: int
    length: int

    @property
    def end(self) -> int:
        return self.offset + self.length


def merge_extents(extents: Iterable[Extent]) -> list[Extent]:
    """Sort extents and join the ones that touch or overlap."""
    merged: list[Extent] = []
    for extent in sorted(e for e in extents if e.length > 0):
        if merged and extent.offset <= merged[-1].end:
            last = merged[-1]
            merged[-1] = Extent(last.offset, max(last.end, extent.end) - last.offset)
        else:
            merged.append(extent)
    return merged


def subtract_extents(extents: Iterable[Extent], removed: Iterable[Extent]) -> list[Extent]:
    """The parts of ``extents`` not covered by ``removed`` (one sweep over both, sorted)."""
    cuts = merge_extents(removed)
    result: list[Extent] = []
    first = 0  # cuts before this one end before every extent still to come
    for extent in merge_extents(extents):
        start, end = extent.offset, extent.end
        while first < len(cuts) and cuts[first].end <= start:
            first += 1
        index = first
        while start < end and index < len(cuts) and cuts[index].offset < end:
            cut = cuts[index]
            if cut.offset > start:
                result.append(Extent(start, cut.offset - start))
            start = max(start, cut.end)
            index += 1
        if start < end:
            result.append(Extent(start, end - start))
    return result


@dataclass(frozen=True)
class StripeObject:
    """One object of a component: the OST holding it and its id there (Lustre: the FID)."""

    ost_index: int
    object_id: str


class StripePiece(NamedTuple):
    """Part of a byte range that lives in one object: where in the file and where in the object."""

    file_offset: int
    length: int
    position: int  # index in the component's stripe list
    object_offset: int


@dataclass(frozen=True)
class LayoutComponent:
    """One striped extent of one mirror (a plain file has a single component, mirror 0)."""

    stripe_size: int
    objects: tuple[StripeObject, ...]
    extent_start: int = 0
    extent_end: int | None = EOF
    comp_id: int = 0
    mirror_id: int = 0
    pool: str | None = None
    pattern: str = "raid0"
    flags: str = "init"

    @property
    def stripe_count(self) -> int:
        return len(self.objects)

    @property
    def ost_list(self) -> tuple[int, ...]:
        """OST indices in stripe order."""
        return tuple(obj.ost_index for obj in self.objects)

    @property
    def instantiated(self) -> bool:
        """Lustre allocates objects only for components flagged ``init``."""
        return "init" in self.flags.split(",") and bool(self.objects)

    def covers(self, offset: int) -> bool:
        return offset >= self.extent_start and (self.extent_end is None or offset < self.extent_end)

    def position_of(self, offset: int) -> int:
        """Stripe position holding file byte ``offset``."""
        return (offset // self.stripe_size) % self.stripe_count

    def object_offset(self, offset: int) -> int:
        """Offset inside its object of file byte ``offset``."""
        full_rounds = offset // (self.stripe_size * self.stripe_count)
        return full_rounds * self.stripe_size + offset % self.stripe_size

    def pieces(self, offset: int, length: int) -> Iterator[StripePiece]:
        """Split ``[offset, offset+length)`` (inside this component) into per-object pieces."""
        end = offset + length
        position = offset
        while position < end:
            stripe_end = (position // self.stripe_size + 1) * self.stripe_size
            piece_end = min(end, stripe_end)
            yield StripePiece(position, piece_end - position, self.position_of(position),
                              self.object_offset(position))
            position = piece_end

    def extents_at_position(self, position: int, file_size: int) -> list[Extent]:
        """File byte ranges stored by stripe ``position`` of this component, up to ``file_size``."""
        start = self.extent_start
        end = file_size if self.extent_end is None else min(self.extent_end, file_size)
        if end <= start:
            return []
        round_size = self.stripe_size * self.stripe_count
        extents = []
        first_round = start // round_size
        for round_start in range(first_round * round_size, end, round_size):
            lo = max(start, round_start + position * self.stripe_size)
            hi = min(end, round_start + (position + 1) * self.stripe_size)
            if hi > lo:
                extents.append(Extent(lo, hi - lo))
        return merge_extents(extents)

    def object_size(self, position: int, file_size: int) -> int:
        """Bytes object ``position`` must hold for a file of ``file_size`` (its last byte + 1)."""
        extents = self.extents_at_position(position, file_size)
        if not extents:
            return 0
        last = extents[-1]
        return self.object_offset(last.end - 1) + 1

    def to_dict(self) -> dict:
        return {"comp_id": self.comp_id, "mirror_id": self.mirror_id,
                "extent_start": self.extent_start, "extent_end": self.extent_end,
                "stripe_size": self.stripe_size, "stripe_count": self.stripe_count,
                "pattern": self.pattern, "flags": self.flags, "pool": self.pool,
                "objects": [{"ost_index": o.ost_index, "object_id": o.object_id}
                            for o in self.objects]}

    @classmethod
    def from_dict(cls, raw: dict) -> LayoutComponent:
        return cls(stripe_size=int(raw["stripe_size"]),
                   objects=tuple(StripeObject(int(o["ost_index"]), str(o["object_id"]))
                                 for o in raw["objects"]),
                   extent_start=int(raw.get("extent_start", 0)),
                   extent_end=None if raw.get("extent_end") is None else int(raw["extent_end"]),
                   comp_id=int(raw.get("comp_id", 0)), mirror_id=int(raw.get("mirror_id", 0)),
                   pool=raw.get("pool"), pattern=raw.get("pattern", "raid0"),
                   flags=raw.get("flags", "init"))


@dataclass(frozen=True)
class FileLayout:
    """A file's layout: its components in order, grouped into mirrors by ``mirror_id``."""

    components: tuple[LayoutComponent, ...]
    layout_gen: int = 0
    path: str = field(default="", compare=False)

    # -- the plain-file view most callers want -------------------------------------------------
    @property
    def first(self) -> LayoutComponent:
        return self.components[0]

    @property
    def stripe_size(self) -> int:
        return self.first.stripe_size

    @property
    def stripe_count(self) -> int:
        return self.first.stripe_count

    @property
    def ost_list(self) -> tuple[int, ...]:
        """OSTs of the first component, in stripe order."""
        return self.first.ost_list

    @property
    def mirror_ids(self) -> list[int]:
        return sorted({c.mirror_id for c in self.components})

    @property
    def is_composite(self) -> bool:
        return len(self.components) > 1

    def mirror(self, mirror_id: int) -> list[LayoutComponent]:
        return [c for c in self.components if c.mirror_id == mirror_id]

    def osts(self, mirror_id: int | None = None) -> set[int]:
        """Every OST holding an object of the file (or of one mirror)."""
        return {obj.ost_index for comp in self.components
                if mirror_id is None or comp.mirror_id == mirror_id for obj in comp.objects}

    def component_at(self, offset: int, mirror_id: int | None = None) -> LayoutComponent | None:
        for comp in self.components:
            if (mirror_id is None or comp.mirror_id == mirror_id) and comp.covers(offset):
                return comp
        return None

    def extents_on_ost(self, ost_index: int, file_size: int,
                       mirror_id: int | None = None) -> list[Extent]:
        """File byte ranges with a copy on ``ost_index`` (in one mirror, or in any)."""
        extents: list[Extent] = []
        for comp in self.components:
            if mirror_id is not None and comp.mirror_id != mirror_id:
                continue
            for position, ost in enumerate(comp.ost_list):
                if ost == ost_index:
                    extents.extend(comp.extents_at_position(position, file_size))
        return merge_extents(extents)

    def lost_extents(self, failed_osts: Iterable[int], file_size: int) -> list[Extent]:
        """Byte ranges no mirror can serve once ``failed_osts`` are gone: what must be patched."""
        failed = set(failed_osts)
        lost: list[Extent] | None = None
        for mirror_id in self.mirror_ids:
            mirror_lost = merge_extents(e for ost in failed
                                        for e in self.extents_on_ost(ost, file_size, mirror_id))
            # a byte is lost only if every mirror lost it
            lost = mirror_lost if lost is None else _intersect(lost, mirror_lost)
        return lost or []

    def to_dict(self) -> dict:
        return {"path": self.path, "layout_gen": self.layout_gen,
                "mirror_count": len(self.mirror_ids),
                "components": [c.to_dict() for c in self.components]}

    @classmethod
    def from_dict(cls, raw: dict) -> FileLayout:
        return cls(components=tuple(LayoutComponent.from_dict(c) for c in raw["components"]),
                   layout_gen=int(raw.get("layout_gen", 0)), path=raw.get("path", ""))

    # -- the layout attribute of an MDT inode (docs/mount.rst) ---------------------------------
    def to_lov(self) -> bytes:
        """The ``security.scratchkeeper.lov`` text of this layout (docs/mount.rst).

        Refuses (``StorageError``) a layout the format cannot hold, so that nothing written
        is refused by :meth:`from_lov` later.
        """
        lines = [f"lov {LOV_VERSION} gen={self.layout_gen}"]
        for comp in self.components:
            end = "eof" if comp.extent_end is None else str(comp.extent_end)
            lines.append(f"comp id={comp.comp_id} mirror={comp.mirror_id} "
                         f"start={comp.extent_start} end={end} stripe_size={comp.stripe_size} "
                         f"pattern={comp.pattern} flags={comp.flags} pool={comp.pool or '-'}")
            lines.extend(f"obj {o.ost_index} {o.object_id}" for o in comp.objects)
        data = ("\n".join(lines) + "\n").encode("ascii", "replace")
        # one parser decides what is valid: what it refuses is never written
        FileLayout.from_lov(data, self.path)
        return data

    @classmethod
    def from_lov(cls, data: bytes, path: str) -> FileLayout:
        """Parse a ``security.scratchkeeper.lov`` value; anything but the exact format of
        docs/mount.rst is a corrupt layout (``StorageError`` naming ``path``)."""
        return _parse_lov(bytes(data), path)


LOV_VERSION = 1
LOV_XATTR = "security.scratchkeeper.lov"
DIRLOV_XATTR = "security.scratchkeeper.dirlov"
STRIPE_UNIT = 65536
MAX_STRIPE_SIZE = (1 << 32) - STRIPE_UNIT  # Lustre's LOV_MAX_STRIPE_SIZE
MAX_OST_INDEX = 65535
MAX_U32 = (1 << 32) - 1
MAX_U64 = (1 << 63) - 1  # offsets and generations: what a signed 64-bit off_t holds
LOV_FLAGS = frozenset({"init", "stale", "prefer", "prefrd", "prefwr", "nosync"})
_NUMBER = re.compile(r"0|[1-9][0-9]{0,18}")
_OBJECT_ID = re.compile(r"[0-9a-f]{32}")
_POOL = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.+-]{0,126}")
_COMP_FIELDS = ("id", "mirror", "start", "end", "stripe_size", "pattern", "flags", "pool")


class _Corrupt(Exception):
    pass


def _number(text: str, what: str, low: int, high: int) -> int:
    if not _NUMBER.fullmatch(text):
        raise _Corrupt(f"{what} {text!r} is not a decimal number")
    value = int(text)
    if not low <= value <= high:
        raise _Corrupt(f"{what} {value} is out of range ({low}-{high})")
    return value


def _stripe_size(text: str, what: str = "stripe_size") -> int:
    value = _number(text, what, STRIPE_UNIT, MAX_STRIPE_SIZE)
    if value % STRIPE_UNIT:
        raise _Corrupt(f"{what} {value} is not a multiple of 64 KiB")
    return value


def _pool(text: str) -> str:
    if not _POOL.fullmatch(text):
        raise _Corrupt(f"pool {text!r} is not a pool name")
    return text


def _fields(words: list[str], names: tuple[str, ...], line: str) -> dict[str, str]:
    """``name=value`` words, exactly ``names`` in that order."""
    if len(words) != len(names):
        raise _Corrupt(f"expected {' '.join(n + '=' for n in names)} in {line!r}")
    values = {}
    for word, name in zip(words, names):
        key, sep, value = word.partition("=")
        if key != name or not sep or not value:
            raise _Corrupt(f"expected {name}=... in {line!r}, found {word!r}")
        values[name] = value
    return values


def _parse_lov(data: bytes, path: str) -> FileLayout:
    try:
        try:
            text = data.decode("ascii")
        except UnicodeDecodeError:
            raise _Corrupt("not ASCII text") from None
        if not text.endswith("\n"):
            raise _Corrupt("does not end with a newline")
        lines = text[:-1].split("\n")
        header = lines[0].split(" ")
        if len(header) != 3 or header[0] != "lov":
            raise _Corrupt(f"expected 'lov {LOV_VERSION} gen=G' first, found {lines[0]!r}")
        if header[1] != str(LOV_VERSION):
            raise _Corrupt(f"unknown version {header[1]!r} (this scratchkeeper reads "
                           f"version {LOV_VERSION})")
        gen = _number(_fields(header[2:], ("gen",), lines[0])["gen"], "gen", 0, MAX_U64)
        components: list[LayoutComponent] = []
        raw: list[tuple[dict, list[StripeObject]]] = []
        seen: set[StripeObject] = set()
        for number, line in enumerate(lines[1:], 2):
            words = line.split(" ")
            if words[0] == "comp":
                raw.append((_fields(words[1:], _COMP_FIELDS, line), []))
            elif words[0] == "obj":
                if not raw:
                    raise _Corrupt(f"line {number}: an object before any component")
                if len(words) != 3:
                    raise _Corrupt(f"line {number}: expected 'obj OST OBJECT_ID', found "
                                   f"{line!r}")
                obj = StripeObject(_number(words[1], "OST index", 0, MAX_OST_INDEX), words[2])
                if not _OBJECT_ID.fullmatch(obj.object_id):
                    raise _Corrupt(f"line {number}: object id {obj.object_id!r} is not 32 "
                                   "lower-case hex digits")
                if obj in seen:
                    raise _Corrupt(f"line {number}: object {obj.ost_index} {obj.object_id} "
                                   "listed twice")
                seen.add(obj)
                raw[-1][1].append(obj)
            else:
                raise _Corrupt(f"line {number}: expected a comp or obj line, found {line!r}")
        if not raw:
            raise _Corrupt("no component")
        for values, objects in raw:
            if not objects:
                raise _Corrupt(f"component {values['id']} has no object")
            start = _number(values["start"], "start", 0, MAX_U64)
            end = None if values["end"] == "eof" else \
                _number(values["end"], "end", start + 1, MAX_U64)
            if values["pattern"] != "raid0":
                raise _Corrupt(f"pattern {values['pattern']!r} (only raid0 is known)")
            flags = values["flags"].split(",")
            if not set(flags) <= LOV_FLAGS or len(set(flags)) != len(flags):
                raise _Corrupt(f"flags {values['flags']!r} (known: "
                               f"{', '.join(sorted(LOV_FLAGS))}, each once)")
            components.append(LayoutComponent(
                stripe_size=_stripe_size(values["stripe_size"]), objects=tuple(objects),
                extent_start=start, extent_end=end,
                comp_id=_number(values["id"], "component id", 0, MAX_U32),
                mirror_id=_number(values["mirror"], "mirror", 0, 65535),
                pool=None if values["pool"] == "-" else _pool(values["pool"]),
                pattern="raid0", flags=values["flags"]))
    except _Corrupt as err:
        raise StorageError(f"{path}: corrupt layout attribute ({LOV_XATTR}): {err}") from None
    return FileLayout(tuple(components), gen, path)


@dataclass(frozen=True)
class DirDefault:
    """A directory's default layout (``lfs setstripe DIR``), the ``security.scratchkeeper.dirlov``
    attribute: ``stripe_count=N stripe_size=Z`` and ``pool=P`` when there is one."""

    stripe_count: int
    stripe_size: int
    pool: str | None = None

    def to_xattr(self) -> bytes:
        text = f"stripe_count={self.stripe_count} stripe_size={self.stripe_size}"
        if self.pool is not None:
            text += f" pool={self.pool}"
        data = text.encode("ascii", "replace")
        DirDefault.from_xattr(data, "(new default layout)")
        return data

    @classmethod
    def from_xattr(cls, data: bytes, path: str) -> DirDefault:
        """Parse a dirlov value (one optional trailing newline); anything else is corrupt
        (``StorageError`` naming ``path``)."""
        try:
            try:
                text = bytes(data).decode("ascii")
            except UnicodeDecodeError:
                raise _Corrupt("not ASCII text") from None
            text = text[:-1] if text.endswith("\n") else text
            words = text.split(" ")
            names = ("stripe_count", "stripe_size", "pool")[:3 if len(words) == 3 else 2]
            values = _fields(words, names, text)
            count = values["stripe_count"]
            stripe_count = -1 if count == "-1" else \
                _number(count, "stripe_count", 1, MAX_OST_INDEX + 1)
            return cls(stripe_count, _stripe_size(values["stripe_size"]),
                       _pool(values["pool"]) if "pool" in values else None)
        except _Corrupt as err:
            raise StorageError(f"{path}: corrupt default layout attribute ({DIRLOV_XATTR}): "
                               f"{err}") from None

    def request(self) -> LayoutRequest:
        return LayoutRequest(stripe_count=self.stripe_count, stripe_size=self.stripe_size,
                             pool=self.pool)


def _intersect(left: list[Extent], right: list[Extent]) -> list[Extent]:
    result = []
    for a in left:
        for b in right:
            lo, hi = max(a.offset, b.offset), min(a.end, b.end)
            if hi > lo:
                result.append(Extent(lo, hi - lo))
    return merge_extents(result)


@dataclass(frozen=True)
class LayoutRequest:
    """What ``lfs setstripe`` is told: any field left ``None`` takes the backend default.

    ``stripe_count=-1`` means every OST (as with ``lfs setstripe -c -1``).
    """

    stripe_count: int | None = None
    stripe_size: int | None = None
    ost_list: tuple[int, ...] | None = None
    pool: str | None = None
    #: a mirror added with this request is read before the others (its component flags get
    #: ``prefer``, as ``lfs mirror extend -N --flags=prefer``); only for :meth:`add_mirror`
    prefer: bool = False

    def check(self) -> None:
        """Reject requests Lustre itself would refuse."""
        if self.stripe_size is not None and (self.stripe_size <= 0 or self.stripe_size % 65536):
            raise InputError(f"stripe size {self.stripe_size}: must be a positive multiple of 64 KiB")
        if self.stripe_count is not None and (self.stripe_count == 0 or self.stripe_count < -1):
            raise InputError(f"stripe count {self.stripe_count}: must be >= 1 or -1 (all OSTs)")
        if self.ost_list is not None:
            if not self.ost_list:
                raise InputError("OST list is empty")
            if len(set(self.ost_list)) != len(self.ost_list):
                raise InputError(f"OST list {list(self.ost_list)} names an OST twice")
            if any(i < 0 for i in self.ost_list):
                raise InputError(f"OST list {list(self.ost_list)}: OST indices are >= 0")
            if self.stripe_count not in (None, -1, len(self.ost_list)):
                raise InputError(f"stripe count {self.stripe_count} does not match the "
                                 f"{len(self.ost_list)} OSTs listed")


def parse_size(text: str) -> int:
    """``1M``, ``64k``, ``4194304`` -> bytes (binary units, as ``lfs setstripe -S``)."""
    units = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}
    stripped = text.strip().lower().removesuffix("ib").removesuffix("b")
    number, unit = stripped, ""
    if stripped and stripped[-1] in units:
        number, unit = stripped[:-1], stripped[-1]
    try:
        value = int(number) * units[unit]
    except ValueError:
        raise InputError(f"size {text!r}: expected bytes with an optional K, M, G or T") from None
    return value


def parse_ost_list(text: str) -> tuple[int, ...]:
    """``1,3,5-7`` -> (1, 3, 5, 6, 7): the syntax of ``lfs setstripe -o``."""
    indices: list[int] = []
    for part in text.split(","):
        part = part.strip()
        try:
            if "-" in part:
                lo, hi = (int(x, 0) for x in part.split("-", 1))
                if hi < lo:
                    raise ValueError
                indices.extend(range(lo, hi + 1))
            else:
                indices.append(int(part, 0))
        except ValueError:
            raise InputError(f"OST list {text!r}: expected indices like 1,3,5-7") from None
    return tuple(indices)
