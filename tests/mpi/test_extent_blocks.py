"""Derived datatypes of extent <= 0 on the side of a collective that holds p blocks (Scatter's
and Scatterv's send, Gather's, Gatherv's, Allgather's and Allgatherv's receive, both sides
of Alltoall and Alltoallv): the call goes, as MPI's (issue 20; ``docs/errors.md``).

A datatype's extent is one rank's own value (its peers pass types of the same signature, of
any extent), so p2p may not refuse it on that rank: it packs the blocks into a scratch of a
twin type of positive extent before the schedule and, for a receive, unpacks them after
(``mpicoll.backends.buffers._packed``).  The types, on the p-block side only (the other side
plain ``MPI.DOUBLE``):

* ``rev``: a double of extent -8 whose first element is the buffer's last double, so the
  blocks walk down the buffer (a send reads it backwards, a receive fills it backwards);
* ``zero``: a double of extent 0 on a send side (every element is the buffer's first double:
  legal, MPI sends it again and again);
* ``empty``: a datatype of size 0 and extent 0 on both sides of every rank (nothing moves);
* ``mixed``: ``rev`` on the even ranks, ``MPI.DOUBLE`` on the odd ones (peers of different
  datatypes of one signature).

Each case runs on plain mpi4py and on p2p (every algorithm forced, and ``auto`` blocking, as
an I-form and persistent), roots 0 and P-1, counts 0, 1 and 3 per block, and the bytes of
every receive buffer must agree; they are also checked against the values written out (the
same call with plain doubles, reversed where ``rev`` receives), so the reference does not
rest on one library.  A receive of extent 0 (p blocks into one location: erroneous in MPI,
MPICH writes them in arrival order) completes on every rank with the last block's bytes,
and checked mode refuses it on every rank before any message.  Every test runs under a
per-test timeout: no rank may hang.

Run: ``mpiexec -n P python -m pytest --with-mpi tests/mpi/test_extent_blocks.py`` (P = 1..5).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from mpi4py import MPI

import mpicoll
from mpicoll import MismatchError, RestrictionError, registry

WORLD = MPI.COMM_WORLD
P = WORLD.Get_size()
RANK = WORLD.Get_rank()
SENT = -7.0
OPEN_MPI = "Open MPI" in MPI.Get_library_version()
COLLECTIVES = ["scatter", "scatterv", "gather", "gatherv", "allgather", "allgatherv",
               "alltoall", "alltoallv"]
VARIANTS = ["rev", "zero", "empty", "mixed"]
METHOD = {c: c.capitalize() for c in COLLECTIVES}


def rev_type(m: int) -> MPI.Datatype:
    """A double of extent -8 whose element 0 is double ``m - 1`` of the buffer: ``m``
    elements cover the buffer backwards."""
    one = MPI.DOUBLE.Create_hindexed([1], [8 * (m - 1)])
    try:
        return one.Create_resized(0, -8).Commit()
    finally:
        one.Free()


class Types:
    """The datatypes one case makes (freed by :meth:`free`)."""

    def __init__(self) -> None:
        self.made: list[MPI.Datatype] = []
        #: the send buffers of the case (what a replay changes between runs)
        self.sends: list[np.ndarray] = []

    def get(self, kind: str, m: int) -> MPI.Datatype:
        if kind == "rev":
            t = rev_type(max(m, 1))
        elif kind == "zero":
            t = MPI.DOUBLE.Create_resized(0, 0).Commit()
        else:
            t = MPI.DOUBLE.Create_contiguous(0).Commit()
        self.made.append(t)
        return t

    def free(self) -> None:
        for t in self.made:
            t.Free()


def _kind(variant: str, send: bool) -> str | None:
    """The special datatype this rank passes on a p-block side (None: MPI.DOUBLE)."""
    if variant == "mixed":
        return "rev" if RANK % 2 == 0 else None
    if variant == "zero":
        return "zero" if send else None
    return variant


class Block:
    """One buffer of ``m`` doubles: the spec this rank passes (``spec``), the array the call
    reads or writes (``raw``), and the logical array of plain doubles the same call with
    ``MPI.DOUBLE`` reads or writes (``plain``); ``want(plain)``: ``raw``'s bytes from the
    plain call's result."""

    def __init__(self, types: Types, m: int, kind: str | None, send: bool, fill: int,
                 layout: tuple[list[int], list[int]] | int | None) -> None:
        self.kind = kind
        logical = np.arange(m, dtype=np.float64) + 100 * fill + 0.5
        if not send:
            logical = np.full(m, SENT)
        self.plain = logical.copy()
        if kind == "rev":
            self.raw = logical[::-1].copy()
        elif kind == "zero":
            self.raw = logical.copy()
            self.plain = np.full(m, logical[0] if m else 0.0)  # what MPI reads
        else:
            self.raw = logical.copy()
        if send:
            types.sends.append(self.raw)
        dt = MPI.DOUBLE if kind is None else types.get(kind, m)
        self.dt = dt
        self.spec = [self.raw, layout, dt]
        self.plain_spec = [self.plain, layout, MPI.DOUBLE]

    def want(self) -> np.ndarray:
        """This receive buffer's bytes after the call, from the plain call's result."""
        if self.kind == "rev":
            return self.plain[::-1]
        if self.kind == "empty":
            return np.full(self.plain.size, SENT)
        return self.plain


