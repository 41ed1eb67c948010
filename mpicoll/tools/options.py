"""What the commands share on the command line: sizes, ``-c``/``-a`` selection, file checks.

``bench``, ``verify``, ``simulate`` and ``calibrate`` read their options through these, so a
size, a collective or an algorithm means the same thing in every command.
"""

from __future__ import annotations

import argparse
import math
import os
import tempfile
from collections.abc import Callable, Sequence
from typing import Any

from ..model.alphabeta import Model

__all__ = [
    "DEFAULT_COLLECTIVES",
    "DEFAULT_SIZES",
    "algorithms_of",
    "output_file_problem",
    "parse_size",
    "parse_sizes",
    "resolve_model",
    "seconds_problem",
    "selection",
    "split",
]

#: Collectives benched by default (the main ones of the two articles the examples follow,
#: and of nccl-tests).
DEFAULT_COLLECTIVES: tuple[str, ...] = (
    "bcast", "reduce", "allreduce", "reduce_scatter_block", "allgather", "alltoall",
    "gather", "scatter",
)
#: Default ``-m``: 8 B to 4 MiB, which keeps ``make bench`` (4 ranks, 2 cores) to a few minutes.
DEFAULT_SIZES = "8:4M"


_SUFFIX = {"": 1, "B": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}


def parse_size(text: str) -> int:
    """Bytes of ``"8"``, ``"64K"``, ``"16M"``, ``"1G"`` (binary suffixes, case-insensitive).

    Raises:
        ValueError: not a non-negative integer with an optional K/M/G (or KiB/MB...) suffix.
    """
    t = text.strip().upper().replace("IB", "").rstrip("B") if text.strip() else ""
    num = t.rstrip("KMG")
    suffix = t[len(num):]
    if not num.isdigit() or suffix not in _SUFFIX:
        raise ValueError(f"invalid size {text!r}: expected bytes such as 8, 64K, 16M, 1G")
    return int(num) * _SUFFIX[suffix]


def parse_sizes(text: str) -> list[int]:
    """Sizes of ``"MIN:MAX"`` (MIN, 2 MIN, 4 MIN, ... <= MAX), of ``"MIN:MAX:F"`` (MIN, F MIN,
    F^2 MIN, ... <= MAX: nccl-tests' step factor, for a coarse sweep) or of a single ``"SIZE"``.

    Raises:
        ValueError: bad size, MIN > MAX, MIN = 0 with MAX > 0, or F not an integer >= 2.
    """
    factor = 2
    if text.count(":") == 2:
        text, _, f_s = text.rpartition(":")
        if not f_s.isdigit() or int(f_s) < 2:
            raise ValueError(f"invalid step factor {f_s!r}: expected an integer >= 2")
        factor = int(f_s)
    if ":" in text:
        lo_s, _, hi_s = text.partition(":")
        lo, hi = parse_size(lo_s), parse_size(hi_s)
    else:
        lo = hi = parse_size(text)
    if lo > hi:
        raise ValueError(f"invalid size range {text!r}: MIN > MAX")
    if lo == 0:
        if hi:
            raise ValueError(f"invalid size range {text!r}: MIN must be >= 1 (sizes double)")
        return [0]
    sizes = []
    s = lo
    while s <= hi:
        sizes.append(s)
        s *= factor
    return sizes


def split(values: Sequence[str] | None) -> list[str]:
    """The words of repeated, comma- or space-separated option values: ``["a,b", "c"]`` ->
    ``["a", "b", "c"]``."""
    return [x for v in values or [] for x in v.replace(",", " ").split() if x]


