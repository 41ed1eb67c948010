"""Buffer specs that reach outside their buffer, and overlapping receive blocks: p2p lets the
call go, as MPI does (issue 20; ``docs/errors.md``, "Which checks remain, and why").

Such a spec is one rank's own values (its count, its displacements, its datatype, its
buffer), which MPI does not require to agree: a refusal on that rank alone would leave its
peers inside the collective.  So on p2p (each case gives the values to one rank, the
*victim*: a middle rank, rank 0, the last rank; the others pass correct specs):

* a receive past its buffer: the call receives into a scratch of the declared size, keeps
  what fits, leaves the memory past the buffer alone, and the victim raises
  ``MPI_ERR_TRUNCATE`` at the end of the call; plain mpi4py on MPICH (given a slice of a
  larger array, so that its writes past the slice land in memory the test owns) completes
  silently and writes past the slice: inside the slice its bytes are p2p's, and the peers
  get the same results on both;
* a send past a slice of a larger array: the call sends that memory, as MPI does: every
  buffer on every rank as plain mpi4py leaves it, no error;
* a send past an array that owns its memory (MPI would read memory that is no buffer's): the
  victim sends zeros in its place and raises ``MPI_ERR_BUFFER`` at the end of the call; the
  peers complete (plain mpi4py is not run: it reads freed memory);
* an in-place ``Reduce_scatter`` whose recvbuf is shorter than the input: as a send;
* overlapping receive blocks (``Allgatherv``, the root's ``Gatherv``): the call completes on
  every rank, the peers' results are right and the victim's blocks are written in rank order;
* ``MPI.BOTTOM`` with negative displacements (absolute addresses): as plain mpi4py.

Every case runs blocking (three times: the generator, then the compiled replay), as an
I-form (twice) and persistent (started twice), under a per-test timeout (a hang fails it).
Checked mode refuses the bounds and overlap cases on every rank before any message
(:func:`test_checked_mode_refuses_on_every_rank`).

Run: ``mpiexec -n P python -m pytest --with-mpi tests/mpi/test_bounds.py`` (P = 1..5).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest
from mpi4py import MPI

import mpicoll
from mpicoll.engines.errors import MessageError

WORLD = MPI.COMM_WORLD
P = WORLD.Get_size()
RANK = WORLD.Get_rank()
N = P + 1  # each rank's count (per block), not divisible by P
SENT = -7.0  # what memory the call may not write holds
PAD = 4  # elements of the larger array past (and before) a slice
MPICH = "MPICH" in MPI.Get_library_version()

_BACKENDS: dict[str, Any] = {}


def p2p(check: bool = False) -> Any:
    key = f"p2p{check}"
    if key not in _BACKENDS:
        _BACKENDS[key] = mpicoll.p2p(WORLD, check=check)
    return _BACKENDS[key]


def _victims() -> list[int]:
    return sorted({P // 2, 0, P - 1})


@dataclass
class Case:
    """One rank's side of a call: the method and its arguments (buffers reused by every run),
    ``reset()`` before each run, ``want``: the whole of each watched array after the call on
    p2p (``None``: not compared), ``mpich``: the same after plain mpi4py (None: plain mpi4py
    is not run: it would read or write memory nobody owns), ``error``: the MPI error class
    this rank raises on p2p (None: it completes)."""

    method: str
    args: tuple[Any, ...]
    watch: list[np.ndarray]
    fills: list[np.ndarray]
    want: list[np.ndarray | None]
    mpich: list[np.ndarray | None] | None
    error: int | None = None
    kw: dict[str, Any] = field(default_factory=dict)

    def reset(self) -> None:
        for w, f in zip(self.watch, self.fills, strict=True):
            w[...] = f


def _src(rank: int, n: int = N) -> np.ndarray:
    return np.arange(n, dtype=np.float64) + 100 * rank


def _gathered() -> np.ndarray:
    return np.concatenate([_src(i) for i in range(P)])


def _place(base: np.ndarray, at: int, values: np.ndarray) -> np.ndarray:
    """``base`` with ``values`` written from element ``at`` (what MPI writes there)."""
    out = base.copy()
    out[at : at + values.size] = values
    return out


def _mask(full: np.ndarray, lo: int, hi: int) -> np.ndarray:
    """``full`` inside ``[lo, hi)``, SENT elsewhere: what p2p leaves in a base whose slice
    ``[lo, hi)`` was the receive buffer."""
    out = np.full(full.size, SENT)
    out[lo:hi] = full[lo:hi]
    return out


def _recv_case(method: str, spec: Callable[[np.ndarray], Any], length: int, lo: int, hi: int,
               writes: Callable[[np.ndarray], np.ndarray], other: Callable[[], Any],
               victim: bool, recv_first: bool = False, **kw: Any) -> Case:
    """A receive past a slice ``base[lo:hi]`` on the victim (``spec(base)`` its recvbuf spec,
    ``writes(base)`` the base as MPI leaves it); the others' arguments from ``other()``."""
    base = np.full(length, SENT)
    if not victim:
        return other()
    full = writes(base)
    args = (spec(base),) if recv_first else (kw.pop("sendbuf"), spec(base))
    return Case(method, (*args, *kw.pop("rest", ())), [base], [base.copy()],
                [_mask(full, lo, hi)], [full], MPI.ERR_TRUNCATE, kw)


