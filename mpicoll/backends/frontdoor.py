"""The front door's cache: a repeated call reuses its earlier parse (and, on p2p, its algorithm).

:meth:`mpicoll.backends.base.Collectives._call` looks each call up here before parsing it.  The
key holds everything the answer of a check or of the parse could depend on:

* the collective, blocking or not, and ``algorithm=`` (the environment is read once per
  backend, so it cannot change under a cache);
* per buffer (a ``numpy.ndarray`` of exactly that type): its identity, shape, dtype and flags
  (writeable, contiguous; the strides of a contiguous array follow from the rest).  Its
  address is not in the key: the entry keeps the array alive (so the id is never reused),
  numpy's ``data`` attribute is read-only, and ``resize`` refuses an array that the entry
  references.  ``resize(refcheck=False)`` moves the memory under every holder of a
  reference, this cache included: numpy's own contract for it ("only if you are sure that
  you have not shared the memory") is broken by a buffer mpicoll was given, as by any view
  of it.  A 0-d array (a root or a count given as one) is not cached: it is read by value;
* the rest of each argument by value: ints (root, counts; ``bool`` kept apart from ``int``),
  counts and displacements given as numpy arrays (their contents),
  the lists and tuples of a buffer spec (their type too: ``(counts, displs)`` is not
  ``[counts, displs]``), ``MPI.IN_PLACE``, ``None``; datatypes and ops by identity and handle
  (a freed one has a new handle, a new one a new identity).

Anything else (a ``bytearray``, a ``memoryview``, an ndarray subclass, a float root, ...) is
not cached: it is checked and parsed at every call, as is a call whose buffers alone hold more
than :data:`PINNED_BYTES`.  An entry keeps its buffers alive (and, on p2p, a compiled plan's
scratch of about their size): the entries' buffers hold at most :data:`PINNED_BYTES`
together, the oldest entries going first to make room.  Only calls whose parse succeeded are
stored, so a bad input raises at every call, before any message.  The buffers' *contents* are
not in the key: a call that only changed them is a hit, as it should be.

In front of that cache sits the *last call* of each collective (:data:`Last`): a call made
with the very objects of the last call of its collective (each argument identical, ``is``),
whose arrays still have the shape, dtype and flags they had and whose user-defined ops the
handle, runs that call's runner without building a key.  Identity is enough for the rest: the
entry keeps the objects alive (an id is never reused), ints, strings, ``None`` and
``MPI.IN_PLACE`` cannot change.  What a key holds by value is compared as the key would: a
list or tuple argument (a buffer spec, built anew or changed in place) item by item, a view
made anew (``big[:n]``, bare or a list spec's buffer) by its base, address, shape, strides,
dtype and flags, an ``mmap`` of a blocking call by its length and address, read at each call
(a closed one misses, and the parse raises what mpi4py raises).  Only calls the cache holds
become last calls, so what the key would refuse never gets there; an entry becomes one at its
first hit (its record made then, after that hit's run, of its arguments: a call made once
needs none).  The record is one function written for the call (:func:`last_of`): its checks
one after the other, no loop, then the tag and the runner; a blocking p2p runner whose plan is
compiled has its replay written in too, behind the runner's own guard.

Behind the cache sit the *templates* (p2p, blocking calls): a miss whose buffers are all numpy
arrays (bare or a list spec's first item) has a layout, :func:`shape_of` (its key less the
buffers' identities and addresses: their dtype, shape, strides and flags stay).  The first
stored runner of a layout is noted (:meth:`FrontDoor.note`); at the next miss of that layout
its compiled plan becomes a :class:`~mpicoll.engines.plan.Template`, and every later miss of
it gets a runner bound from the template to its own buffers, without a parse (see there for
why the parse could only agree, and the overlap check it keeps).  Such a runner is stored
only when the same call comes twice in a row (:meth:`FrontDoor.again`); otherwise it runs
once and is dropped, so a program passing new arrays at every call neither fills the cache
nor keeps its dead arrays alive.

An entry is ``(args, run, last)``: the arguments (kept alive, see above), the backend's runner,
``run(*args)`` (native: the mpi4py method; p2p: the engine's call with the selected algorithm,
for a blocking call a :class:`~mpicoll.engines.plan.BlockingRunner`, which compiles the call's
plan at its second run), and the call's last-call record.  The cache holds :data:`SIZE`
entries; the oldest goes first (its
runner's ``free()``, if any, releases its plan).
"""

from __future__ import annotations

import array
import mmap
from collections.abc import Callable
from operator import is_ as _is
from types import FunctionType
from typing import Any

import numpy as np
from mpi4py import MPI

__all__ = ["MISS", "PENDING", "PINNED_BYTES", "SIZE", "TEMPLATES", "FrontDoor", "Last",
           "UncacheableError", "fresh_of", "holds", "key_and_layout", "key_of", "last_of",
           "shape_of", "unexported"]

#: entries per backend (each keeps its arguments' buffers alive)
SIZE = 64
#: bytes of buffers the entries of one backend keep alive together, at most (64 MiB): the
#: oldest entries go to make room, and a call whose buffers alone hold more is not stored
PINNED_BYTES = 64 << 20
#: layouts per backend whose compiled plan serves new buffers (:attr:`FrontDoor.templates`)
TEMPLATES = 16
#: a call whose buffers hold more than this has no template (a template keeps them alive)
TEMPLATE_BYTES = 1 << 20


