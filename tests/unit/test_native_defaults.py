"""The libraries' default selection (:mod:`mpicoll.algorithms.native_defaults`) against their
sources, at points checked by hand: MPICH v5.0.1 ``maint/tuning/coll/mpir/generic.json``
("generic.json:N": its line N) and ``ch4/generic.json``; Open MPI v5.0.10
``ompi/mca/coll/tuned/coll_tuned_decision_fixed.c`` ("fixed.c:N").  Sizes are float64
elements (8 bytes each)."""

from __future__ import annotations

import pytest

from mpicoll import registry
from mpicoll.algorithms.native_defaults import (
    MPICH_CH4,
    MPICH_TREE,
    OMPI_FIXED,
    library_default,
)
from mpicoll.algorithms.twins import MPICH, OMPI


def pick(library: str, coll: str, p: int, count: int, **kw: object) -> tuple[str, str | None]:
    d = library_default(library, coll, p, count, 8, **kw)  # type: ignore[arg-type]
    return d.native, d.p2p


@pytest.mark.parametrize(("coll", "p", "count", "native", "p2p"), [
    # allreduce: avg_msg_size<=8 -> recursive_doubling (generic.json:116)
    ("allreduce", 64, 1, "recursive_doubling", "recursive_doubling"),
    # 16 B, count 2 < pof2(64): count<pow2 -> recursive_doubling (generic.json:128)
    ("allreduce", 64, 2, "recursive_doubling", "recursive_doubling"),
    # 1 MiB, built-in op, count >= pof2 -> reduce_scatter_allgather (generic.json:132)
    ("allreduce", 64, 131072, "reduce_scatter_allgather", "rabenseifner"),
    # bcast P = 8: "comm_size<8" is tested as P <= 8 (csel.c COMM_SIZE_LT), any size ->
    # binomial (generic.json:6-16), even at 1 MiB
    ("bcast", 8, 131072, "binomial", "binomial"),
    # P = 16 (pow2), 64 KiB <= 524288 -> scatter_recursive_doubling_allgather (generic.json:56)
    ("bcast", 16, 8192, "scatter_recursive_doubling_allgather", "scatter_allgather"),
    # P = 12 (not pow2), 64 KiB > 12288 -> scatter_ring_allgather (generic.json:89)
    ("bcast", 12, 8192, "scatter_ring_allgather", "scatter_ring_allgather"),
    # allgather P = 5, total 5 x 8 KiB = 40 KiB < 81920 -> brucks (generic.json:161)
    ("allgather", 5, 1024, "brucks", "bruck"),
    # alltoall P = 16, 256 B per peer -> brucks (generic.json:459)
    ("alltoall", 16, 32, "brucks", "bruck"),
    # alltoall P = 8 ("comm_size<8": P <= 8), 1 KiB <= 32768 -> scattered (generic.json:448)
    ("alltoall", 8, 128, "scattered", "scattered"),
    # reduce P = 64, 1 MiB, built-in op, count >= pof2 -> reduce_scatter_gather
    # (generic.json:262)
    ("reduce", 64, 131072, "reduce_scatter_gather", "rabenseifner"),
    # reduce 2 KiB <= 2048 -> binomial (generic.json:251-253)
    ("reduce", 64, 256, "binomial", "binomial"),
    # barrier, flat -> k_dissemination, k=2 (generic.json:424)
    ("barrier", 64, 0, "k_dissemination", "k_dissemination"),
    ("gather", 64, 1000, "binomial", "binomial"),
    ("scatter", 3, 1000, "binomial", "binomial"),
    # reduce_scatter(_block): commutative, total < 524288 -> recursive_halving, else pairwise
    ("reduce_scatter_block", 4, 1000, "recursive_halving", "recursive_halving"),
    ("reduce_scatter_block", 4, 1 << 16, "pairwise", "pairwise"),
])
def test_mpich_flat(coll: str, p: int, count: int, native: str, p2p: str) -> None:
    assert pick("mpich", coll, p, count) == (native, p2p)
    assert registry.known(coll, p2p)