def _ok(method: str, args: tuple[Any, ...], outs: list[np.ndarray], wants: list[np.ndarray],
        **kw: Any) -> Case:
    return Case(method, args, outs, [o.copy() for o in outs], list(wants), list(wants), None,
                kw)


# ---- receives past the buffer ---------------------------------------------------------------


def bcast_recv(v: int) -> Case | None:
    if P < 2:
        return None
    root = 0 if v != 0 else P - 1
    if root == RANK:
        buf = _src(0)
        return _ok("Bcast", (buf, root), [buf], [_src(0)])
    if v != RANK:
        out = np.full(N, SENT)
        return _ok("Bcast", (out, root), [out], [_src(0)])
    return _recv_case("Bcast", lambda b: [b[: N - 1], N, MPI.DOUBLE], N + PAD, 0, N - 1,
                      lambda b: _place(b, 0, _src(0)), lambda: None, True, recv_first=True,
                      rest=(root,))


def gatherv_recv(v: int) -> Case | None:
    root = v
    if root != RANK:
        return _ok("Gatherv", (_src(RANK), None, root), [], [])
    total = N * P
    return _recv_case("Gatherv", lambda b: [b[: total - 1], [N] * P, None, MPI.DOUBLE],
                      total + PAD, 0, total - 1, lambda b: _place(b, 0, _gathered()),
                      lambda: None, True, sendbuf=_src(RANK), rest=(root,))


def allgather_recv(v: int) -> Case | None:
    total = N * P
    if v != RANK:
        out = np.full(total, SENT)
        return _ok("Allgather", (_src(RANK), out), [out], [_gathered()])
    return _recv_case("Allgather", lambda b: [b[: total - 1], N, MPI.DOUBLE], total + PAD, 0,
                      total - 1, lambda b: _place(b, 0, _gathered()), lambda: None, True,
                      sendbuf=_src(RANK))


def _alltoall_send(rank: int) -> np.ndarray:
    return np.arange(N * P, dtype=np.float64) + 1000 * rank


def _alltoall_got(rank: int) -> np.ndarray:
    return np.concatenate([_alltoall_send(i)[rank * N : (rank + 1) * N] for i in range(P)])


def alltoallv_recv_negative(v: int) -> Case | None:
    """The victim's receive blocks one element before its slice (block 0 at -1)."""
    if v != RANK:
        out = np.full(N * P, SENT)
        return _ok("Alltoallv", ([_alltoall_send(RANK), [N] * P, MPI.DOUBLE], out), [out],
                   [_alltoall_got(RANK)])
    displs = [k * N - 1 for k in range(P)]
    return _recv_case("Alltoallv",
                      lambda b: [b[1 : 1 + N * P], ([N] * P, displs), MPI.DOUBLE], N * P + 2,
                      1, 1 + N * P, lambda b: _place(b, 0, _alltoall_got(RANK)), lambda: None,
                      True, sendbuf=[_alltoall_send(RANK), [N] * P, MPI.DOUBLE])