class UncacheableError(Exception):
    """An argument the cache does not hold: the call is checked and parsed every time."""


_ND = np.ndarray
_OP = MPI.Op
_DT = MPI.Datatype
_ADDRESS = MPI.Get_address


def _same(x: Any) -> Any:
    return x


def _bool(x: bool) -> tuple[str, bool]:
    return ("bool", x)


def _handle(x: Any) -> tuple[int, int]:
    return (id(x), x.handle)


def _in_place(x: Any) -> str:
    return "IN_PLACE"


def _address(a: Any) -> int:
    """The address of a buffer's first byte (mpi4py's own buffer request: raises what mpi4py
    raises for a closed mmap or a released memoryview, as :class:`UncacheableError`, so the
    parse raises it as mpi4py does)."""
    try:
        return int(_ADDRESS(a))
    except Exception as exc:  # not contiguous, closed, released: the parse says why
        raise UncacheableError(type(a).__name__) from exc


def _array(a: np.ndarray, add: Callable[[Any], None]) -> None:
    """An ndarray used as a buffer: four items, its dtype first.  An array that owns its
    memory is keyed by its identity (the entry keeps it alive, and numpy never moves its
    memory while a reference is held); a view (made anew at every call, ``big[:n]``) by the
    identity of the object it views, its address (so its byte offset in that object) and
    strides: two views of the same memory with the same shape, strides, dtype and flags
    parse alike.  The shape goes with the dtype's typecode: numpy calls ``int64`` of
    typecode ``'l'`` and of ``'q'`` equal, mpi4py maps them to two datatypes (a reduction
    mixing them is refused), and an array's dtype may be set in place."""
    add(a.dtype)
    base = a.base
    add(id(a) if base is None else (id(base), _address(a), a.strides))
    add((a.shape, a.dtype.char))
    add(a.flags.num)


def _bytearray(x: Any) -> tuple[Any, ...]:
    """A ``bytearray`` or ``array.array``: by identity and length (the entry holds an export
    of it, so Python refuses to resize it while it is cached)."""
    return (type(x), id(x), len(x))


def _memoryview(x: memoryview) -> tuple[Any, ...]:
    """A ``memoryview`` (immutable but for ``release``, which the entry's export refuses).

    Raises:
        ValueError: it was released (what mpi4py raises for it), before any message."""
    return (memoryview, id(x), x.nbytes)


def _bytes(x: bytes) -> tuple[Any, ...]:
    return (bytes, id(x))


def _mmap(x: mmap.mmap) -> tuple[Any, ...]:
    """An ``mmap``: by identity, length and address, read at every call (the entry holds no
    export of it, so the program may still resize or close it, as with plain mpi4py: a
    closed one raises, a moved one misses).

    Raises:
        ValueError: it was closed (``mmap closed or invalid``, what mpi4py raises for it),
            before any message."""
    return (mmap.mmap, id(x), len(x), _address(x))


def _buffer(b: Any, add: Callable[[Any], None]) -> None:
    """The part of a buffer spec's buffer (a list spec's first item): an ndarray of any
    dimension (a 0-d one too: there it is a buffer, never a root) or a buffer object."""
    if type(b) is _ND:
        _array(b, add)
    else:
        part = _PARTS.get(type(b))
        if part is None:
            raise UncacheableError(type(b).__name__)
        add(part(b))


def _sequence(x: list[Any] | tuple[Any, ...]) -> tuple[Any, ...]:
    """A buffer spec (``[buf, counts, displs, datatype]``, ``[buf, (counts, displs), dt]``):
    its type, its first item's part (the buffer: :func:`_buffer`), then the others by value
    (:func:`_value`)."""
    if not x:
        return (type(x),)
    out: list[Any] = [type(x), len(x)]
    add = out.append
    b = x[0]
    if type(b) is _ND and b.base is None:  # the common buffer, inline
        add(b.dtype)
        add(id(b))
        add((b.shape, b.dtype.char))
        add(b.flags.num)
    else:
        _buffer(b, add)
    for i in range(1, len(x)):
        v = x[i]
        t = type(v)
        if t is _DT:
            add((id(v), v.handle))
        elif t is int:
            add(v)
        else:
            add(_value(v))
    return tuple(out)


def _value(v: Any) -> Any:
    """A spec item past the buffer by value: counts and displacements given as numpy arrays
    by their contents (they may be refilled between two calls), nested sequences item by
    item, anything else as :func:`key_of` keys it."""
    t = type(v)
    if t is _ND:
        return ("values", v.dtype, v.shape, v.tobytes())
    if t is list or t is tuple:
        return (t, *[_value(w) for w in v])
    part = _PARTS.get(t)
    if part is None:
        raise UncacheableError(t.__name__)
    return part(v)


