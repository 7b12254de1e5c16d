#!/usr/bin/env bash
# Set up everything (first time), start the real servers the tests talk to (Cassandra,
# Redis, MinIO on loopback) and run the test suite. Arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
.venv/bin/asgard stores up
.venv/bin/python -m pytest "$@"