_WIDE = MPI.DOUBLE.Create_resized(0, 16).Commit()  # one double every second slot


def allgather_recv_derived(v: int) -> Case | None:
    """A derived receive type whose typemap leaves the victim's slice (its holes untouched)."""
    total = N * P
    if v != RANK:
        out = np.full(total, SENT)
        return _ok("Allgather", (_src(RANK), out), [out], [_gathered()])

    def writes(b: np.ndarray) -> np.ndarray:
        out = b.copy()
        out[0 : 2 * total : 2] = _gathered()
        return out

    return _recv_case("Allgather", lambda b: [b[: 2 * total - 2], N, _WIDE], 2 * total + PAD,
                      0, 2 * total - 2, writes, lambda: None, True, sendbuf=_src(RANK))


def alltoallw_recv(v: int) -> Case | None:
    """The victim's last receive block past its slice (byte displacements)."""
    send = [_alltoall_send(RANK), ([N] * P, [8 * N * k for k in range(P)]),
            [MPI.DOUBLE] * P]
    if v != RANK:
        out = np.full(N * P, SENT)
        return _ok("Alltoallw", (send, [out, ([N] * P, [8 * N * k for k in range(P)]),
                                        [MPI.DOUBLE] * P]), [out], [_alltoall_got(RANK)])
    return _recv_case(
        "Alltoallw",
        lambda b: [b[: N * P - 1], ([N] * P, [8 * N * k for k in range(P)]), [MPI.DOUBLE] * P],
        N * P + PAD, 0, N * P - 1, lambda b: _place(b, 0, _alltoall_got(RANK)), lambda: None,
        True, sendbuf=send)


def scatter_recv(v: int) -> Case | None:
    if P < 2:
        return None
    root = 0 if v != 0 else P - 1
    whole = np.arange(N * P, dtype=np.float64)
    if root == RANK:
        out = np.full(N, SENT)
        return _ok("Scatter", (whole, out, root), [out], [whole[root * N : (root + 1) * N]])
    if v != RANK:
        out = np.full(N, SENT)
        return _ok("Scatter", (None, out, root), [out], [whole[RANK * N : (RANK + 1) * N]])
    return _recv_case("Scatter", lambda b: [b[: N - 1], N, MPI.DOUBLE], N + PAD, 0, N - 1,
                      lambda b: _place(b, 0, whole[RANK * N : (RANK + 1) * N]), lambda: None,
                      True, sendbuf=None, rest=(root,))


RECV_CASES = [bcast_recv, gatherv_recv, allgather_recv, alltoallv_recv_negative,
              allgather_recv_derived, alltoallw_recv, scatter_recv]


# ---- sends past the buffer ------------------------------------------------------------------


def allgather_send_slice(v: int) -> Case | None:
    """The victim sends N elements of a slice of N - 1: MPI reads the next element of the
    array it slices, and so does p2p."""
    out = np.full(N * P, SENT)
    if v != RANK:
        return _ok("Allgather", (_src(RANK), out), [out], [_gathered()])
    whole = _src(RANK, N + PAD)
    return _ok("Allgather", ([whole[: N - 1], N, MPI.DOUBLE], out), [out], [_gathered()])


def bcast_send_slice(v: int) -> Case | None:
    if v == RANK:
        whole = _src(0, N + PAD)
        return _ok("Bcast", ([whole[: N - 1], N, MPI.DOUBLE], v), [whole], [_src(0, N + PAD)])
    out = np.full(N, SENT)
    return _ok("Bcast", (out, v), [out], [_src(0)])


