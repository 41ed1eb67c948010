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

In front of that cache sits the *last call* of each collective (:class:`Last`): a call made
with the very objects of the last call of its collective (each argument identical, ``is``),
whose arrays still have the shape, dtype and flags they had and whose user-defined ops the
handle, runs that call's runner without building a key.  Identity is enough for the rest: the
entry keeps the objects alive (an id is never reused), ints, strings, ``None`` and
``MPI.IN_PLACE`` cannot change.  What a key holds by value is compared as the key would: a
list or tuple argument (a buffer spec, built anew or changed in place) item by item, a view
made anew (``big[:n]``, bare or a list spec's buffer) by its base, address, shape, strides,
dtype and flags (:class:`_View`), an ``mmap`` of a blocking call by its length and address,
read at each call (a closed one misses, and the parse raises what mpi4py raises).  Only calls
the cache holds become last calls, so what the key would refuse never gets there; an entry
becomes one at its first hit (its record made then, of that hit's arguments: a call made once
needs none).

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
from typing import Any

import numpy as np
from mpi4py import MPI

__all__ = ["PENDING", "PINNED_BYTES", "SIZE", "TEMPLATES", "FrontDoor", "Last",
           "UncacheableError", "holds",
           "key_of", "last_of", "same_maps", "same_specs", "shape_of", "unexported"]

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


#: a last call: ``(args, algorithm, arrays, handles, run, lists, specs, maps)``; ``arrays``
#: holds ``(array, shape, dtype, flags)`` of its arrays (in its list specs too), ``handles``
#: ``(object, handle)`` of its user-defined ops and derived datatypes, ``lists``
#: ``(list, items)`` of its list and tuple arguments, nested ones included, ``specs`` per
#: argument None (compared by identity), the items of a list or tuple argument, or a
#: :class:`_View` (a view made anew at each call); None for all if the call has neither
#: (see :func:`same_specs`), and ``maps`` ``(mmap, length, address)`` of its ``mmap`` buffers
#: (read at each call: the program may close or resize one).  A spec list built anew at each
#: call with the very same items, and a view made anew of the same memory, are the last call
#: too (see the module)
Last = tuple[tuple[Any, ...], Any, tuple[tuple[Any, ...], ...], tuple[tuple[Any, int], ...],
             Callable[..., Any], tuple[tuple[Any, tuple[Any, ...]], ...],
             tuple[Any, ...] | None, tuple[tuple[Any, int, int], ...]]

#: an entry's last-call record before its first hit (see :meth:`FrontDoor.settle`)
PENDING: Any = object()

#: arguments a last call compares by identity alone (immutable, or pinned by an export)
_FIXED = (int, str, type(None), bytes, bytearray, array.array, type(MPI.IN_PLACE))


class _View:
    """What a last call checks of a view argument (``big[:n]``, made anew at every call):
    another view is the same key (:func:`_array`) if it views the same base at the same
    address with the same shape, strides, dtype and flags.  Holds the view it was made of
    (so its base, and the base's id, stay alive)."""

    __slots__ = ("address", "base", "dtype", "flags", "shape", "strides", "view")

    def __init__(self, a: np.ndarray) -> None:
        self.view, self.base, self.address = a, a.base, _address(a)
        self.shape, self.strides, self.dtype, self.flags = a.shape, a.strides, a.dtype, \
            a.flags.num

    def match(self, a: Any) -> bool:
        """Whether ``a`` keys as the view this was made of (never raises)."""
        if (type(a) is not _ND or a.base is not self.base or a.shape != self.shape
                or a.dtype is not self.dtype or a.strides != self.strides
                or a.flags.num != self.flags):
            return False
        try:
            return int(_ADDRESS(a)) == self.address
        except Exception:
            return False


def last_of(args: tuple[Any, ...], algorithm: Any, run: Callable[..., Any],
            nonblocking: bool = False) -> Last | None:
    """The last-call record of a cached call, or None if it cannot be one: an argument whose
    meaning can change on the same object other than through what the record checks (a bare
    0-d array: a root read by value; counts given as a numpy array; a memoryview, which may be
    released; an mmap of a non-blocking call, whose request must hold it; anything else not
    listed in :data:`_FIXED`).  A view is matched by :class:`_View`, an mmap by its length
    and address, read at each call."""
    arrays: list[tuple[Any, ...]] = []
    handles: list[tuple[Any, int]] = []
    lists: list[tuple[Any, tuple[Any, ...]]] = []
    maps: list[tuple[Any, int, int]] | None = None if nonblocking else []
    specs: list[Any] = []
    for a in args:
        t = type(a)
        if t is _ND:
            if not a.ndim:
                return None
            if a.base is not None:
                specs.append(_View(a))
                continue
            arrays.append((a, a.shape, a.dtype, a.flags.num))
        elif t is list or t is tuple:
            items = list(a)
            for i, v in enumerate(a):
                if i == 0 and type(v) is _ND and v.base is not None and v.ndim:
                    items[0] = _View(v)
                elif not _last_part(v, type(v), arrays, handles, lists, i == 0, maps):
                    return None
            specs.append(tuple(items))
            continue
        elif not _last_part(a, t, arrays, handles, lists, False, maps):
            return None
        specs.append(None)
    return (args, algorithm, tuple(arrays), tuple(handles), run, tuple(lists),
            None if all(x is None for x in specs) else tuple(specs), tuple(maps or ()))


def same_specs(args: tuple[Any, ...], last: Last) -> bool:
    """Whether ``args`` are the last call's (``is``), a list or tuple argument compared item
    by item instead (``is``, one level: the same list changed in place, or one built anew
    with other items, is not; a nested sequence is checked through ``lists``), a view by its
    :class:`_View` (another view of the same memory, shape, strides, dtype and flags is).
    Never raises."""
    for a, old, items in zip(args, last[0], last[6] or (), strict=True):
        if items is None:
            if a is not old:
                return False
        elif type(items) is _View:
            if not items.match(a):
                return False
        elif type(a) is not type(old) or len(a) != len(items):
            return False
        elif not all(map(_is, a, items)):
            first = items[0]
            if (type(first) is not _View or not first.match(a[0])
                    or not all(map(_is, a[1:], items[1:]))):
                return False
    return True


def same_maps(maps: tuple[tuple[Any, int, int], ...]) -> bool:
    """Whether every mmap of a last call still has its length and address (False for a
    closed one: the call is then parsed, and raises what mpi4py raises).  Never raises."""
    try:
        return all(len(m) == n and int(_ADDRESS(m)) == at for m, n, at in maps)
    except Exception:
        return False


def _last_part(a: Any, t: type, arrays: list[tuple[Any, ...]],
               handles: list[tuple[Any, int]], lists: list[tuple[Any, tuple[Any, ...]]],
               buffer: bool, maps: list[tuple[Any, int, int]] | None = None) -> bool:
    """Record what a last call must check of ``a`` (``buffer``: a list spec's buffer); False
    if it cannot be part of a last call (``maps``: where an mmap's length and address go;
    None: an mmap cannot)."""
    if t is _ND:
        if not buffer:  # counts or displacements: keyed by their contents
            return False
        arrays.append((a, a.shape, a.dtype, a.flags.num))
        return True
    if t is _OP or t is _DT:
        if not a.is_predefined:  # a predefined op or datatype cannot be freed
            handles.append((a, a.handle))
        return True
    if t is list or t is tuple:
        items = tuple(a)
        lists.append((a, items))
        return all(_last_part(v, type(v), arrays, handles, lists, False) for v in items)
    if t is mmap.mmap:
        if maps is None:
            return False
        try:
            maps.append((a, len(a), int(_ADDRESS(a))))
        except Exception:
            return False
        return True
    return t in _FIXED or t in _NUMPY_INTS


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

    __slots__ = ("_once", "_sizes", "entries", "hits", "last", "misses", "pinned", "templates")

    def __init__(self) -> None:
        self.entries: dict[tuple[Any, ...],
                           tuple[tuple[Any, ...], Callable[..., Any], Last | None]] = {}
        self.last: tuple[dict[str, Last], dict[str, Last]] = ({}, {})
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

    def again(self, key: tuple[Any, ...], args: tuple[Any, ...]) -> bool:
        """Whether a call of ``key`` that a template serves (:meth:`note`) is the second in a
        row with these very buffers: only then is it stored.  The last such call that was
        not stored is remembered, its arguments kept alive (so their ids are theirs: an array
        freed and another made at its address is never taken for it); a program passing new
        arrays at every call keeps one call's buffers alive, not the cache's 64."""
        once = self._once
        if once is not None and once[0] == key:
            self._once = None
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
               algorithm: Any) -> Last | None:
        """The :data:`Last` record of a stored call at its first hit, made of the arguments
        of that hit (whose key is the entry's now: the entry's own objects may have changed
        since, a list spec's items replaced in place), kept in the entry (it holds them
        alive, so their ids stay theirs)."""
        last = last_of(args, algorithm, entry[1], bool(key[1]))
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
