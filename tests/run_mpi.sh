#!/usr/bin/env bash
# Run the MPI test suite once per rank count: mpiexec -n P python -m pytest --with-mpi ...
#
# usage: tests/run_mpi.sh [-n "1 2 3 4 5"] [-t SECONDS] [-x] [-- PYTEST_ARGS...]
#   -n LIST     rank counts to run, in order            (default: $NP_LIST or "1 2 3 4 5")
#   -t SECONDS  outer wall-clock limit per mpiexec run  (default: $RUN_TIMEOUT or 900)
#   -x          stop at the first rank count that fails (default: run them all)
#   PYTEST_ARGS passed to every pytest (e.g. -q, -k EXPR, -m large, a test file); tests/mpi is
#               added when none of them names an existing file or directory
# environment:
#   MPIEXEC     launcher and its flags                  (default: mpiexec)
#   PYTHON      interpreter that has mpicoll's test extra (default: python3)
#
# Every rank runs pytest; tests/conftest.py keeps ranks other than 0 quiet, and makes a failure
# (or a test past --timeout) on any rank print "[rank R] ..." and abort the whole job. The
# outer limit is the last line of defence against a hang. Exits non-zero if any run fails,
# including pytest's status 5 (no tests collected).
set -uo pipefail

np_list=${NP_LIST:-1 2 3 4 5}
limit=${RUN_TIMEOUT:-900}
stop_first=0
while getopts "n:t:x" opt; do
    case $opt in
        n) np_list=$OPTARG ;;
        t) limit=$OPTARG ;;
        x) stop_first=1 ;;
        *) sed -n '2,13p' "$0" >&2; exit 2 ;;
    esac
done
shift $((OPTIND - 1))
has_path=0
for arg in "$@"; do
    [ -e "${arg%%::*}" ] && has_path=1
done
[ "$has_path" = 1 ] || set -- "$@" tests/mpi

read -r -a mpiexec <<<"${MPIEXEC:-mpiexec}"
python=${PYTHON:-python3}
# Colour only on a terminal: Open MPI hands its ranks a pseudo-terminal even when our output
# goes to a file or a CI log.
if [ -t 1 ]; then color=yes; else color=no; fi

describe() {  # describe RC: what an exit status of mpiexec/pytest means
    case $1 in
        0) echo "passed" ;;
        1) echo "FAILED (a test failed, or a rank aborted)" ;;
        2) echo "FAILED (interrupted)" ;;
        3) echo "FAILED (pytest internal error)" ;;
        4) echo "FAILED (pytest usage error)" ;;
        5) echo "FAILED (no tests collected)" ;;
        124 | 137) echo "FAILED (hit the outer limit of ${limit} s)" ;;
        *) echo "FAILED (exit status $1)" ;;
    esac
}

summary=()
failed=0
for np in $np_list; do
    cmd=("${mpiexec[@]}" -n "$np" "$python" -m pytest --with-mpi -p no:cacheprovider
         --color="$color" "$@")
    printf '\n===== P=%s: %s\n' "$np" "${cmd[*]}"
    start=$SECONDS
    timeout -k 20 "$limit" "${cmd[@]}"
    rc=$?
    took=$((SECONDS - start))
    line=$(printf 'P=%-3s %4d s  %s' "$np" "$took" "$(describe "$rc")")
    printf '\n===== %s\n' "$line"
    summary+=("$line")
    if [ "$rc" -ne 0 ]; then
        failed=1
        [ "$stop_first" = 1 ] && break
    fi
done

printf '\n===== MPI test summary (%s)\n' "${mpiexec[*]}"
printf '  %s\n' "${summary[@]}"
exit "$failed"
