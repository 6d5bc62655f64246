#!/usr/bin/env bash
# `make test-slurm`: start a one-node SLURM cluster on this machine (scripts/slurm/cluster.sh),
# run the real-cluster test against it (tests/execution/test_slurm.py, marker `slurm`), stop the cluster.
# Where no cluster can run (not root, no apt-get, packages not installable) it says why, exit 0.
set -euo pipefail
cd "$(dirname "$0")/../.."
PYTHON=${PYTHON:-.venv/bin/python}
CLUSTER=scripts/slurm/cluster.sh

rc=0
"$CLUSTER" install || rc=$?
if [[ $rc == 3 ]]; then
    echo "test-slurm: skipped: no SLURM cluster can run on this machine (reason above)"
    exit 0
elif [[ $rc != 0 ]]; then
    exit "$rc"
fi
"$CLUSTER" stop # a cluster left over by an interrupted earlier run
trap '"$CLUSTER" stop' EXIT
"$CLUSTER" start || exit $?
eval "$("$CLUSTER" env)" # SLURM_CONF: the clients (and the test) talk to this cluster only
export ABLATE_TEST_SLURM=1
timeout 1200 "$PYTHON" -m pytest -q -rs -m slurm tests/execution/test_slurm.py "$@"