def vunits(i: int, u: int) -> int:
    return (i * 2 + 1) % 3 * u // 2 + (i % 2) * (u > 0)  # uneven, zeros among them


def _layout(counts: list[int]) -> tuple[list[int], list[int]]:
    return counts, [int(x) for x in np.cumsum([0, *counts[:-1]])]


def build(coll: str, variant: str, u: int, root: int, types: Types
          ) -> tuple[tuple[Any, ...], tuple[Any, ...], list[Block]]:
    """(the call's arguments, the plain-double call's arguments, the receive blocks to
    compare) on this rank; ``empty`` passes its size-0 type on the one-block side too."""
    one = MPI.DOUBLE if variant != "empty" else types.get("empty", 0)

    def single(n: int, send: bool) -> tuple[Any, Any, np.ndarray]:
        arr = np.arange(n, dtype=np.float64) + 100 * RANK + 0.25 if send else np.full(n, SENT)
        if send:
            types.sends.append(arr)
        return [arr, n, one], [arr.copy() if send else np.full(n, SENT), n, MPI.DOUBLE], arr

    if coll in ("scatter", "scatterv"):
        counts = [u] * P if coll == "scatter" else [vunits(i, u) for i in range(P)]
        s = None
        if root == RANK:
            s = Block(types, sum(counts), _kind(variant, True), True, RANK,
                      u if coll == "scatter" else _layout(counts))
        rs, rp, rarr = single(counts[RANK], False)
        out = Block.__new__(Block)
        out.kind, out.raw, out.plain = (variant if variant == "empty" else None), rarr, rp[0]
        return ((None if s is None else s.spec, rs, root),
                (None if s is None else s.plain_spec, rp, root), [out])
    if coll in ("gather", "gatherv"):
        counts = [u] * P if coll == "gather" else [vunits(i, u) for i in range(P)]
        ss, sp, _ = single(counts[RANK], True)
        r = None
        if root == RANK:
            r = Block(types, sum(counts), _kind(variant, False), False, RANK,
                      u if coll == "gather" else _layout(counts))
        return ((ss, None if r is None else r.spec, root),
                (sp, None if r is None else r.plain_spec, root), [] if r is None else [r])
    if coll in ("allgather", "allgatherv"):
        counts = [u] * P if coll == "allgather" else [vunits(i, u) for i in range(P)]
        ss, sp, _ = single(counts[RANK], True)
        r = Block(types, sum(counts), _kind(variant, False), False, RANK,
                  u if coll == "allgather" else _layout(counts))
        return (ss, r.spec), (sp, r.plain_spec), [r]
    if coll == "alltoall":
        s = Block(types, u * P, _kind(variant, True), True, RANK, u)
        r = Block(types, u * P, _kind(variant, False), False, RANK, u)
        return (s.spec, r.spec), (s.plain_spec, r.plain_spec), [r]
    assert coll == "alltoallv"
    sent = [(RANK + 2 * j) % 3 * u for j in range(P)]
    got = [(i + 2 * RANK) % 3 * u for i in range(P)]
    s = Block(types, sum(sent), _kind(variant, True), True, RANK, _layout(sent))
    r = Block(types, sum(got), _kind(variant, False), False, RANK, _layout(got))
    return (s.spec, r.spec), (s.plain_spec, r.plain_spec), [r]


