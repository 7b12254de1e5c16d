#!/usr/bin/env bash
# Set up everything (first time), start the local Cassandra and run the fan-out/fan-in demo
# job through Dagster's multiprocess executor, every op output stored in Cassandra.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
.venv/bin/asgard cassandra up
export DAGSTER_HOME=${DAGSTER_HOME:-$(pwd)/dagster_home}
mkdir -p "$DAGSTER_HOME"
.venv/bin/python -m asgard.pipelines.run_demo "$@"