def test_mpich_op_and_buffer_inputs() -> None:
    # a user op: is_op_built_in=no -> recursive_doubling at any size (generic.json:119-122)
    assert pick("mpich", "allreduce", 64, 131072, builtin_op=False)[0] == "recursive_doubling"
    # reduce_scatter_block, non-commutative: pow2 -> noncommutative, else recursive_doubling
    assert pick("mpich", "reduce_scatter_block", 8, 10, commutative=False)[0] == \
        "noncommutative"
    assert pick("mpich", "reduce_scatter_block", 6, 10, commutative=False)[0] == \
        "recursive_doubling"
    # reduce_scatter with uneven counts: is_block_regular=no -> recursive_doubling
    assert pick("mpich", "reduce_scatter", 8, 10, commutative=False, uniform=False)[0] == \
        "recursive_doubling"
    # in place alltoall -> pairwise_sendrecv_replace
    assert pick("mpich", "alltoall", 16, 32, in_place=True)[0] == "pairwise_sendrecv_replace"


def test_mpich_nodes() -> None:
    """One node: POSIX release_gather (no twin) for bcast, barrier and commutative
    allreduce/reduce; the others walk the tree as a parent communicator.  Several nodes:
    the ch4 compositions (node-aware -> smp)."""
    d = library_default("mpich", "bcast", 4, 100, 8, ranks_per_node=4)
    assert (d.native, d.p2p) == ("release_gather", None)
    assert "release_gather" in str(d.why)
    # non-commutative allreduce on one node: the MPIR tree
    assert pick("mpich", "allreduce", 4, 1, commutative=False, ranks_per_node=4)[0] == \
        "recursive_doubling"
    # P = 8 on 2 nodes of 4, commutative allreduce: composition alpha (ch4/generic.json)
    d = library_default("mpich", "allreduce", 8, 1000, 8, ranks_per_node=4)
    assert (d.native, d.p2p) == ("MPIDI_Allreduce_intra_composition_alpha", "smp")
    # bcast on 2 nodes of 8, pow2, 1 MiB -> composition gamma: the flat MPIR tree (parent:
    # scatter_ring_allgather above 524288)
    assert pick("mpich", "bcast", 16, 131072, ranks_per_node=8) == \
        ("scatter_ring_allgather", "scatter_ring_allgather")
    # allgather has no node-aware composition: the tree
    assert pick("mpich", "allgather", 16, 1, ranks_per_node=4)[0] == "recursive_doubling"


@pytest.mark.parametrize(("coll", "p", "count", "kw", "native", "p2p"), [
    # allreduce commutative P < 4, 8 <= S < 4096 -> 3 (fixed.c:124-125)
    ("allreduce", 2, 1, {}, "recursive_doubling", "recursive_doubling"),
    # P < 128, S < 262144 -> 3; else 6 (fixed.c:165-169)
    ("allreduce", 64, 1000, {}, "recursive_doubling", "recursive_doubling"),
    ("allreduce", 100, 1 << 17, {}, "rabenseifner", "rabenseifner"),
    # P < 64 (32..63), S < 128 -> 5 segmented_ring, with segment 0 the ring (fixed.c:159-161),
    # which coll/base runs as recursive_doubling since count < P
    ("allreduce", 40, 8, {}, "recursive_doubling", "recursive_doubling"),
    # non-commutative, P < 8 -> 3 (fixed.c:87-88)
    ("allreduce", 5, 1 << 20, {"commutative": False}, "recursive_doubling",
     "recursive_doubling"),
    # barrier: P < 8 -> 1 linear (fixed.c:484-485); P < 256 -> 4 bruck (fixed.c:488-489)
    ("barrier", 5, 0, {}, "linear", "linear"),
    ("barrier", 64, 0, {}, "bruck", "dissemination"),
    # bcast P < 8: S < 128 -> 6 binomial (fixed.c:564-565), Open MPI's bmtree; S >= 1 MiB ->
    # 2 chain, fanout 0 built as 1 (fixed.c:572-573)
    ("bcast", 6, 8, {}, "binomial", "bmtree"),
    ("bcast", 6, 1 << 17, {}, "chain", "chain:1"),
    # alltoall P == 2: 64 <= S < 256 -> 2 pairwise (fixed.c:262-263)
    ("alltoall", 2, 16, {}, "pairwise", "pairwise"),
    # P < 128, S < 1024 -> 3 modified_bruck (fixed.c:319-321)
    ("alltoall", 100, 8, {}, "modified_bruck", "bruck"),
    # allgather P == 2 -> 6 two_proc; P < 32 -> 3 recursive_doubling (fixed.c:1118-1121)
    ("allgather", 2, 100, {}, "two_proc", "two_proc"),
    ("allgather", 16, 100, {}, "recursive_doubling", "recursive_doubling"),
    # gather P < 256 -> 2 binomial (fixed.c:1439-1440)
    ("gather", 100, 1000, {}, "binomial", "binomial"),
])
def test_ompi_fixed(coll: str, p: int, count: int, kw: dict[str, bool], native: str,
                    p2p: str) -> None:
    assert pick("openmpi", coll, p, count, **kw) == (native, p2p)
    assert registry.known(coll, p2p)