_PARTS: dict[type, Callable[[Any], Any]] = {
    int: _same, bool: _bool, type(None): _same, str: _same,
    list: _sequence, tuple: _sequence, MPI.Datatype: _handle, MPI.Op: _handle,
    type(MPI.IN_PLACE): _in_place, bytearray: _bytearray, array.array: _bytearray,
    memoryview: _memoryview, bytes: _bytes, mmap.mmap: _mmap,
}
for _t in (np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64,
           np.longlong, np.ulonglong, np.intc, np.uintc):
    _PARTS[_t] = _same

#: buffer objects whose entry holds an export (Python then refuses to resize them)
_EXPORTED = (bytearray, array.array, memoryview)


def key_of(head: tuple[Any, ...], args: Any) -> tuple[Any, ...]:
    """The cache key of a call: ``head`` (what the backend adds: the collective, blocking or
    not, ``algorithm=``), then each argument's part, flat.  An array's part is four items, its
    dtype first (no other part is a dtype, so the key reads back unambiguously), then its
    identity (a view: its base's identity, its address and strides), shape and flags; the
    flags' ``num`` holds the writeable and contiguity bits.  A 0-d array passed bare may be a
    root or a count: it is keyed by its value too (one inside a list spec is its buffer, keyed
    as any array).  Every other argument is one item (:data:`_PARTS`).  This runs at every
    call: the common arguments are read inline.

    Raises:
        UncacheableError: an argument (or an item of a buffer spec) of a type the cache does
            not hold (see the module docstring).
    """
    key = list(head)
    add = key.append
    for a in args:
        t = type(a)
        if t is _ND:
            if a.base is None and a.ndim:
                add(a.dtype)
                add(id(a))
                add((a.shape, a.dtype.char))
                add(a.flags.num)
            else:
                if not a.ndim:  # a root or a count, read by value
                    add(("0-d", a.tobytes()))
                _array(a, add)
        elif t is _OP:
            add((id(a), a.handle))
        else:
            part = _PARTS.get(t)
            if part is None:
                raise UncacheableError(t.__name__)
            add(part(a))
    return tuple(key)


def shape_of(head: tuple[Any, ...], args: Any) -> tuple[tuple[Any, ...], list[np.ndarray]] | None:
    """The key of a call's *layout*, and its buffers: :func:`key_of` with each buffer's
    identity and address left out (a bare numpy array, or a list spec's first item that is
    one, keyed by its dtype, shape, strides and flags), every other argument as there; None
    for a call with any other kind of buffer, or a bare 0-d array (a root or count read by
    value).  Two calls of one layout differ only in which memory their buffers are: a
    compiled plan of one serves the other (:class:`~mpicoll.engines.plan.Template`)."""
    key = list(head)
    add = key.append
    bufs = []
    for a in args:
        t = type(a)
        if t is _ND:
            if not a.ndim:
                return None
            add((a.dtype, a.dtype.char, a.shape, a.strides, a.flags.num))
            bufs.append(a)
        elif t is list or t is tuple:
            if not a or type(a[0]) is not _ND:
                return None
            b = a[0]
            add((t, len(a), b.dtype, b.dtype.char, b.shape, b.strides, b.flags.num))
            bufs.append(b)
            try:
                for i in range(1, len(a)):
                    add(_value(a[i]))
            except UncacheableError:
                return None
        elif t is _OP or t is _DT:
            add((id(a), a.handle))
        elif t in _EXPORTED or t is bytes or t is mmap.mmap:
            return None
        else:
            part = _PARTS.get(t)
            if part is None:
                return None
            add(part(a))
    return tuple(key), bufs


def key_and_layout(head: tuple[Any, ...], args: Any
                   ) -> tuple[tuple[Any, ...], tuple[tuple[Any, ...], list[np.ndarray]] | None]:
    """A call's cache key and, where it has one, its layout (:func:`shape_of`) in one pass:
    for a call with a layout the key is the layout's followed by each buffer's identity (an
    array that owns its memory: its own; a view: its base's and its address), which holds
    what :func:`key_of` would (the layout has every other item, each array's strides too);
    else :func:`key_of`'s key and None.

    Raises:
        UncacheableError: as :func:`key_of`."""
    shape = shape_of(head, args)
    if shape is None:
        return key_of(head, args), None
    ids: list[Any] = []
    for b in shape[1]:
        base = b.base
        ids.append(id(b) if base is None else (id(base), _address(b)))
    return shape[0] + tuple(ids), shape


#: a last call's record: ``hit(algorithm, args)`` runs the call (as its entry's runner would:
#: the tag taken, ``run(tag, *args)``) if ``algorithm`` and ``args`` are the last call's as
#: :func:`last_of` says, else returns :data:`MISS` having done nothing.  One function per
#: record, made by :func:`last_of` (its checks written out, none of them a loop); its
#: ``run`` attribute is the entry's runner, its ``args`` the arguments it was made of
Last = Callable[[Any, tuple[Any, ...]], Any]

#: an entry's last-call record before its first hit (see :meth:`FrontDoor.settle`)
PENDING: Any = object()
#: what a last call's record returns for a call that is not its own (nothing was done)
MISS: Any = object()

#: arguments a last call compares by identity alone (immutable, or pinned by an export)
_FIXED = (int, str, type(None), bytes, bytearray, array.array, type(MPI.IN_PLACE))
#: a spec's nested sequence longer than this is compared by a loop, not written out
_INLINE_ITEMS = 8