def selection(args: argparse.Namespace, default_collectives: Sequence[str],
              default_algorithms: Sequence[str], keywords: Sequence[str],
              error: Callable[[str], Any]) -> tuple[list[str], list[str]]:
    """The ``-c`` collectives and ``-a`` algorithms of bench, verify and simulate, checked
    against the registry (``all`` for -c means every collective; ``keywords`` are the -a words
    besides algorithm names, e.g. auto/all/none); ``error(message)`` raises."""
    from ..algorithms import registry

    colls = split(args.collective) or list(default_collectives)
    if colls == ["all"]:
        colls = list(registry.COLLECTIVES)
    for c in colls:
        if c not in registry.COLLECTIVES:
            error(f"argument -c/--collective: unknown collective {c!r} "
                  f"(choose from {', '.join(registry.COLLECTIVES)}, all)")
    algs = split(args.algorithm) or list(default_algorithms)
    known = {a.name for c in colls for a in registry.algorithms(c)}
    for a in algs:
        if a not in keywords and not any(registry.known(c, a) for c in colls):
            error(f"argument -a/--algorithm: unknown algorithm {a!r} for {', '.join(colls)} "
                  f"(choose from {', '.join([*keywords, *sorted(known)]) or '-'})")
    return colls, algs


def algorithms_of(coll: str, requested: Sequence[str], node_aware: bool = True) -> list[str]:
    """The p2p implementations of ``coll`` that a ``-a`` list selects, in the order asked.

    ``auto`` selects ``auto``; ``all`` every registered algorithm of ``coll`` (the node-aware
    ones only if ``node_aware``); ``none`` nothing; a registry name itself if ``coll`` has it
    (names of other collectives are skipped).  bench, verify and simulate resolve ``-a`` here.
    """
    from ..algorithms import registry

    every = registry.algorithms(coll)
    names = [a.name for a in every]
    out: list[str] = []
    for tok in requested:
        if tok == "all":
            picks = [a.name for a in every if a.auto or node_aware]
        elif tok == "auto":
            picks = ["auto"]
        else:
            picks = [tok] if tok in names or registry.known(coll, tok) else []
        out += [a for a in picks if a not in out]
    return out


def seconds_problem(option: str, value: float) -> str | None:
    """The usage error of a ``--timeout``-like option (finite, >= 0; 0: no limit), or None."""
    if math.isfinite(value) and value >= 0:
        return None
    return f"argument {option}: must be a finite number of seconds >= 0 (0: no limit), got " \
           f"{value:g}"


def output_file_problem(option: str, path: str) -> str | None:
    """None if ``path`` can be written, else the usage error for ``option``: a directory, a
    missing directory, a directory where no file can be created, or a read-only file.

    Made before anything runs (a test file is created in the directory and removed), so a run
    never ends by failing to save its results."""
    full = os.path.abspath(path)
    if os.path.isdir(full):
        return f"argument {option}: {path!r} is a directory, not a file"
    d = os.path.dirname(full)
    if not os.path.isdir(d):
        return f"argument {option}: directory {d!r} does not exist"
    try:
        with tempfile.TemporaryFile(dir=d):
            pass
    except OSError as exc:
        return f"argument {option}: cannot write in directory {d!r} ({exc.strerror or exc})"
    if os.path.exists(full) and not os.access(full, os.W_OK):
        return f"argument {option}: {path!r} exists and is not writable"
    return None


def resolve_model(path: str | None = None) -> tuple[Model, str]:
    """The cost model in use and a phrase saying where it came from.

    ``path`` given: that file (ValueError if it is missing or not a model file).  Otherwise the
    calibrated file :func:`mpicoll.model.load` finds (``$MPICOLL_MODEL`` or
    ``~/.cache/mpicoll/model.json``), else :data:`mpicoll.model.DEFAULT`.
    """
    from ..model import alphabeta as _model

    if path is not None:
        m = _model.load(path)
        if m is None:
            raise ValueError(f"{path!r} is not a readable model file (run: mpicoll calibrate)")
        return m, f"file {path}"
    m = _model.load()
    if m is not None:
        return m, f"calibrated ({_model.default_path()})"
    return _model.DEFAULT, f"default (nothing calibrated at {_model.default_path()})"