def _run(backend: Any, coll: str, form: str, args: tuple[Any, ...], **kw: Any) -> None:
    name = METHOD[coll]
    if form == "blocking":
        getattr(backend, name)(*args, **kw)
    elif form == "I":
        getattr(backend, "I" + name[0].lower() + name[1:])(*args, **kw).Wait()
    else:
        req = getattr(backend, name + "_init")(*args, **kw)
        try:
            for _ in range(2):
                req.Start()
                req.Wait()
        finally:
            req.Free()


@pytest.fixture(scope="module")
def p2p() -> Any:
    b = mpicoll.p2p(WORLD)
    yield b
    b.Free()


@pytest.fixture(scope="module")
def native() -> Any:
    b = mpicoll.native(WORLD)
    yield b
    b.Free()


def _one(backend: Any, coll: str, variant: str, u: int, root: int, form: str = "blocking",
         **kw: Any) -> list[bytes]:
    """The receive buffers' bytes after one call.  ``form="replay"``: the same call three
    times on the same arguments (its cached and compiled replays), the send data raised by
    1000 and the receive buffers reset before each run after the first; the bytes of each
    run, lowered back by what was added, must be the first run's."""
    types = Types()
    try:
        args, _, outs = build(coll, variant, u, root, types)
        if form != "replay":
            _run(backend, coll, form, args, **kw)
            return [o.raw.tobytes() for o in outs]
        runs = []
        for k in range(3):
            if k:
                for a in types.sends:
                    a += 1000.0
                for o in outs:
                    o.raw[:] = SENT
            _run(backend, coll, "blocking", args, **kw)
            runs.append([np.where(o.raw == SENT, SENT, o.raw - 1000.0 * k).tobytes()
                         for o in outs])
        assert runs[1] == runs[0], "the second run (a replay)"
        assert runs[2] == runs[0], "the third run (the compiled plan)"
        return runs[0]
    finally:
        types.free()


def _written_out(coll: str, variant: str, u: int, root: int) -> list[bytes]:
    """The receive buffers' bytes from the same call of plain doubles (reversed where a
    ``rev`` type receives)."""
    types = Types()
    try:
        _, plain, outs = build(coll, variant, u, root, types)
        getattr(WORLD, METHOD[coll])(*plain)
        return [o.want().tobytes() for o in outs]
    finally:
        types.free()


@pytest.mark.mpi
@pytest.mark.timeout(240)
@pytest.mark.parametrize(("coll", "variant"), [
    pytest.param(c, v, id=f"{c}-{v}") for c in COLLECTIVES for v in VARIANTS
    if v != "zero" or c in ("scatter", "scatterv", "alltoall", "alltoallv")])  # (zero: sends)