def alltoallv_send_negative_slice(v: int) -> Case | None:
    """The victim's send blocks start one element before its slice (MPI reads it there)."""
    out = np.full(N * P, SENT)
    if v != RANK:
        return _ok("Alltoallv", ([_alltoall_send(RANK), [N] * P, MPI.DOUBLE], out), [out],
                   [_alltoall_shifted(v)])
    whole = np.concatenate(([-1.0], _alltoall_send(RANK)))  # the slice starts at element 1
    displs = [k * N - 1 for k in range(P)]
    return _ok("Alltoallv", ([whole[1:], ([N] * P, displs), MPI.DOUBLE], out), [out],
               [_alltoall_shifted(v)])


def _alltoall_shifted(v: int) -> np.ndarray:
    """What this rank receives when rank v sends its blocks from one element earlier (the
    element before its slice is -1)."""
    got = _alltoall_got(RANK)
    block = np.concatenate(([-1.0], _alltoall_send(v)))[RANK * N : RANK * N + N]
    got[v * N : v * N + N] = block
    return got


def reduce_scatter_in_place_slice(v: int) -> Case | None:
    """In-place Reduce_scatter: the victim's recvbuf holds its own block only (a slice of
    the whole input): MPI reads the input from the array it slices, and so does p2p."""
    want = sum(np.arange(N * P, dtype=np.float64) + i for i in range(P))[RANK * N :][:N]
    whole = np.arange(N * P, dtype=np.float64) + RANK
    buf = whole[:N] if v == RANK else whole
    return Case("Reduce_scatter", (MPI.IN_PLACE, buf, [N] * P), [whole], [whole.copy()],
                [None], None, None, {"_head": want})


SEND_CASES = [allgather_send_slice, bcast_send_slice, alltoallv_send_negative_slice]


def allgather_send_owned(v: int) -> Case | None:
    """The victim sends N elements of an array of N - 1 that owns its memory: zeros in place
    of the last, MPI_ERR_BUFFER at the end of the call on the victim."""
    out = np.full(N * P, SENT)
    got = _gathered()
    got[v * N + N - 1] = 0.0
    if v != RANK:
        return Case("Allgather", (_src(RANK), out), [out], [out.copy()], [got], None, None)
    mine = _src(RANK, N - 1)
    return Case("Allgather", ([mine, N, MPI.DOUBLE], out), [out], [out.copy()], [got], None,
                MPI.ERR_BUFFER)


def gatherv_send_owned(v: int) -> Case | None:
    root = 0 if v != 0 else P - 1
    got = _gathered()
    got[v * N + N - 1] = 0.0
    out = np.full(N * P, SENT)
    send = [_src(RANK, N - 1), N, MPI.DOUBLE] if v == RANK else _src(RANK)
    recv = [out, [N] * P, None, MPI.DOUBLE] if root == RANK else None
    return Case("Gatherv", (send, recv, root), [out], [out.copy()],
                [got if root == RANK else None], None, MPI.ERR_BUFFER if v == RANK else None)


def reduce_scatter_in_place_owned(v: int) -> Case | None:
    """In-place Reduce_scatter whose recvbuf owns only the victim's block: the rest of its
    input is zeros, MPI_ERR_BUFFER at the end of the call on the victim."""
    if P < 2:  # needs a second block
        return None
    inputs = [np.arange(N * P, dtype=np.float64) + i for i in range(P)]
    inputs[v][N:] = 0.0
    want = sum(inputs)[RANK * N :][:N]
    buf = inputs[RANK].copy() if v != RANK else inputs[v][:N].copy()
    fill = buf.copy()
    return Case("Reduce_scatter", (MPI.IN_PLACE, buf, [N] * P), [buf], [fill],
                [None], None, MPI.ERR_BUFFER if v == RANK else None, {"_head": want})


OWNED_CASES = [allgather_send_owned, gatherv_send_owned, reduce_scatter_in_place_owned]


# ---- overlapping receive blocks, MPI.BOTTOM with negative displacements --------------------


