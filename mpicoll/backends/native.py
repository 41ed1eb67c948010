"""The native backend: every collective delegated to the MPI library through mpi4py.

Outside checked mode a native method is one Python call in front of mpi4py's: it accepts
``algorithm=None``/``"native"`` (any other name is refused before any message), then hands the
user's own arguments, unchanged, to the method of the same name of the user's communicator
(``comm.Allreduce(sendbuf, recvbuf, op)``).  mpi4py parses and checks the buffer specs, and MPI
matches the ranks' type signatures, so whatever plain mpi4py completes completes here, and
whatever it refuses is refused here with the same exception type on the same ranks.  Only when
mpi4py raises does mpicoll look at the arguments (its parser, :data:`mpicoll.backends.args.
PARSERS`): if the parser refuses them with an exception of the same kind (the same class or a
subclass of mpi4py's; for an ``MPI.Exception`` the same error class), that clearer message is
raised instead, chained to mpi4py's (``__cause__``); otherwise mpi4py's exception goes up as it
is.  Checked mode (``check=True`` or ``$MPICOLL_CHECK=1``) runs the whole front door of
:class:`~mpicoll.backends.base.Collectives` instead: the ranks agree on every call, then the
parsed call goes to the same mpi4py method.

The thin methods are made here from the signatures and docstrings of
:class:`~mpicoll.backends.base.Collectives` (one source for both backends): a plain Python
function per method, with mpi4py's positional parameters and defaults and the keyword-only
``algorithm=``, costs one call frame more than mpi4py (about 0.1-0.2 us), less than any
wrapper taking ``*args, **kwargs``.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from types import MethodType
from typing import Any

import mpi4py
from mpi4py import MPI

from ..algorithms.collectives import BY_NAME, NAMES
from .args import PARSERS, Call
from .base import Collectives
from .buffers import ARG_ERRORS
from .checked import agree_on_construction, check_algorithm_type
from .objects import NativeObjects

__all__ = ["Native", "native"]


def _refuse_algorithm(algorithm: Any) -> None:
    """``algorithm=`` on the native backend: None or ``"native"``; anything else raises
    (before any message).

    Raises:
        TypeError: not a str.
        ValueError: a name other than ``"native"`` (a hand-rolled algorithm: use p2p).
    """
    check_algorithm_type(algorithm)
    if algorithm != "native":
        raise ValueError(
            f"algorithm: the native backend runs MPI's own algorithm; got {algorithm!r} "
            "(use mpicoll.p2p to choose one)"
        )


def _same_kind(mine: BaseException, theirs: BaseException) -> bool:
    """Whether mpicoll's refusal ``mine`` may stand for mpi4py's ``theirs``: an instance of
    its class (so every ``except`` that catches mpi4py's catches it), and for an
    ``MPI.Exception`` the same error class."""
    if not isinstance(mine, type(theirs)):
        return False
    if isinstance(theirs, MPI.Exception):
        return mine.Get_error_class() == theirs.Get_error_class()  # type: ignore[attr-defined]
    return True


def _explain(backend: Native, exc: Exception, collective: str, args: tuple[Any, ...]) -> None:
    """mpi4py raised ``exc`` on this rank: raise mpicoll's parser's refusal of the same
    arguments instead if it is of the same kind (:func:`_same_kind`; chained to ``exc``),
    else return (the caller re-raises ``exc``).  Runs on the error path only, and sends
    nothing."""
    if collective == "reduce_scatter" and args[2] is None:
        return  # the counts mpi4py gathered are not known here
    try:
        PARSERS[collective](backend.size, backend.rank, *args)
    except ARG_ERRORS as mine:
        if _same_kind(mine, exc):
            raise mine from exc
    except Exception:
        return


#: the collective and form of each thin method: name -> (collective, persistent)
_METHODS: dict[str, tuple[str, bool]] = {}
for _name in NAMES:
    _rec = BY_NAME[_name]
    _METHODS[_rec.method] = _METHODS[_rec.nonblocking] = (_name, False)
    _METHODS[_rec.persistent] = (_name, True)

_NOTE = """

        Native backend: ``comm.{name}`` of mpi4py on the user's communicator, given these
        arguments unchanged (errors as plain mpi4py raises them: see :class:`Native`)."""


def _thin(name: str, collective: str, persistent: bool) -> Callable[..., Any]:
    """The native method ``name``: the signature of ``Collectives.<name>``, whose positional
    parameters go straight to ``self.comm.<name>`` (see the module docstring)."""
    shared = getattr(Collectives, name)
    sig = inspect.signature(shared)
    params = [p for p in sig.parameters.values()
              if p.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD and p.name != "self"]
    names = [p.name for p in params]
    parsed = [n for n in names if n != "info"] if persistent else names
    listed = ", ".join(names)
    listed_parsed = "".join(f"{n}, " for n in parsed)
    source = (
        f"def {name}(self{', ' if names else ''}{listed}, *, algorithm):\n"
        f"    if algorithm is not None:\n"
        f"        _refuse_algorithm(algorithm)\n"
        f"    try:\n"
        f"        return self.comm.{name}({listed})\n"
        f"    except Exception as exc:\n"
        f"        _explain(self, exc, {collective!r}, ({listed_parsed}))\n"
        f"        raise\n"
    )
    scope: dict[str, Any] = {"_refuse_algorithm": _refuse_algorithm, "_explain": _explain}
    exec(compile(source, f"<mpicoll.native.{name}>", "exec"), scope)
    fn = scope[name]
    fn.__defaults__ = tuple(p.default for p in params if p.default is not p.empty) or None
    fn.__kwdefaults__ = {"algorithm": None}
    fn.__doc__ = (shared.__doc__ or "") + _NOTE.format(name=name)
    fn.__qualname__ = f"Native.{name}"
    fn.__module__ = __name__
    fn.__signature__ = sig
    return fn


def _make_commctx(comm: MPI.Comm) -> None:
    """Make mpi4py's private duplicate of ``comm`` now (collective over ``comm``), the one its
    object reductions (``reduce``, ``allreduce``, ``scan``, ``exscan`` under
    ``mpi4py.rc.fast_reduce``) would otherwise make at their first call: mpi4py makes it with
    ``MPI_Comm_dup`` while holding the GIL, so threads whose first object calls on different
    communicators meet it in different orders on different ranks deadlock.  Done through
    mpi4py's ``MPI._commctx_intra`` (it also takes one tag of that duplicate on every rank
    alike); nothing where this mpi4py lacks it or ``fast_reduce`` is off."""
    make = getattr(MPI, "_commctx_intra", None)
    if make is not None and isinstance(comm, MPI.Intracomm) and \
            getattr(mpi4py.rc, "fast_reduce", True):
        make(comm)


class Native(NativeObjects, Collectives):
    """MPI's own collectives (``MPI_Allreduce``, ``MPI_Iallgather``, ...) through mpi4py, with
    nothing added outside checked mode.  Non-blocking methods return the ``MPI.Request``
    itself, persistent ones the ``MPI.Prequest``.

    Args:
        comm: any intracommunicator (``COMM_WORLD``, ``Split`` results, ``COMM_SELF``).
        check: checked mode (default ``$MPICOLL_CHECK``).

    Outside checked mode each buffer method (blocking, ``I...``, ``..._init``) hands its
    arguments unchanged to the mpi4py method of the same name on ``comm``: it costs what plain
    mpi4py costs plus one Python call, and it follows mpi4py exactly. Whatever plain mpi4py
    completes completes (type signatures are matched by MPI: a derived send type against a
    predefined receive type of the same signature works; zero-size and extent-0 datatypes go
    to MPI), and whatever plain mpi4py refuses raises the same exception type on the same
    ranks (mpi4py's checks of the buffer specs; MPI's errors as ``MPI.Exception``).  Where
    mpicoll's own parser refuses the same arguments with an exception of that kind, its
    message (which names the argument and the sizes) is raised instead, chained to mpi4py's.
    Only ``algorithm=`` is mpicoll's: None or ``"native"``; any other name raises
    ``ValueError`` (a non-str ``TypeError``) on the calling rank before any message.

    Checked mode: every call goes through the front door of
    :class:`~mpicoll.backends.base.Collectives` (parsed, agreed across ranks, every rank
    raising :class:`~mpicoll.MismatchError` on a disagreement) before the mpi4py call.

    Owns no communicator: :meth:`Free` and leaving a ``with`` block do nothing (they exist so
    that code can switch between the backends without changes).

    Constructing it is collective over ``comm`` (as for p2p): the ranks compare their check
    flags in one small allgather, and all raise :class:`~mpicoll.MismatchError` if they differ
    (one rank checking while the others do not would hang at its first call).  It also makes
    mpi4py's private duplicate of ``comm`` for the lower-case object methods there, so that
    threads running object collectives on different communicators never meet that
    ``MPI_Comm_dup`` in different orders (see ``docs/threads.md``).
    """

    name = "native"

    def __init__(self, comm: MPI.Comm, *, check: bool | None = None) -> None:
        super().__init__(comm, check=check)
        agree_on_construction(comm, self.name, self.settings)
        _make_commctx(comm)
        if self.check:  # the front door's methods shadow the thin ones on this instance
            for method in _METHODS:
                setattr(self, method, MethodType(getattr(Collectives, method), self))

    def _runner(self, call: Call, nonblocking: bool, algorithm: str | None
                ) -> Callable[..., Any]:
        """Checked mode: the mpi4py method of the parsed, agreed call."""
        if algorithm is not None:
            _refuse_algorithm(algorithm)
        return getattr(self.comm, BY_NAME[call.collective].method_for(nonblocking))

    def _persistent(self, call: Call, algorithm: str | None, info: MPI.Info,
                    args: tuple[Any, ...]) -> Any:
        """Checked mode: mpi4py's persistent request of the parsed, agreed call."""
        if algorithm is not None:
            _refuse_algorithm(algorithm)
        return getattr(self.comm, BY_NAME[call.collective].persistent)(*args, info)

    def Free(self) -> None:
        """Nothing to free (the native backend owns no communicator)."""


for _method, (_coll, _persistent) in _METHODS.items():
    setattr(Native, _method, _thin(_method, _coll, _persistent))


def native(comm: MPI.Comm | None = None, *, check: bool | None = None) -> Native:
    """The native backend on ``comm`` (default ``MPI.COMM_WORLD``); collective over ``comm``
    (the ranks agree on checked mode: one small allgather).

    ``check=True`` (or ``$MPICOLL_CHECK=1``) turns on checked mode (see :class:`Native`)."""
    return Native(MPI.COMM_WORLD if comm is None else comm, check=check)