def test_block_side_of_extent_at_most_zero(p2p: Any, native: Any, coll: str,
                                           variant: str) -> None:
    """p2p (every algorithm, auto in every form) and native give plain mpi4py's bytes, which
    are the values written out, on every rank."""
    rooted = coll in ("scatter", "scatterv", "gather", "gatherv")
    for root in sorted({0, P - 1}) if rooted else [0]:
        for u in (0, 1, 3):
            want = _written_out(coll, variant, u, root)
            if not (OPEN_MPI and variant in ("rev", "mixed") and not coll.startswith("scatter")):
                # (Open MPI 5.0.11 aborts the job, signal 6, in Gather (a root other than 0)
                # and Allgather (P = 3) receiving into a type of negative extent: on Open MPI
                # p2p is checked against the values written out there)
                assert _one(WORLD, coll, variant, u, root) == want, ("plain", coll, u, root)
                assert _one(native, coll, variant, u, root) == want, ("native", coll, u, root)
            for alg in ["auto"] + [a.name for a in registry.algorithms(coll)]:
                forms = ["blocking", "replay", "I", "_init"] if alg == "auto" else ["blocking"]
                for form in forms:
                    kw = {} if alg == "auto" else {"algorithm": alg}
                    try:
                        got = _one(p2p, coll, variant, u, root, form, **kw)
                    except RestrictionError:
                        continue
                    assert got == want, (coll, variant, alg, form, root, u)


def _zero_receive(b: Any, dt: MPI.Datatype, **kw: Any) -> tuple[np.ndarray, Callable[[], None]]:
    """An Allgather whose receive side is a double of extent 0 on rank 0 (p blocks into one
    location), ``MPI.DOUBLE`` elsewhere."""
    out = np.full(2 * P, SENT)
    src = np.array([1.0, 2.0]) + 10 * RANK
    spec = [out, 2, dt] if RANK == 0 else out
    return out, lambda: b.Allgather(src, spec, **kw)


@pytest.mark.mpi
@pytest.mark.timeout(120)
def test_extent_zero_receive_goes_and_checked_mode_refuses(p2p: Any) -> None:
    """p blocks of an extent-0 type into one location (MPI: erroneous; MPICH writes them in
    arrival order): p2p completes on every rank with every algorithm, the location holds the
    last block's last element and the peers' results are right; checked mode refuses the
    call on every rank (ValueError where it was passed, MismatchError elsewhere), before any
    message (no buffer written)."""
    z = MPI.DOUBLE.Create_resized(0, 0).Commit()
    want = [v for r in range(P) for v in (1.0 + 10 * r, 2.0 + 10 * r)]
    try:
        for algorithm in ["auto"] + [a.name for a in registry.algorithms("allgather")]:
            kw = {} if algorithm == "auto" else {"algorithm": algorithm}
            out, call = _zero_receive(p2p, z, **kw)
            try:
                call()
            except RestrictionError:
                continue
            if RANK == 0:
                assert out[0] == want[-1], (algorithm, out)
                assert np.all(out[1:] == SENT), (algorithm, out)
            else:
                assert out.tolist() == want, algorithm
        for make in (lambda: mpicoll.p2p(WORLD, check=True),
                     lambda: mpicoll.native(WORLD, check=True)):
            b = make()
            try:
                out, call = _zero_receive(b, z)
                if P > 1:
                    with pytest.raises(ValueError if RANK == 0 else MismatchError):
                        call()
                    assert np.all(out == SENT)
                else:  # one block: one location written once
                    call()
                    assert out[0] == 2.0
            finally:
                b.Free()
    finally:
        z.Free()


@pytest.mark.mpi
@pytest.mark.timeout(120)
def test_bottom_with_extent_at_most_zero(p2p: Any, native: Any) -> None:
    """``[MPI.BOTTOM, count, t]`` with ``t`` a double at an absolute address of extent -8
    (its elements walk down from the last double of an array) or 0 (one double sent again
    and again), on the p-block side of Allgather (receive), Scatter and Alltoallv (send):
    plain mpi4py's bytes and the values written out, on p2p and native."""
    base = np.full(2 * P, SENT)
    last = MPI.Get_address(base[2 * P - 1 :])
    first = MPI.Get_address(base)
    one = MPI.Datatype.Create_struct([1], [last], [MPI.DOUBLE])
    down = one.Create_resized(last, -8).Commit()
    one.Free()
    one = MPI.Datatype.Create_struct([1], [first], [MPI.DOUBLE])
    still = one.Create_resized(first, 0).Commit()
    one.Free()
    try:
        for b in (WORLD, p2p, native):
            if b is p2p or not OPEN_MPI:  # (Open MPI aborts there: see above)
                base[:] = SENT
                b.Allgather(np.array([1.0, 2.0]) + 10 * RANK, [MPI.BOTTOM, 2, down])
                want = [v for r in range(P) for v in (1.0 + 10 * r, 2.0 + 10 * r)]
                assert base.tolist() == want[::-1], (b, base)
            base[:] = np.arange(2.0 * P) + 100 * RANK
            got = np.full(2, SENT)
            b.Scatter([MPI.BOTTOM, 2, down] if RANK == P - 1 else None, got, root=P - 1)
            assert got.tolist() == [100.0 * (P - 1) + 2 * P - 1 - k - 2 * RANK
                                    for k in range(2)], (b, got)
            got = np.full(P, SENT)
            b.Alltoallv([MPI.BOTTOM, ([1] * P, [0] * P), still], [got, [1] * P, MPI.DOUBLE])
            assert got.tolist() == [100.0 * r for r in range(P)], (b, got)
            WORLD.Barrier()
    finally:
        down.Free()
        still.Free()