def allgatherv_overlap(v: int) -> Case | None:
    """The victim's receive blocks overlap by one element each: written in rank order."""
    if P < 2:  # needs a second block
        return None
    if v != RANK:
        out = np.full(N * P, SENT)
        return Case("Allgatherv", (_src(RANK), [out, [N] * P, None, MPI.DOUBLE]), [out],
                    [out.copy()], [_gathered()], None, None)
    step = N - 1
    out = np.full(step * P + 1, SENT)
    want = out.copy()
    for i in range(P):
        want[i * step : i * step + N] = _src(i)
    return Case("Allgatherv", (_src(RANK), [out, ([N] * P, [i * step for i in range(P)]),
                                            MPI.DOUBLE]), [out], [out.copy()], [want], None,
                None)


def gatherv_overlap(v: int) -> Case | None:
    if P < 2:  # needs a second block
        return None
    if v != RANK:
        return Case("Gatherv", (_src(RANK), None, v), [], [], [], None, None)
    out = np.full(N + P, SENT)
    want = out.copy()
    for i in range(P):
        want[i : i + N] = _src(i)
    return Case("Gatherv", (_src(RANK), [out, ([N] * P, list(range(P))), MPI.DOUBLE], v),
                [out], [out.copy()], [want], None, None)


OVERLAP_CASES = [allgatherv_overlap, gatherv_overlap]


# ---- running them ---------------------------------------------------------------------------


def _run(backend: Any, case: Case, form: str) -> list[BaseException | None]:
    """The exceptions of each run of ``case`` in ``form`` (the buffers reset before each)."""
    out: list[BaseException | None] = []

    def attempt(fn: Callable[[], Any], reset: bool = True) -> None:
        if reset:
            case.reset()
        try:
            fn()
            out.append(None)
        except Exception as exc:
            out.append(exc)

    name, args = case.method, case.args
    if form == "blocking":
        for _ in range(3):
            attempt(lambda: getattr(backend, name)(*args))
    elif form == "I":
        for _ in range(2):
            attempt(lambda: getattr(backend, "I" + name[0].lower() + name[1:])(*args).Wait())
    else:
        req = getattr(backend, name + "_init")(*args)
        try:
            for _ in range(2):
                case.reset()
                req.Start()
                attempt(req.Wait, reset=False)
        finally:
            req.Free()
    return out


def _problems(case: Case, errors: list[BaseException | None], what: str) -> list[str]:
    problems = []
    for k, exc in enumerate(errors):
        if case.error is None and exc is not None:
            problems.append(f"{what} run {k}: raised {exc!r}")
        elif case.error is not None:
            if not isinstance(exc, MPI.Exception):
                problems.append(f"{what} run {k}: raised {exc!r}, expected MPI error class "
                                f"{case.error}")
            elif exc.Get_error_class() != case.error:
                problems.append(f"{what} run {k}: error class {exc.Get_error_class()}, "
                                f"expected {case.error}: {exc}")
            elif not isinstance(exc, MessageError) or case.method not in str(exc):
                problems.append(f"{what} run {k}: unreadable {exc!r}")
    for i, (w, want) in enumerate(zip(case.watch, case.want, strict=True)):
        if want is not None and not np.array_equal(w, want):
            problems.append(f"{what}: buffer {i} is {w.tolist()}, expected {want.tolist()}")
    head = case.kw.get("_head")
    if head is not None and not np.array_equal(case.watch[0][: head.size], head):
        problems.append(f"{what}: result {case.watch[0].tolist()}, expected {head.tolist()}")
    return problems


def _agree(problems: list[str], what: str) -> None:
    everyone = WORLD.allgather(problems)
    lines = [f"rank {r}: {m}" for r, ps in enumerate(everyone) for m in ps]
    assert not lines, f"{what}:\n" + "\n".join(lines)


def _check(make: Callable[[int], Case | None]) -> None:
    backend = p2p()
    problems: list[str] = []
    ran = False
    for v in _victims():
        for form in ("blocking", "I", "_init"):
            case = make(v)
            if case is None:
                break
            ran = True
            problems += _problems(case, _run(backend, case, form), f"victim {v} {form}")
        WORLD.Barrier()
    # the same backend goes on right
    r = np.zeros(3)
    backend.Allreduce(np.full(3, RANK + 1.0), r)
    if not np.array_equal(r, np.full(3, P * (P + 1) / 2)):
        problems.append(f"the next Allreduce gave {r.tolist()}")
    _agree(problems, make.__name__)
    if not ran:
        pytest.skip(f"{make.__name__} needs a peer")


