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
  tables; 0, ``ignore``, is the decision function and is not listed).  So far allreduce, bcast
  and allgather.

:data:`TWINS` maps each p2p algorithm of :mod:`mpicoll.algorithms.registry` to its MPICH name
and its Open MPI ID where the library runs the same algorithm (same rounds, same partners);
``None`` where it has none.  ``bench --native-algorithms`` reads it to print the
same-algorithm ratio ``p2p:X / native:X``; :func:`twin` and :func:`p2p_twin` are the look-ups.
"""

from __future__ import annotations

__all__ = ["MPICH", "OMPI", "TWINS", "p2p_twin", "twin"]

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

#: Open MPI 5 coll/tuned: collective -> {ID: name} of ``coll_tuned_<coll>_algorithm``.
OMPI: dict[str, dict[int, str]] = {
    "allreduce": {1: "basic_linear", 2: "nonoverlapping", 3: "recursive_doubling", 4: "ring",
                  5: "segmented_ring", 6: "rabenseifner", 7: "allgather_reduce"},
    "bcast": {1: "basic_linear", 2: "chain", 3: "pipeline", 4: "split_binary_tree",
              5: "binary_tree", 6: "binomial", 7: "knomial", 8: "scatter_allgather",
              9: "scatter_allgather_ring"},
    "allgather": {1: "linear", 2: "bruck", 3: "recursive_doubling", 4: "ring", 5: "neighbor",
                  6: "two_proc", 7: "sparbit"},
}

#: (collective, p2p algorithm) -> (MPICH name or None, Open MPI ID or None).
TWINS: dict[tuple[str, str], tuple[str | None, int | None]] = {
    ("barrier", "smp"): ("smp", None),
    ("bcast", "binomial"): ("binomial", 6),
    ("bcast", "scatter_allgather"): ("scatter_recursive_doubling_allgather", 8),
    ("bcast", "scatter_ring_allgather"): ("scatter_ring_allgather", 9),
    ("bcast", "pipeline"): (None, 3),
    ("bcast", "smp"): ("smp", None),
    ("scatter", "binomial"): ("binomial", None),
    ("scatterv", "linear"): ("linear", None),
    ("gather", "binomial"): ("binomial", None),
    ("gatherv", "linear"): ("linear", None),
    ("reduce", "binomial"): ("binomial", None),
    ("reduce", "rabenseifner"): ("reduce_scatter_gather", None),
    ("reduce", "smp"): ("smp", None),
    ("allreduce", "recursive_doubling"): ("recursive_doubling", 3),
    ("allreduce", "ring"): ("ring", 4),
    ("allreduce", "rabenseifner"): ("reduce_scatter_allgather", 6),
    ("allreduce", "reduce_bcast"): (None, 2),
    ("allreduce", "smp"): ("smp", None),
    ("reduce_scatter_block", "pairwise"): ("pairwise", None),
    ("reduce_scatter_block", "recursive_halving"): ("recursive_halving", None),
    ("reduce_scatter", "pairwise"): ("pairwise", None),
    ("reduce_scatter", "recursive_halving"): ("recursive_halving", None),
    ("allgather", "ring"): ("ring", 4),
    ("allgather", "recursive_doubling"): ("recursive_doubling", 3),
    ("allgather", "bruck"): ("brucks", 2),
    ("allgatherv", "ring"): ("ring", None),
    ("allgatherv", "bruck"): ("brucks", None),
    ("alltoall", "pairwise"): ("pairwise", None),
    ("alltoall", "scattered"): ("scattered", None),
    ("alltoall", "bruck"): ("brucks", None),
    ("alltoallv", "scattered"): ("scattered", None),
    ("alltoallw", "scattered"): ("scattered", None),
    ("scan", "recursive_doubling"): ("recursive_doubling", None),
    ("exscan", "recursive_doubling"): ("recursive_doubling", None),
}


def twin(collective: str, p2p_name: str, library: str) -> str | None:
    """The native name of p2p algorithm ``p2p_name``'s twin in ``library`` (``"mpich"`` or
    ``"openmpi"``: the Open MPI tuned name, whose ID :data:`OMPI` gives); None if none."""
    mpich, ompi = TWINS.get((collective, p2p_name), (None, None))
    if library == "mpich":
        return mpich
    if library == "openmpi" and ompi is not None:
        return OMPI[collective][ompi]
    return None


def p2p_twin(collective: str, native_name: str, library: str) -> str | None:
    """The p2p algorithm that is the twin of the library's ``native_name``; None if none."""
    for (coll, p2p_name) in TWINS:
        if coll == collective and twin(coll, p2p_name, library) == native_name:
            return p2p_name
    return None
