"""The op of a reduction call, checked before any message.

The combines themselves are :meth:`mpicoll.algorithms.schedule.Context.reduce`, through
``op.Reduce_local(inbuf, inoutbuf)`` (``inoutbuf = inbuf op inoutbuf``: the *in* buffer is the
left operand), so every predefined op, MAXLOC/MINLOC and user op has MPI's own semantics;
schedules that reduce non-commutative ops keep lower ranks on the left.
"""

from __future__ import annotations

import numpy as np
from mpi4py import MPI

from .buffers import MPITypeError

__all__ = ["check_op", "op_name"]


def op_name(op: MPI.Op) -> str:
    """A readable name for an op (``MPI_SUM``, or ``user op`` for MPI.Op.Create results)."""
    for name in ("SUM", "PROD", "MAX", "MIN", "LAND", "LOR", "LXOR", "BAND", "BOR", "BXOR",
                 "MAXLOC", "MINLOC", "REPLACE", "NO_OP"):
        if op == getattr(MPI, name):
            return f"MPI.{name}"
    return "user op"


def check_op(op: object, datatype: MPI.Datatype, dtype: np.dtype) -> MPI.Op:
    """Check, before any message, that MPI defines ``op`` for ``datatype``.

    A predefined op is probed with ``Reduce_local`` on one zeroed element, so the rules are
    exactly the MPI library's (logical ops on floats, SUM on pair types, MAXLOC on plain types
    are all refused).  User ops are accepted as given.

    Raises:
        TypeError: ``op`` is not an ``MPI.Op``, or MPI does not define it for ``datatype``.
    """
    if not isinstance(op, MPI.Op) or op == MPI.OP_NULL:
        raise TypeError(f"op: expected an MPI.Op (MPI.SUM, MPI.MAX, ...), got {op!r}")
    if op in (MPI.REPLACE, MPI.NO_OP):
        raise TypeError(f"op: {op_name(op)} is for one-sided operations, not collectives")
    if op.is_predefined:
        a = np.zeros(1, dtype)
        b = np.zeros(1, dtype)
        try:
            op.Reduce_local([a, datatype], [b, datatype])
        except MPI.Exception:
            raise MPITypeError(
                MPI.ERR_OP,
                f"op: {op_name(op)} is not defined for datatype "
                f"{datatype.Get_name() or dtype} (MPI refuses it)"
            ) from None
    return op

