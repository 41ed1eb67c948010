"""A plain mpi4py script (no mpicoll in it) that makes one :class:`~.cases.Case` call.

``verify --native-algorithms`` writes one under every wrong native result: the MPI library's
bug, shown without mpicoll.  Each rank's part (:func:`rank_part`, made on that rank from the
case's own buffers and arguments) holds its initial send and receive buffers, its call as
source text (``comm.Igatherv(MPI.IN_PLACE, [recv, ([1, 0, 2], [0, 2, 4]), MPI.DOUBLE],
root=0).Wait()``), and the region of its output buffer with the values it must hold;
:func:`script` joins the parts of every rank into the script, which prints each rank's
first wrong element and exits 1 when any is wrong.  Predefined datatypes and ops only
(:func:`unsupported` says why not otherwise).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from .cases import Case, method_name

__all__ = ["command", "rank_part", "script", "unsupported"]

_OPS = {"sum": "SUM", "prod": "PROD", "max": "MAX", "min": "MIN", "land": "LAND",
        "lor": "LOR", "lxor": "LXOR", "band": "BAND", "bor": "BOR", "bxor": "BXOR"}


def unsupported(case: Case) -> str | None:
    """Why no reproducer can be written for ``case`` (derived or pair datatypes, user ops);
    None if it can."""
    if case.per_element != 1 or case.np_dtype.fields is not None:
        return f"dtype {case.dtype} (the reproducer handles predefined datatypes only)"
    if case.is_reduction and case.op not in _OPS:
        return f"op {case.op} (the reproducer handles predefined ops only)"
    return None


def _mpi_name(obj: Any) -> str:
    """``MPI.SUM`` for an op object; ``T`` for the datatype (the script's own, made from the
    NumPy dtype as mpi4py's ``dtlib.from_numpy_dtype`` makes it, which is what mpicoll
    passes)."""
    from mpi4py import MPI

    if isinstance(obj, MPI.Op):
        return next(f"MPI.{v}" for v in _OPS.values() if getattr(MPI, v) == obj)
    if isinstance(obj, MPI.Datatype):
        return "T"  # the script's dtlib.from_numpy_dtype(dt), as mpicoll makes it
    raise ValueError(f"no MPI name for {obj!r}")


def _render(arg: Any, bufs: dict[str, np.ndarray[Any, Any]]) -> str:
    from mpi4py import MPI

    if arg is None:
        return "None"
    if arg is MPI.IN_PLACE:
        return "MPI.IN_PLACE"
    if isinstance(arg, np.ndarray):
        for name, b in bufs.items():
            if arg is b:
                return name
        raise ValueError("an argument array that is not one of the case's buffers")
    if isinstance(arg, list | tuple):
        inner = ", ".join(_render(a, bufs) for a in arg)
        return f"[{inner}]" if isinstance(arg, list) else f"({inner}{',' if len(arg) == 1 else ''})"
    if isinstance(arg, int | float | str):
        return repr(arg)
    return _mpi_name(arg)


def rank_part(case: Case, nonblocking: bool) -> dict[str, Any]:
    """This rank's part of the reproducer of ``case`` (call it right after ``case.reset()``,
    before the call): initial buffers, the call as text, and the output region ``(buffer,
    start)`` with the values it must hold (``want``; None: no output on this rank)."""
    bufs = {k: v for k, v in case._b.items() if isinstance(v, np.ndarray)}
    args, kw = case.arguments()
    text = [_render(a, bufs) for a in args] + [f"{k}={_render(v, bufs)}" for k, v in kw.items()]
    call = f"comm.{method_name(case.collective, nonblocking)}({', '.join(text)})"
    if nonblocking:
        call += ".Wait()"
    out, want = case.output(), case.expected()
    region = None
    if out is not None and want is not None:
        for name, b in bufs.items():
            if np.shares_memory(out, b):
                start = (out.__array_interface__["data"][0]
                         - b.__array_interface__["data"][0]) // b.itemsize
                region = (name, int(start))
    return {"rank": case.rank, "dtype": str(case.np_dtype),
            "init": {k: v.tolist() for k, v in bufs.items()}, "call": call, "region": region,
            "want": None if want is None or region is None else want.tolist()}


def script(parts: Sequence[dict[str, Any]], title: str) -> str:
    """The reproducer: ``parts`` of every rank (rank order), ``title`` its first comment."""
    p = len(parts)
    lines = [f"# {line}" for line in title.splitlines()]
    lines += ["# Plain mpi4py; run with exactly the ranks below.", "import sys", "",
              "import numpy as np", "from mpi4py import MPI", "from mpi4py.util import dtlib", "",
              "comm = MPI.COMM_WORLD", "r = comm.Get_rank()",
              f"assert comm.Get_size() == {p}, 'run with mpiexec -n {p}'",
              f"dt = np.dtype({parts[0]['dtype']!r})", "T = dtlib.from_numpy_dtype(dt)",
              "ok = True"]
    for k, part in enumerate(parts):
        lines.append(f"{'if' if k == 0 else 'elif'} r == {part['rank']}:")
        for name, values in part["init"].items():
            lines.append(f"    {name} = np.array({values!r}, dtype=dt)")
        lines.append(f"    {part['call']}")
        if part["region"] is not None:
            name, start = part["region"]
            want = part["want"]
            lines.append(f"    got = {name}[{start}:{start + len(want)}]")
            lines.append(f"    want = np.array({want!r}, dtype=dt)")
            lines.append("    ok = np.array_equal(got, want)")
    lines += ["if not ok:",
              "    k = int(np.flatnonzero(got != want)[0]) if got.shape == want.shape else -1",
              "    print(f'rank {r}: WRONG at index {k}: got {got.tolist()}, expected "
              "{want.tolist()}', flush=True)",
              "ok = comm.allreduce(ok, op=MPI.LAND)",
              "if r == 0:",
              "    print('all ranks right' if ok else 'wrong result (see above)', flush=True)",
              "sys.exit(0 if ok else 1)", ""]
    return "\n".join(lines)


def command(p: int, path: str, env: dict[str, str], flags: Sequence[str]) -> str:
    """The shell command that runs the reproducer at ``path`` with the launch's settings."""
    import shlex

    head = " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items())
    return " ".join(x for x in (head, "mpiexec", *map(shlex.quote, flags), "-n", str(p),
                                "python", shlex.quote(path)) if x)