def _check_plain(make: Callable[[int], Case | None]) -> None:
    """Plain mpi4py on the same inputs: it completes on every rank (MPICH writes past a
    receive slice, reads past a send slice, into the arrays they slice), and leaves every
    watched array as ``case.mpich`` says."""
    problems: list[str] = []
    for v in _victims():
        case = make(v)
        if case is None:
            return
        assert case.mpich is not None
        case.reset()
        try:
            getattr(WORLD, case.method)(*case.args)
        except Exception as exc:
            problems.append(f"victim {v}: plain mpi4py raised {exc!r}")
        for i, (w, want) in enumerate(zip(case.watch, case.mpich, strict=True)):
            if want is not None and not np.array_equal(w, want):
                problems.append(f"victim {v}: plain mpi4py left buffer {i} as {w.tolist()}, "
                                f"expected {want.tolist()}")
    _agree(problems, f"plain mpi4py: {make.__name__}")


def _ids(cases: list[Callable[[int], Case | None]]) -> list[Any]:
    return [pytest.param(c, id=c.__name__) for c in cases]


@pytest.mark.mpi
@pytest.mark.timeout(90)
@pytest.mark.parametrize("make", _ids(RECV_CASES))
def test_receive_past_the_buffer_truncates(make: Callable[[int], Case | None]) -> None:
    """The victim keeps what fits and raises MPI_ERR_TRUNCATE at the end; the peers complete
    with the right results; nothing past the victim's slice is written; no rank hangs."""
    _check(make)


@pytest.mark.skipif(not MPICH, reason="the reference is MPICH's")
@pytest.mark.mpi
@pytest.mark.timeout(90)
@pytest.mark.parametrize("make", _ids(RECV_CASES + SEND_CASES))
def test_plain_mpi4py_on_the_same_inputs(make: Callable[[int], Case | None]) -> None:
    """Plain mpi4py (MPICH) completes these calls on every rank, silently, writing or reading
    past the slices into the arrays they slice: inside the victim's slice, and on every
    peer, its results are p2p's (the expectations both tests share)."""
    _check_plain(make)


@pytest.mark.mpi
@pytest.mark.timeout(90)
@pytest.mark.parametrize("make", _ids(SEND_CASES))
def test_send_past_a_slice_reads_as_mpi(make: Callable[[int], Case | None]) -> None:
    """A send spec past a slice reads the array it slices, as MPI does: no error anywhere,
    every result as plain mpi4py's."""
    _check(make)


@pytest.mark.mpi
@pytest.mark.timeout(90)
def test_in_place_reduce_scatter_past_a_slice() -> None:
    """An in-place Reduce_scatter whose recvbuf is the victim's block of a larger array: the
    input is read from that array (as MPI reads it), the result is right on every rank."""
    _check(reduce_scatter_in_place_slice)


@pytest.mark.mpi
@pytest.mark.timeout(90)
@pytest.mark.parametrize("make", _ids(OWNED_CASES))
def test_send_past_an_owned_array_sends_zeros(make: Callable[[int], Case | None]) -> None:
    """A send past an array that owns its memory: the victim sends zeros in place of the
    missing memory and raises MPI_ERR_BUFFER at the end of the call; the peers complete with
    those zeros; no rank hangs."""
    _check(make)


@pytest.mark.mpi
@pytest.mark.timeout(90)
@pytest.mark.parametrize("make", _ids(OVERLAP_CASES))
def test_overlapping_receive_blocks_go(make: Callable[[int], Case | None]) -> None:
    """Overlapping receive blocks on the victim only: every rank completes, the peers'
    results are right, the victim's blocks are written in rank order."""
    _check(make)