@pytest.mark.mpi
@pytest.mark.timeout(120)
@pytest.mark.parametrize("kind", ["p2p", "native"])
def test_checked_mode_lets_them_go(kind: str) -> None:
    """Checked mode compares type signatures and counts, which these calls agree on: the
    blocks of extent <= 0 (``rev`` walking down, ``zero`` sent again and again, ``mixed``
    across ranks) pass its agreement and give the values written out."""
    b = mpicoll.p2p(WORLD, check=True) if kind == "p2p" else mpicoll.native(WORLD, check=True)
    try:
        for coll, variant in (("allgather", "rev"), ("scatterv", "zero"),
                              ("alltoallv", "mixed"), ("gatherv", "mixed")):
            if kind == "native" and OPEN_MPI and variant != "zero":
                continue  # (Open MPI's own collectives on a negative extent: see above)
            for u in (0, 3):
                want = _written_out(coll, variant, u, P - 1)
                assert _one(b, coll, variant, u, P - 1) == want, (coll, variant, u)
    finally:
        b.Free()


@pytest.mark.mpi
@pytest.mark.timeout(120)
def test_in_place_with_blocks_walking_down(p2p: Any) -> None:
    """``MPI.IN_PLACE`` with a receive side of extent -8 (the input read from the blocks of
    the receive buffer, which walk down it): Allgather, Alltoall and the root's Gather give
    the values written out (the same in-place calls on plain doubles, reversed), on every
    algorithm."""
    n = 2
    m = n * P
    rev = rev_type(m)
    try:
        logical = np.arange(m, dtype=np.float64) + 100 * RANK
        calls: list[tuple[str, Callable[[Any, np.ndarray, MPI.Datatype, dict[str, Any]], None]]]
        calls = [
            ("allgather", lambda b, a, t, kw: b.Allgather(MPI.IN_PLACE, [a, n, t], **kw)),
            ("alltoall", lambda b, a, t, kw: b.Alltoall(MPI.IN_PLACE, [a, n, t], **kw)),
            ("gather", lambda b, a, t, kw: b.Gather(
                MPI.IN_PLACE if RANK == P - 1 else [a[n * RANK : n * RANK + n], n, MPI.DOUBLE],
                [a, n, t] if RANK == P - 1 else None, root=P - 1, **kw)),
        ]
        for coll, call in calls:
            plain = logical.copy()
            call(WORLD, plain, MPI.DOUBLE, {})
            for alg in ["auto"] + [a.name for a in registry.algorithms(coll)]:
                mine = logical[::-1].copy()
                src = logical.copy()
                try:
                    if coll == "gather" and RANK != P - 1:
                        call(p2p, src, rev, {} if alg == "auto" else {"algorithm": alg})
                        continue
                    call(p2p, mine, rev, {} if alg == "auto" else {"algorithm": alg})
                except RestrictionError:
                    continue
                assert mine.tolist() == plain[::-1].tolist(), (coll, alg)
    finally:
        rev.Free()