class _Checks:
    """The checks of one last-call record, as lines of Python (see :func:`last_of`): every
    object they compare with is a constant of the function (``k0``, ``k1``, ...), so two
    records of one structure have the same source, compiled once (:data:`_MADE`)."""

    def __init__(self) -> None:
        self.consts: list[Any] = []
        self.lines: list[str] = []
        #: the address reads, ``(what, constant)`` (they may raise: after every other check,
        #: in one ``try``)
        self.addresses: list[tuple[str, str]] = []

    def const(self, v: Any) -> str:
        self.consts.append(v)
        return f"k{len(self.consts) - 1}"

    def miss(self, cond: str) -> None:
        self.lines.append(f"        if {cond}: return MISS")

    def same(self, x: str, v: Any) -> str:
        """``x`` is ``v`` (an int: or an int equal to it, as the key compares ints); the
        constant holding ``v``."""
        k = self.const(v)
        if type(v) is int:
            self.miss(f"{x} is not {k} and (type({x}) is not int or {x} != {k})")
        else:
            self.miss(f"{x} is not {k}")
        return k

    def state(self, k: str, a: np.ndarray) -> None:
        """What can change in place on an array that is the last call's own: its shape,
        dtype and flags (writeable, contiguity)."""
        self.miss(f"{k}.shape != {self.const(a.shape)} or {k}.dtype is not "
                  f"{self.const(a.dtype)} or {k}.flags.num != {a.flags.num}")

    def view(self, x: str, a: np.ndarray) -> bool:
        """``x`` keys as the view ``a`` (:func:`_array`): an ndarray of the same base, shape,
        dtype, strides and flags at the same address (the constants hold the base, so its id
        stays its own); False if ``a`` has no address mpi4py reads."""
        try:
            at = _address(a)
        except UncacheableError:
            return False
        self.miss(f"type({x}) is not ND or {x}.base is not {self.const(a.base)}")
        self.miss(f"{x}.shape != {self.const(a.shape)} or {x}.dtype is not "
                  f"{self.const(a.dtype)} or {x}.strides != {self.const(a.strides)} "
                  f"or {x}.flags.num != {a.flags.num}")
        self.addresses.append((x, self.const(at)))
        return True

    def argument(self, x: str, a: Any, maps: bool) -> bool:
        """The checks of the argument ``a`` (read as ``x``); False if it cannot be part of a
        last call (``maps``: an mmap can be; see :func:`last_of`)."""
        t = type(a)
        if t is _ND:
            if not a.ndim:  # a root or a count, read by value
                return False
            if a.base is not None:  # a view, made anew at each call
                return self.view(x, a)
            self.same(x, a)
            self.state(x, a)
            return True
        if t is list or t is tuple:  # a spec, built anew at each call or not
            self.miss(f"type({x}) is not {self.const(t)} or len({x}) != {len(a)}")
            for j, v in enumerate(a):
                y = f"{x}_{j}"
                self.lines.append(f"        {y} = {x}[{j}]")
                if j == 0 and type(v) is _ND and v.base is not None and v.ndim:
                    if not self.view(y, v):
                        return False
                    continue
                if not self.part(self.same(y, v), v, j == 0, maps):
                    return False
            return True
        return self.part(self.same(x, a), a, False, maps)

    def fresh(self, x: str, a: Any, bufs: list[str]) -> bool:
        """The checks of the argument ``a`` (read as ``x``) of a fresh-buffers record
        (:func:`fresh_of`): each numpy buffer (bare, or a list spec's first item) by its
        layout alone (type, shape, dtype, strides, flags: :func:`shape_of`'s), named in
        ``bufs``; everything else as a last call checks it.  False if ``a`` cannot be part of
        one (a bare 0-d array: a root or a count read by value; a spec whose buffer is not an
        ndarray; counts given as an ndarray)."""
        t = type(a)
        if t is _ND:
            if not a.ndim:
                return False
            self.layout(x, a)
            bufs.append(x)
            return True
        if t is list or t is tuple:
            if not a or type(a[0]) is not _ND:
                return False
            self.miss(f"type({x}) is not {self.const(t)} or len({x}) != {len(a)}")
            y = f"{x}_0"
            self.lines.append(f"        {y} = {x}[0]")
            self.layout(y, a[0])
            bufs.append(y)
            for j in range(1, len(a)):
                v = a[j]
                y = f"{x}_{j}"
                self.lines.append(f"        {y} = {x}[{j}]")
                if not self.part(self.same(y, v), v, False, False):
                    return False
            return True
        return self.part(self.same(x, a), a, False, False)

    def layout(self, x: str, a: np.ndarray) -> None:
        """``x`` is an ndarray of ``a``'s layout: shape, dtype, strides and flags."""
        self.miss(f"type({x}) is not ND or {x}.shape != {self.const(a.shape)} or {x}.dtype "
                  f"is not {self.const(a.dtype)} or {x}.strides != {self.const(a.strides)} "
                  f"or {x}.flags.num != {a.flags.num}")

    def part(self, k: str, a: Any, buffer: bool, maps: bool) -> bool:
        """What must be checked of ``a``, the last call's own object (the constant ``k``):
        the state of an array (a spec's buffer: ``buffer``), the handle of a user-defined op
        or derived datatype, the items of a nested sequence, the length and address of an
        mmap (``maps``: allowed); False if it cannot be part of a last call."""
        t = type(a)
        if t is _ND:
            if not buffer:  # counts or displacements: keyed by their contents
                return False
            self.state(k, a)
            return True
        if t is _OP or t is _DT:
            if not a.is_predefined:  # a predefined op or datatype cannot be freed
                self.miss(f"{k}.handle != {self.const(a.handle)}")
            return True
        if t is list or t is tuple:  # nested (counts, displacements): the same items
            items = tuple(a)
            if len(items) > _INLINE_ITEMS:
                self.miss(f"not SAME_ITEMS({k}, {self.const(items)})")
            else:
                self.miss(f"len({k}) != {len(items)}")
                for j, v in enumerate(items):
                    self.miss(f"{k}[{j}] is not {self.const(v)}")
            return all(self.part(self.const(v), v, False, False) for v in items)
        if t is mmap.mmap:
            if not maps:
                return False
            try:
                at = _address(a)
            except UncacheableError:
                return False
            self.miss(f"len({k}) != {len(a)}")
            self.addresses.append((k, self.const(at)))
            return True
        return t in _FIXED or t in _NUMPY_INTS


