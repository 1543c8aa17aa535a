"""(N, c, 1) block designs for design-theoretic replica placement (the flash QoS paper, §II.B).

A design on ``devices`` points (numbered 0..N-1) is a list of blocks of ``copies`` devices such
that every pair of devices lies in exactly one block. A bucket placed on a block keeps its c
copies on the block's devices; two different blocks then share at most one device, which is
what bounds the retrieval cost: any ``(c-1)M^2 + cM`` buckets can be read in M parallel
accesses. Every design built here is checked on construction (:class:`BlockDesign`), so a wrong
table or construction fails at once with the pair that breaks it.

Constructions:

* the paper's (9,3,1) table (Figure 2) and cyclic (7,3,1), (13,3,1) designs (:data:`NAMED`);
* :func:`cyclic_design`: the blocks of a difference family developed modulo N (rotations of the
  base blocks around Z_N);
* :func:`steiner_triple_system`: an (N,3,1) design for every N = 1 or 3 (mod 6) (Bose's
  construction for 3 mod 6, Skolem's for 1 mod 6);
* :func:`projective_plane` and :func:`affine_plane`: (q^2+q+1, q+1, 1) and (q^2, q, 1) for a
  prime q, for more than three copies.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import combinations

from scratchkeeper.errors import DesignError


@dataclass(frozen=True)
class BlockDesign:
    """An (N, c, 1) design: ``blocks`` of ``copies`` distinct devices out of ``devices``.

    Checked on construction: every block has ``copies`` distinct devices in 0..N-1 and every
    pair of devices shares exactly one block; otherwise :class:`DesignError` names the pair.
    """

    name: str
    devices: int
    copies: int
    blocks: tuple[tuple[int, ...], ...]

    def __post_init__(self) -> None:
        label = f"design {self.name}"
        if self.copies < 2:
            raise DesignError(f"{label}: copies must be >= 2, got {self.copies}")
        if self.devices <= self.copies:
            raise DesignError(f"{label}: needs more devices than copies, got N={self.devices}, "
                              f"c={self.copies}")
        object.__setattr__(self, "blocks", tuple(tuple(int(d) for d in b) for b in self.blocks))
        first_block: dict[tuple[int, int], int] = {}
        for index, block in enumerate(self.blocks):
            if len(block) != self.copies:
                raise DesignError(f"{label}: block {index} {block} has {len(block)} devices, "
                                  f"expected {self.copies}")
            if len(set(block)) != len(block):
                raise DesignError(f"{label}: block {index} {block} repeats a device")
            for device in block:
                if not 0 <= device < self.devices:
                    raise DesignError(f"{label}: block {index} {block}: device {device} out of "
                                      f"range 0..{self.devices - 1}")
            for pair in combinations(sorted(block), 2):
                if pair in first_block:
                    raise DesignError(f"{label}: devices {pair[0]} and {pair[1]} share more than "
                                      f"one block ({first_block[pair]} and {index})")
                first_block[pair] = index
        for pair in combinations(range(self.devices), 2):
            if pair not in first_block:
                raise DesignError(f"{label}: devices {pair[0]} and {pair[1]} share no block")

    def guarantee(self, accesses: int) -> int:
        """Buckets that can always be retrieved in ``accesses`` parallel accesses: (c-1)M^2 + cM."""
        return retrieval_guarantee(self.copies, accesses)

    def rotations(self) -> tuple[tuple[int, ...], ...]:
        """Every block and its c rotations, ``N(N-1)/(c-1)`` device lists, first copy first.

        Rotation (0,1,2) -> (1,2,0) -> (2,0,1) keeps the devices and changes which one holds the
        first copy, so the buckets' first copies spread evenly over the devices.
        """
        return tuple(block[shift:] + block[:shift]
                     for shift in range(self.copies) for block in self.blocks)


def retrieval_guarantee(copies: int, accesses: int) -> int:
    """``(c-1)M^2 + cM``: buckets an (N, c, 1) allocation retrieves in M accesses, always."""
    if copies < 1 or accesses < 1:
        raise DesignError(f"copies and accesses must be >= 1, got c={copies}, M={accesses}")
    return (copies - 1) * accesses * accesses + copies * accesses


def cyclic_design(devices: int, base_blocks: list[tuple[int, ...]], name: str | None = None
                  ) -> BlockDesign:
    """Develop a difference family modulo ``devices``: block + s for every base block and s."""
    if not base_blocks:
        raise DesignError("cyclic design: no base block given")
    copies = len(base_blocks[0])
    blocks = [tuple(sorted((d + shift) % devices for d in base))
              for base in base_blocks for shift in range(devices)]
    return BlockDesign(name or f"({devices},{copies},1) cyclic {base_blocks}", devices, copies,
                       tuple(blocks))


def _half_idempotent(i: int, j: int, n: int) -> int:
    """Commutative quasigroup on Z_2n with i*i = (i+n)*(i+n) = i mod n (Skolem's construction).

    The addition table of Z_2n relabelled: an even sum k becomes k/2, an odd one n + (k-1)/2.
    """
    total = (i + j) % (2 * n)
    return total // 2 if total % 2 == 0 else n + (total - 1) // 2


def steiner_triple_system(devices: int) -> BlockDesign:
    """An (N,3,1) design for N = 1 or 3 (mod 6), N >= 7 (Bose's and Skolem's constructions)."""
    name = f"({devices},3,1)"
    if devices < 7 or devices % 6 not in (1, 3):
        raise DesignError(f"design {name}: a Steiner triple system needs N = 1 or 3 (mod 6) and "
                          f"N >= 7, got N={devices}")
    blocks: list[tuple[int, ...]] = []
    if devices % 6 == 3:
        # Bose: points (x, t), x in Z_m (m = 2n+1), t in Z_3, with the idempotent commutative
        # quasigroup x*y = (n+1)(x+y) mod m; point (x, t) is device t*m + x.
        m = devices // 3
        half = (m + 1) // 2

        def point(x: int, t: int) -> int:
            return (t % 3) * m + x

        for x in range(m):
            blocks.append((point(x, 0), point(x, 1), point(x, 2)))
        for t in range(3):
            for x, y in combinations(range(m), 2):
                blocks.append((point(x, t), point(y, t), point(half * (x + y) % m, t + 1)))
    else:
        # Skolem: points infinity and (x, t), x in Z_2n, t in Z_3, with a half-idempotent
        # commutative quasigroup; infinity is device 6n, (x, t) is t*2n + x.
        n = (devices - 1) // 6
        infinity = devices - 1

        def point(x: int, t: int) -> int:
            return (t % 3) * 2 * n + x

        for x in range(n):
            blocks.append((point(x, 0), point(x, 1), point(x, 2)))
        for x in range(n):
            for t in range(3):
                blocks.append((infinity, point(n + x, t), point(x, t + 1)))
        for t in range(3):
            for x, y in combinations(range(2 * n), 2):
                blocks.append((point(x, t), point(y, t),
                               point(_half_idempotent(x, y, n), t + 1)))
    return BlockDesign(name, devices, 3, tuple(tuple(sorted(b)) for b in blocks))


def _check_prime(q: int, what: str) -> None:
    if q < 2 or any(q % p == 0 for p in range(2, int(q ** 0.5) + 1)):
        raise DesignError(f"{what}: q must be a prime (prime powers are not built), got {q}")


def projective_plane(q: int) -> BlockDesign:
    """The lines of PG(2,q) for a prime q: a (q^2+q+1, q+1, 1) design (c = q+1 copies)."""
    _check_prime(q, f"projective plane of order {q}")
    # Points and lines are the 1-dimensional subspaces of GF(q)^3, each written with its first
    # non-zero coordinate 1; a point lies on a line when their dot product is 0.
    vectors = [v for v in ((a, b, c) for a in range(q) for b in range(q) for c in range(q))
               if v != (0, 0, 0) and next(x for x in v if x) == 1]
    blocks = tuple(tuple(index for index, point in enumerate(vectors)
                         if sum(a * b for a, b in zip(point, line)) % q == 0)
                   for line in vectors)
    size = q * q + q + 1
    return BlockDesign(f"({size},{q + 1},1)", size, q + 1, blocks)


def affine_plane(q: int) -> BlockDesign:
    """The lines of AG(2,q) for a prime q: a (q^2, q, 1) design (c = q copies)."""
    _check_prime(q, f"affine plane of order {q}")
    if q < 3:
        raise DesignError("affine plane of order 2 has blocks of 2 devices: use q >= 3")

    def point(x: int, y: int) -> int:
        return x * q + y

    blocks = [tuple(point(x, (slope * x + offset) % q) for x in range(q))
              for slope in range(q) for offset in range(q)]
    blocks += [tuple(point(x, y) for y in range(q)) for x in range(q)]
    return BlockDesign(f"({q * q},{q},1)", q * q, q, tuple(blocks))


#: The paper's (9,3,1) design (Figure 2), one block per column.
PAPER_9_3_1 = BlockDesign("(9,3,1)", 9, 3, (
    (0, 1, 2), (0, 3, 6), (0, 4, 8), (0, 5, 7), (1, 3, 8), (1, 4, 7),
    (1, 5, 6), (2, 3, 7), (2, 4, 6), (2, 5, 8), (3, 4, 5), (6, 7, 8)))

#: The designs the issue names, by (N, c).
NAMED: dict[tuple[int, int], BlockDesign] = {
    (7, 3): cyclic_design(7, [(0, 1, 3)], name="(7,3,1)"),
    (9, 3): PAPER_9_3_1,
    (13, 3): cyclic_design(13, [(0, 1, 4), (0, 2, 7)], name="(13,3,1)"),
}


def design_for(devices: int, copies: int) -> BlockDesign:
    """An (N, c, 1) design for ``devices`` and ``copies``, from the table or a construction."""
    if (devices, copies) in NAMED:
        return NAMED[devices, copies]
    if copies == 3 and devices % 6 in (1, 3) and devices >= 7:
        return steiner_triple_system(devices)
    for q in range(2, devices):
        if q * q + q + 1 == devices and copies == q + 1:
            return projective_plane(q)
        if q * q == devices and copies == q and q >= 3:
            return affine_plane(q)
    raise DesignError(f"no ({devices},{copies},1) design is built here: (N,3,1) needs N = 1 or 3 "
                      "(mod 6); c > 3 needs N = q^2+q+1 (c = q+1) or N = q^2 (c = q), q prime")