def test_ompi_fallbacks_nodes_and_self() -> None:
    # allgather P < 32 -> recursive_doubling, which coll/base runs as bruck for P = 6
    d = library_default("openmpi", "allgather", 6, 100, 8)
    assert (d.native, d.p2p) == ("bruck", "bruck")
    assert "recursive_doubling falls back to bruck" in str(d.why)
    # allreduce P = 2, count 0: S < 8 -> 4 ring, which falls back (count < P)
    assert pick("openmpi", "allreduce", 2, 0) == ("recursive_doubling", "recursive_doubling")
    # several nodes: coll/han -> smp; one node: han disqualifies, tuned decides
    assert pick("openmpi", "allreduce", 8, 1000, ranks_per_node=4) == ("han", "smp")
    assert pick("openmpi", "allreduce", 8, 1000, ranks_per_node=8) == \
        pick("openmpi", "allreduce", 8, 1000)
    # han has no alltoall: tuned, P < 16, S < 262144 -> 4 linear_sync (fixed.c:289-291)
    assert pick("openmpi", "alltoall", 8, 1000, ranks_per_node=4)[0] == "linear_sync"
    assert library_default("openmpi", "bcast", 1, 10, 8).native == "self"


def test_every_leaf_is_a_library_name_with_a_known_twin() -> None:
    """Every MPICH leaf is a forceable algorithm name (or smp, a composition); every Open MPI
    ID is in the tuned table; P and size bounds ascend."""
    def leaves(node: object) -> list[str]:
        return [node] if isinstance(node, str) else [x for _, sub in node  # type: ignore[attr-defined]
                                                     for x in leaves(sub)]
    for coll, tree in MPICH_TREE.items():
        for leaf in leaves(tree):
            assert leaf in MPICH[coll], (coll, leaf)
    for tree in MPICH_CH4.values():
        assert set(leaves(tree)) <= {"alpha", "beta", "gamma", "flat"}
    for (coll, _), rows in OMPI_FIXED.items():
        bounds = [b for b, _ in rows]
        assert bounds[-1] is None
        assert bounds[:-1] == sorted(bounds[:-1])  # type: ignore[type-var]
        for _, rule in rows:
            pairs = [(None, rule)] if isinstance(rule, int) else list(rule)
            assert pairs[-1][0] is None
            for _, alg in pairs:
                assert alg in OMPI[coll], (coll, alg)


@pytest.mark.parametrize("library", ["mpich", "openmpi"])
@pytest.mark.parametrize("coll", ["allreduce", "bcast", "reduce", "allgather", "alltoall",
                                  "gather", "scatter", "reduce_scatter",
                                  "reduce_scatter_block", "barrier"])
def test_every_pick_has_a_twin_on_a_flat_communicator(library: str, coll: str) -> None:
    """At P in 2..9, 13, 64, 100 and sizes 8 B..16 MiB, flat: the pick has a registered twin
    that accepts the call (its restrictions), except Open MPI's basic_linear reduce_scatter
    composition, whose twin reduce_scatterv is registered too."""
    for p in (2, 3, 4, 5, 6, 7, 8, 9, 13, 64, 100):
        for count in (0, 1, 100, 1 << 14, 1 << 21):
            d = library_default(library, coll, p, count, 8)
            assert d.p2p is not None, (p, count, d)
            assert registry.known(coll, d.p2p), (p, count, d)
            registry.select(coll, p, d.p2p, nbytes=count * 8, count=count)


def test_bad_input() -> None:
    with pytest.raises(ValueError, match="library"):
        library_default("lam", "bcast", 4, 1, 8)
    with pytest.raises(ValueError, match="at least one rank"):
        library_default("mpich", "bcast", 0, 1, 8)
    with pytest.raises(ValueError, match="no decision function"):
        library_default("openmpi", "scan", 4, 1, 8)