@pytest.mark.mpi
@pytest.mark.timeout(90)
def test_checked_mode_refuses_on_every_rank() -> None:
    """Checked mode refuses a spec past the buffer, and overlapping receive blocks, on every
    rank before any message (``MismatchError`` on the peers, the victim's own ValueError)."""
    backend = p2p(check=True)
    for make in (allgather_recv, allgatherv_overlap, allgather_send_owned):
        for v in _victims():
            case = make(v)
            if case is None:
                continue
            before = [w.copy() for w in case.watch]
            with pytest.raises(ValueError) as info:
                getattr(backend, case.method)(*case.args)
            if v == RANK:
                assert not isinstance(info.value, mpicoll.MismatchError), info.value
            else:
                assert isinstance(info.value, mpicoll.MismatchError), info.value
            for w, b in zip(case.watch, before, strict=True):
                assert np.array_equal(w, b)
    r = np.zeros(3)
    backend.Allreduce(np.full(3, RANK + 1.0), r)
    assert np.array_equal(r, np.full(3, P * (P + 1) / 2))


@pytest.mark.mpi
@pytest.mark.timeout(90)
def test_bottom_with_negative_displacements() -> None:
    """``[MPI.BOTTOM, (counts, displs), t]`` with ``t`` one double at an absolute address and
    displacements below 0 (legal absolute addresses): the same bytes as plain mpi4py, on the
    receive and on the send side."""
    base = np.full(3 * P + 2, SENT)
    mid = P + 1
    at = MPI.Get_address(base[mid:])
    one = MPI.Datatype.Create_struct([1], [at], [MPI.DOUBLE])
    t = one.Create_resized(at, 8).Commit()  # element d: the double at at + 8 d
    one.Free()
    try:
        displs = [i - P for i in range(P)]  # blocks mid - P .. mid - 1
        outs = {}
        for name, b in (("plain", WORLD), ("p2p", p2p())):
            base[:] = SENT
            b.Allgatherv(np.array([100.0 + RANK]), [MPI.BOTTOM, ([1] * P, displs), t])
            outs[name] = base.copy()
        want = np.full(base.size, SENT)
        want[mid - P : mid] = 100.0 + np.arange(P)
        assert np.array_equal(outs["plain"], want), outs["plain"]
        assert np.array_equal(outs["p2p"], want), outs["p2p"]
        # the send side: every rank sends base[mid - 1] (displacement -1) to every rank
        base[mid - 1] = 7.0 + RANK
        got = np.zeros(P)
        p2p().Alltoallv([MPI.BOTTOM, ([1] * P, [-1] * P), t], [got, [1] * P, MPI.DOUBLE])
        assert np.array_equal(got, 7.0 + np.arange(P)), got
    finally:
        t.Free()


@pytest.mark.mpi
@pytest.mark.timeout(90)
def test_one_rank_alone_never_hangs() -> None:
    """Values one rank may hold alone (its own count, datatype, buffer kind): give them to
    one rank only; the call completes everywhere (or raises MPI's error on that rank at the
    end of the call), on p2p, with no refusal before any message."""
    backend = p2p()
    for v in _victims():
        # a bytearray receive buffer whose explicit count is past its end, on one rank only
        out: Any = np.zeros(N * P) if v != RANK else bytearray(8 * (N * P - 1))
        spec = [out, N, MPI.DOUBLE]
        try:
            backend.Allgather(_src(RANK), spec)
            raised = None
        except MPI.Exception as exc:
            raised = exc.Get_error_class()
        assert raised == (MPI.ERR_TRUNCATE if v == RANK else None)
        got = np.frombuffer(out, np.float64)
        assert np.array_equal(got, _gathered()[: got.size])
        # a derived datatype of the same signature on one rank only: completes
        three = MPI.DOUBLE.Create_contiguous(N).Commit()
        try:
            res = np.zeros(N * P)
            send = [_src(RANK), 1, three] if v == RANK else _src(RANK)
            backend.Allgather(send, res)
            assert np.array_equal(res, _gathered())
        finally:
            three.Free()


def _twins() -> tuple[MPI.Datatype, MPI.Datatype]:
    """A double of extent 0 and one of extent -8 (elements in decreasing address order)."""
    return (MPI.DOUBLE.Create_resized(0, 0).Commit(),
            MPI.DOUBLE.Create_resized(0, -8).Commit())