def _direct(run: Callable[..., Any]) -> Callable[..., Any]:
    """``run`` as the cheapest thing to call: an object whose class defines ``__call__`` in
    Python (a p2p runner) as that method bound to it (no lookup of ``__call__`` per call)."""
    for cls in type(run).__mro__:
        call = vars(cls).get("__call__")
        if call is not None:
            return call.__get__(run) if isinstance(call, FunctionType) else run
    return run


def _same_items(seq: Any, items: tuple[Any, ...]) -> bool:
    return len(seq) == len(items) and all(map(_is, seq, items))


#: the compiled records' makers, by source (records of one structure share one)
_MADE: dict[str, Callable[..., Last]] = {}
#: makers kept at most (the oldest goes first)
_MADE_SIZE = 256


def _tag_lines(take_tag: Callable[[], int | None] | None, names: dict[str, Any]) -> list[str]:
    """The lines of a record that set ``tag``: taken inline where the engine offers its steps
    as code (p2p: :meth:`~mpicoll.engines.mpi.Engine.take_tag_lines`, the objects they read
    added to ``names``), else one call of ``take_tag``."""
    offer = getattr(getattr(take_tag, "__self__", None), "take_tag_lines", None)
    if offer is None:
        return ["tag = take_tag()"]
    lines, read = offer()
    names.update(read)
    return list(lines)


def _made(lines: list[str]) -> Callable[..., Any]:
    """The ``make`` function of a record's source ``lines``, compiled once per source
    (:data:`_MADE`, the oldest going first)."""
    src = "\n".join(lines)
    make = _MADE.get(src)
    if make is None:
        if len(_MADE) >= _MADE_SIZE:
            del _MADE[next(iter(_MADE))]
        scope: dict[str, Any] = {}
        exec(src, scope)  # one function per structure of record
        make = _MADE[src] = scope["make"]
    return make


def last_of(args: tuple[Any, ...], algorithm: Any, run: Callable[..., Any],
            door: FrontDoor, take_tag: Callable[[], int | None] | None = None,
            refuse: Callable[[int], None] | None = None,
            nonblocking: bool = False) -> Last | None:
    """The last-call record of a cached call (see :data:`Last`), or None if it cannot be one:
    an argument whose meaning can change on the same object other than through what the
    record checks (a bare 0-d array: a root read by value; counts given as a numpy array; a
    memoryview, which may be released; an mmap of a non-blocking call, whose request must
    hold it; anything else not listed in :data:`_FIXED`).

    The record's function checks, in order: ``algorithm`` by identity; each argument by
    identity (an int: or by value), a list or tuple argument item by item (its type and
    length, then each item by identity: a spec built anew with the same items matches), a
    view (bare or a spec's buffer) by its base, shape, dtype, strides and flags; then the
    state of what it holds: each array's shape, dtype and flags, each user-defined op's and
    derived datatype's handle, nested sequences item by item; last the addresses (a view's,
    an mmap's, with its length: read at each call, a closed mmap misses).  On a match it
    counts a hit in ``door``, takes the call's tag (``take_tag``; None: an untagged backend)
    and returns ``run(tag, *args)`` (on an exception ``refuse(tag)``, then raised).  A runner
    that offers its replay as code (``run.inline()``: a compiled blocking p2p plan, see
    :meth:`~mpicoll.engines.plan.BlockingRunner.inline`) has it written into the record, with
    the runner's own guard: where the guard holds, ``run`` is called as above."""
    checks = _Checks()
    names = [f"a{i}" for i in range(len(args))]
    for x, a in zip(names, args, strict=True):
        if not checks.argument(x, a, not nonblocking):
            return None
    inline = getattr(run, "inline", None)
    inline = inline() if inline is not None and take_tag is not None else None
    extra: dict[str, Any] = {} if inline is None else dict(inline[3])
    tag_lines = _tag_lines(take_tag, extra)
    lines = ["def make(MISS, ND, ADDRESS, SAME_ITEMS, door, take_tag, refuse, run, algo"
             + "".join(f", k{i}" for i in range(len(checks.consts)))
             + "".join(f", {name}" for name in extra) + "):"]
    if inline is not None:  # the runner's plan, named once
        lines += ["    " + line for line in inline[1]]
    lines += ["    def hit(algorithm, args):",
              "        if algorithm is not algo: return MISS"]
    if names:
        lines.append(f"        {', '.join(names)}, = args")
    lines += checks.lines
    if checks.addresses:
        lines += ["        try:",
                  *[f"            if ADDRESS({x}) != {k}: return MISS"
                    for x, k in checks.addresses],
                  "        except Exception:",
                  "            return MISS"]
    lines.append("        door.hits += 1")
    call = ", ".join(names)
    if take_tag is None:
        lines.append(f"        return run({call})")
    else:
        lines += [f"        {line}" for line in tag_lines]
        lines.append("        try:")
        if inline is not None:  # the runner's replay, written here
            lines.append(f"            if {inline[0]}:")
            indent = "                "
        else:
            indent = "            "
        lines.append(f"{indent}return run(tag{', ' if names else ''}{call})")
        if inline is not None:
            args_expr = f"({call}{',' if len(names) == 1 else ''})"
            lines += ["            " + line.replace("ARGS", args_expr) for line in inline[2]]
        lines += ["        except BaseException:",
                  "            refuse(tag)",
                  "            raise"]
    lines.append("    return hit")
    make = _made(lines)
    hit: Any = make(MISS, _ND, _ADDRESS, _same_items, door, take_tag, refuse, _direct(run),
                    algorithm, *checks.consts, *extra.values())
    hit.run, hit.args = run, args
    return hit


