"""The algorithms that segment their reductions (every rank count, commutative op): what
tests/unit/test_overlap.py and tests/mpi/test_overlap.py both sweep."""

SEGMENTED = [
    ("allreduce", "ring"), ("allreduce", "rabenseifner"), ("allreduce", "reduce_bcast"),
    ("allreduce", "segmented_ring"),
    ("reduce", "binomial"), ("reduce", "rabenseifner"),
    ("reduce_scatter_block", "ring"), ("reduce_scatter_block", "pairwise"),
    ("reduce_scatter_block", "recursive_halving"), ("reduce_scatter_block", "reduce_scatterv"),
    ("reduce_scatter", "ring"), ("reduce_scatter", "pairwise"),
    ("reduce_scatter", "recursive_halving"), ("reduce_scatter", "reduce_scatterv"),
]