@pytest.mark.mpi
@pytest.mark.timeout(90)
def test_extent_zero_or_negative_one_block_as_mpi4py() -> None:
    """A one-block spec of a datatype of extent 0 or below (Bcast's root sending one double
    three times, Gather and Allgather sends walking down the memory, on one rank only for
    Allgather) goes on p2p, with plain mpi4py's bytes on every rank (MPICH's; elsewhere
    against the values written out)."""
    zero, neg = _twins()
    try:
        outs: dict[str, list[np.ndarray]] = {}
        runs = (("plain", WORLD), ("p2p", p2p())) if MPICH else (("p2p", p2p()),)
        for name, b in runs:
            got = []
            x = np.array([5.0, 6.0]) if RANK == 0 else np.zeros(3)
            b.Bcast([x, 3, zero] if RANK == 0 else x, root=0)
            got.append(x)
            y = np.array([1.0, 2.0, 3.0]) + 10 * RANK
            g = np.zeros(2 * P) if RANK == P - 1 else None
            b.Gather([y[1:], 2, neg], g, root=P - 1)
            if g is not None:
                got.append(g)
            a = np.zeros(2 * P)
            b.Allgather([y[1:], 2, neg] if RANK == P // 2 else y[1::-1].copy(), a)
            got.append(a)
            outs[name] = got
        for mine, theirs in zip(outs["p2p"], outs.get("plain", outs["p2p"]), strict=True):
            assert np.array_equal(mine, theirs), (mine, theirs)  # (the reference: MPICH)
        assert np.array_equal(outs["p2p"][0], [5.0, 6.0] if RANK == 0 else [5.0] * 3)
        assert np.array_equal(outs["p2p"][-1], np.ravel([[2.0 + 10 * i, 1.0 + 10 * i]
                                                          for i in range(P)]))
    finally:
        zero.Free()
        neg.Free()


def _user_sum(a: Any, b: Any, datatype: MPI.Datatype) -> None:
    x, y = np.frombuffer(a, np.float64), np.frombuffer(b, np.float64)
    y += x


@pytest.mark.mpi
@pytest.mark.timeout(90)
def test_remaining_checks_raise_on_every_rank_before_any_message() -> None:
    """The checks that remain outside checked mode read values every rank passes alike (or
    are mpi4py's own: tests/mpi/test_errors.py, at every P): given the refused value on every
    rank, every rank raises, no buffer changes, no message is left waiting, and the next
    call is right.  (A): a root outside the communicator, an op MPI does not define for the
    datatype, a reduction on a datatype of extent <= 0.  (A datatype of extent <= 0 on the
    block side of a collective goes now: tests/mpi/test_extent_blocks.py.)"""
    backend = p2p()
    zero, _neg = _twins()
    op = MPI.Op.Create(_user_sum, commute=True)
    try:
        cases: list[tuple[str, type[BaseException], Callable[[np.ndarray], Any]]] = [
            ("root", ValueError, lambda a: backend.Bcast(a[:2], root=P)),
            ("op", TypeError, lambda a: backend.Allreduce(a[:2], a[2:4], op=MPI.LAND)),
            ("extent in a reduction", TypeError,
             lambda a: backend.Allreduce([a[:1], 2, zero], [a[2:3], 2, zero], op=op)),
        ]
        for what, exc, call in cases:
            a = np.arange(4.0 + P)
            before = a.copy()
            with pytest.raises(exc):
                call(a)
            assert np.array_equal(a, before), what
            WORLD.Barrier()
            st = MPI.Status()
            assert not backend._comm.Iprobe(MPI.ANY_SOURCE, MPI.ANY_TAG, st), \
                (what, st.source, st.tag, st.Get_count(MPI.BYTE))
            WORLD.Barrier()  # every rank has probed before any sends again
        r = np.zeros(3)
        backend.Allreduce(np.full(3, RANK + 1.0), r)
        assert np.array_equal(r, np.full(3, P * (P + 1) / 2))
    finally:
        op.Free()
        zero.Free()
        _neg.Free()