def fresh_of(args: tuple[Any, ...], algorithm: Any,
             serve: Callable[..., Any], door: FrontDoor,
             take_tag: Callable[[], int | None],
             refuse: Callable[[int], None],
             guard: tuple[str, dict[str, Any]] | None = None,
             inline: Callable[[list[str]], tuple[str, list[str], dict[str, Any]] | None]
             | None = None) -> Last | None:
    """The *fresh-buffers record* of a blocking call that a layout's template served (new
    arrays at every call: ``Allreduce(np.ones(n), out)``, a spec list of a new array), or
    None if its arguments cannot make one (see :meth:`_Checks.fresh`): a :data:`Last`-like
    function ``fresh(algorithm, args)`` for the next calls of its collective that the last
    call's record misses.  It checks ``algorithm`` by identity, each numpy buffer by its
    layout (:func:`shape_of`'s: type, shape, dtype, strides, flags, never its identity or
    address) and everything else as a last call's record does (by identity; ints by value;
    a user-defined op's or derived datatype's handle), then ``guard`` (an expression true
    where the template may no longer serve: ``auto``'s model changed; its names), so that a
    call it takes has the template's layout key: exactly the calls that would reach the
    template through the key.  It misses a call whose first buffer is that of the last
    call a record served (:attr:`FrontDoor.held`, kept alive until the next, so its id stays
    its own): the same buffers again go through the cache, which stores them
    (:meth:`FrontDoor.again`).
    On a match it counts a miss in ``door`` (as the parse path would), takes the tag and
    returns ``serve(args, tag, *buffers)`` (on an exception ``refuse(tag)``, then raised);
    ``inline(buffer names)``, where given and not None, is that serving written out
    (``(guard, body, names)``: where ``guard`` holds, ``serve`` is called instead; see
    :meth:`~mpicoll.engines.plan.Template.inline`).
    One function per structure, compiled once (:data:`_MADE`), as :func:`last_of`'s."""
    checks = _Checks()
    names = [f"a{i}" for i in range(len(args))]
    bufs: list[str] = []
    for x, a in zip(names, args, strict=True):
        if not checks.fresh(x, a, bufs):
            return None
    if not bufs:
        return None
    extra: dict[str, Any] = {}
    tag_lines = _tag_lines(take_tag, extra)
    if guard is not None:
        extra.update(guard[1])
    written = inline(bufs) if inline is not None else None
    if written is not None:
        extra.update(written[2])
    lines = ["def make(MISS, ND, door, take_tag, refuse, serve, algo, HELD"
             + "".join(f", k{i}" for i in range(len(checks.consts)))
             + "".join(f", {name}" for name in extra) + "):",
             "    def fresh(algorithm, args):",
             "        if algorithm is not algo: return MISS"]
    lines.append(f"        {', '.join(names)}, = args")
    lines += checks.lines
    lines.append(f"        if {bufs[0]} is HELD[1]: return MISS")
    if guard is not None:
        lines.append(f"        if {guard[0]}: return MISS")
    lines.append("        door.misses += 1")
    lines += [f"        {line}" for line in tag_lines]
    lines.append("        try:")
    served = f"out = serve(args, tag, {', '.join(bufs)})"
    if written is None:
        lines.append(f"            {served}")
    else:
        lines += [f"            if {written[0]}:", f"                {served}",
                  "            else:", *[f"                {line}" for line in written[1]]]
    lines += ["        except BaseException:",
              "            refuse(tag)",
              "            raise",
              f"        HELD[0] = args; HELD[1] = {bufs[0]}",
              "        return out",
              "    return fresh"]
    make = _made(lines)
    fresh: Any = make(MISS, _ND, door, take_tag, refuse, serve, algorithm, door.held,
                      *checks.consts, *extra.values())
    return fresh


