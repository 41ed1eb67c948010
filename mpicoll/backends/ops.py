"""The op of a reduction call, checked before any message.

The combines themselves are :meth:`mpicoll.algorithms.schedule.Context.reduce`, through
``op.Reduce_local(inbuf, inoutbuf)`` (``inoutbuf = inbuf op inoutbuf``: the *in* buffer is the
left operand), so every predefined op, MAXLOC/MINLOC and user op has MPI's own semantics;
schedules that reduce non-commutative ops keep lower ranks on the left.
"""

from __future__ import annotations

import numpy as np
from mpi4py import MPI

from ..algorithms.datatypes import is_derived, typed_scratch
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

    A predefined op is probed with ``Reduce_local`` on one zeroed element (once per process for
    a predefined datatype: the answer is cached by the two handles), so the rules are exactly
    the MPI library's (logical ops on floats, SUM on pair types, MAXLOC on plain types are all
    refused; so is every predefined op on a derived datatype, by MPICH 5 and Open MPI 5, whose
    ``MPI_Reduce_local`` and collectives raise ``MPI_ERR_OP`` for them).  User ops are
    accepted as given.

    Check (A): MPI requires every rank to pass the same op and, for a reduction, the same
    datatype, so every rank reaches the same answer without communicating.

    Raises:
        TypeError: ``op`` is not an ``MPI.Op``, or MPI does not define it for ``datatype``.
    """
    if not isinstance(op, MPI.Op) or op == MPI.OP_NULL:
        raise TypeError(f"op: expected an MPI.Op (MPI.SUM, MPI.MAX, ...), got {op!r}")
    if op in (MPI.REPLACE, MPI.NO_OP):
        raise TypeError(f"op: {op_name(op)} is for one-sided operations, not collectives")
    if op.is_predefined:
        # a predefined op on a predefined type: MPI's answer never changes, so it is probed
        # once per process (derived types' handles can be reused after Free: probed each time)
        key = (op.handle, datatype.handle) if datatype.is_predefined else None
        if key is not None and key in _ACCEPTED:
            return op
        if is_derived(datatype):  # one element's typemap (MPICH and Open MPI refuse them all)
            a, b = typed_scratch(1, datatype), typed_scratch(1, datatype)
        else:
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
        if key is not None:
            _ACCEPTED.add(key)
    return op


#: (op handle, datatype handle) of the predefined pairs MPI accepted (see :func:`check_op`)
_ACCEPTED: set[tuple[int, int]] = set()

