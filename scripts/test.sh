#!/usr/bin/env bash
# Set up everything (first time), start the real servers the tests talk to (Cassandra,
# Redis, MinIO on loopback) and run the test suite. Arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
# the suite's Cassandra has the same heap on any machine (the tuner's knob space was calibrated
# on 2 GiB heaps; the NUMA plan's own sizing rule is tested in tests/test_numa.py)
export ASGARD_CASSANDRA_HEAP="${ASGARD_CASSANDRA_HEAP:-2G}"
.venv/bin/asgard stores up
.venv/bin/python -m pytest "$@"