_NUMPY_INTS = frozenset(t for t in _PARTS if t not in (list, tuple) and t.__module__ == "numpy")


def unexported(args: tuple[Any, ...]) -> tuple[Any, ...]:
    """``args`` with every ``mmap`` (bare, or a list spec's buffer) replaced by a uint8 view of
    its memory that holds no export of it, for a parse the cache will keep: the program may
    then close or resize the mmap as with plain mpi4py (the key reads its length and address
    at every call, and a closed one is parsed again, raising what mpi4py raises)."""
    for a in args:
        t = type(a)
        if t is mmap.mmap or ((t is list or t is tuple) and a and type(a[0]) is mmap.mmap):
            break
    else:  # no mmap (the common call)
        return args
    out = []
    for a in args:
        if type(a) is mmap.mmap:
            a = _view_of(a)
        elif type(a) in (list, tuple) and a and type(a[0]) is mmap.mmap:
            a = type(a)([_view_of(a[0]), *a[1:]])
        out.append(a)
    return tuple(out)


class _Raw:
    """An ``__array_interface__`` over memory this object does not own (no export)."""

    def __init__(self, address: int, nbytes: int, readonly: bool) -> None:
        self.__array_interface__ = {"data": (address, readonly), "shape": (nbytes,),
                                    "typestr": "|u1", "version": 3}


def _view_of(m: mmap.mmap) -> Any:
    with memoryview(m) as mv:  # raises for a closed mmap, as mpi4py
        address, nbytes, readonly = int(_ADDRESS(mv)), mv.nbytes, mv.readonly
    if not nbytes:
        return m
    return np.asarray(_Raw(address, nbytes, readonly))


def holds(args: tuple[Any, ...]) -> list[memoryview]:
    """Exports of the call's mmaps, held by a non-blocking call's request until it is
    complete (as mpi4py's request holds its buffers: closing the mmap meanwhile raises)."""
    out = []
    for a in args:
        if type(a) in (list, tuple) and a:
            a = a[0]
        if type(a) is mmap.mmap:
            out.append(memoryview(a))
    return out


class FrontDoor:
    """One backend's cache of parsed calls.

    Attributes:
        hits: calls that reused an earlier parse.
        misses: calls that were checked and parsed (not in the cache, or not cacheable).
        entries: key -> ``(args, run, last)`` (``last``: the call's :data:`Last` record,
            None if it has a list or tuple argument).
        last: the last call of each collective (:data:`Last`), blocking (``last[False]``) and
            non-blocking (``last[True]``), by collective name.
    """

    __slots__ = ("_once", "_sizes", "entries", "fresh", "held", "hits", "last", "misses",
                 "pinned", "templates")

    def __init__(self) -> None:
        self.entries: dict[tuple[Any, ...],
                           tuple[tuple[Any, ...], Callable[..., Any], Last | None]] = {}
        self.last: tuple[dict[str, Last], dict[str, Last]] = ({}, {})
        #: the fresh-buffers record of each collective's last call that a template served
        #: (:func:`fresh_of`; blocking calls), by collective name
        self.fresh: dict[str, Last] = {}
        #: the arguments and first buffer of the last call a fresh-buffers record served
        #: (kept alive, so the buffer's id stays its own; see :meth:`again`)
        self.held: list[Any] = [None, None]
        self.hits = 0
        self.misses = 0
        #: bytes of the entries' buffers
        self.pinned = 0
        #: bytes each entry pins, by key
        self._sizes: dict[tuple[Any, ...], int] = {}
        #: layout (:func:`shape_of`) -> the first runner of it and its buffers, then the
        #: template made of it (p2p: :class:`~mpicoll.engines.plan.Template`), or None where
        #: none can be made; at most :data:`TEMPLATES`
        self.templates: dict[tuple[Any, ...], Any] = {}
        #: the key and arguments of the last call a template served and that was not stored
        #: (:meth:`again`)
        self._once: tuple[tuple[Any, ...], tuple[Any, ...]] | None = None

    def note(self, shape: tuple[tuple[Any, ...], list[np.ndarray]], run: Any,
             args: tuple[Any, ...]) -> None:
        """Keep ``run`` (a stored call's runner) as the source of its layout's template, with
        its buffers and arguments (kept alive, so their ids and memory stay theirs), unless
        the layout has one or the buffers hold more than :data:`TEMPLATE_BYTES`."""
        templates = self.templates
        if shape[0] in templates or sum(b.nbytes for b in shape[1]) > TEMPLATE_BYTES:
            return
        if len(templates) >= TEMPLATES:
            del templates[next(iter(templates))]
        templates[shape[0]] = (run, shape[1], args)

    def again(self, key: tuple[Any, ...], args: tuple[Any, ...], first: Any = None) -> bool:
        """Whether a call of ``key`` that a template serves (:meth:`note`) is the second in a
        row with these very buffers: only then is it stored.  The last such call that was
        not stored is remembered, its arguments kept alive (so their ids are theirs: an array
        freed and another made at its address is never taken for it); a program passing new
        arrays at every call keeps one call's buffers alive, not the cache's 64.  A call
        whose first buffer ``first`` is that of the last call a fresh-buffers record served
        (:attr:`held`) counts as a second call too (the record's miss on that buffer is what
        sent it here; storing a call is never wrong, only a use of room)."""
        once = self._once
        if (once is not None and once[0] == key) or (first is not None
                                                     and first is self.held[1]):
            self._once = None  # (held stays: the records leave these buffers to the cache)
            return True
        self._once = (key, args)
        return False

    def store(self, key: tuple[Any, ...], args: tuple[Any, ...], run: Callable[..., Any]
              ) -> None:
        """Keep ``(args, run)`` under ``key``, dropping the oldest entries while the cache is
        full or the buffers would pass :data:`PINNED_BYTES` (a call whose buffers alone do is
        not stored); its :data:`Last` record is :data:`PENDING` until its first hit
        (:meth:`settle`)."""
        nbytes = _nbytes(args)
        if nbytes > PINNED_BYTES:
            return
        entries, sizes = self.entries, self._sizes
        while entries and (len(entries) >= SIZE or self.pinned + nbytes > PINNED_BYTES):
            old_key = next(iter(entries))
            _, old, old_last = entries.pop(old_key)
            self.pinned -= sizes.pop(old_key)
            if old_last is not None and old_last is not PENDING:  # a last call is an entry
                lasts = self.last[bool(old_key[1])]  # the key's head: (collective, I-form, ..)
                if lasts.get(old_key[0]) is old_last:
                    del lasts[old_key[0]]
            _free(old)
        # the arguments, then exports of their resizable buffers (held while cached); the
        # last-call record is made at the entry's first hit (a call made once needs none)
        entries[key] = (args + _exports(args), run, PENDING)
        sizes[key] = nbytes
        self.pinned += nbytes

    def settle(self, key: tuple[Any, ...], entry: tuple[Any, ...], args: tuple[Any, ...],
               algorithm: Any, take_tag: Callable[[], int | None] | None = None,
               refuse: Callable[[int], None] | None = None) -> Last | None:
        """The :data:`Last` record of a stored call at its first hit, made of the arguments
        of that hit (whose key is the entry's now: the entry's own objects may have changed
        since, a list spec's items replaced in place), kept in the entry (it holds them
        alive, so their ids stay theirs); ``take_tag``, ``refuse``: the backend's (see
        :func:`last_of`)."""
        last = last_of(args, algorithm, entry[1], self, take_tag, refuse, bool(key[1]))
        self.entries[key] = (entry[0], entry[1], last)
        return last

    def clear(self) -> None:
        """Drop every entry (their buffers and compiled plans are released) and zero the
        counters."""
        for _, run, _ in self.entries.values():
            _free(run)
        self.entries.clear()
        self._sizes.clear()
        for lasts in self.last:
            lasts.clear()
        self.fresh.clear()
        self.held[0] = self.held[1] = None
        self.templates.clear()
        self._once = None
        self.hits = self.misses = self.pinned = 0


def _nbytes(args: Any) -> int:
    """Bytes a call's arguments keep alive (buffer specs included): for a view, the whole
    array it is a view of, once per such array."""
    total, first = 0, None
    for a in args:  # bare arrays that own their memory (the common call), inline
        t = type(a)
        if t is _ND and a.base is None:
            if a is not first:  # the same array twice (Bcast's one buffer): once
                total += a.nbytes
            first = a
        elif t is _ND or t is list or t is tuple or t in _EXPORTED:
            break
    else:
        return total
    owners: dict[int, int] = {}
    for a in args:
        _owners(a, owners)
    return sum(owners.values())


def _owners(x: Any, owners: dict[int, int]) -> None:
    t = type(x)
    if t is _ND:
        while isinstance(x.base, np.ndarray):
            x = x.base
        owners[id(x)] = int(x.nbytes)
    elif t is list or t is tuple:
        for a in x:
            _owners(a, owners)
    elif t in _EXPORTED:
        owners[id(x)] = memoryview(x).nbytes


def _exports(args: tuple[Any, ...]) -> tuple[Any, ...]:
    """Exports of the call's ``bytearray``, ``array.array`` and ``memoryview`` buffers (bare or
    a list spec's first item): while an entry holds them, Python refuses to resize the first
    two (``BufferError``) and to release the third, so the parse cached stays valid."""
    out = []
    for a in args:
        t = type(a)
        if (t is list or t is tuple) and a:
            a = a[0]
            t = type(a)
        if t is not _ND and t in _EXPORTED:  # mpi4py's buffer: an export of the object
            out.append(MPI.buffer(a))
    return tuple(out) if out else ()


def _free(run: Callable[..., Any]) -> None:
    """Release what a dropped runner holds (a p2p runner's compiled plan)."""
    free = getattr(run, "free", None)
    if free is not None:
        free()
