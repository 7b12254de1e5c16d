#!/usr/bin/env bash
# Set up everything (first time), start the real servers the tests talk to (Cassandra,
# Redis, MinIO on loopback) and run the test suite. Arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
# the four layers (.importlinter): the client, the two adapters, the tuner, the lab
.venv/bin/lint-imports --no-cache
# the fast tier: no server, seconds (tests marked fast); the full suite stays CI's
if [ "${1:-}" = "--fast" ]; then
  shift
  exec .venv/bin/python -m pytest -m fast -p no:cacheprovider "$@"
fi
# the suite's Cassandra has the same heap on any machine (the tuner's knob space was calibrated
# on 2 GiB heaps; the NUMA plan's own sizing rule is tested in tests/test_numa.py)
export ASGARD_CASSANDRA_HEAP="${ASGARD_CASSANDRA_HEAP:-2G}"
.venv/bin/asgard stores up
# the disk before and after: MinIO refuses writes and pip fails near a full disk (seen in CI)
df -h . "${TMPDIR:-/tmp}" | sed "s/^/disk: /"

# The ring across emulated hosts (tests/test_hosts_ring.py: its own namespaces, addresses, members
# and Dagster instance; nothing of the loopback servers) spends most of its ten minutes waiting on
# gossip, drains and hint deliveries. On a whole-suite run it runs in a second pytest beside the
# rest, and after it the celery workers on the same hosts' names (tests/test_celery_hosts.py, about
# four minutes: `asgard hosts up`, runs, `asgard hosts down`); their log follows the main one.
# With test paths given, pytest runs just those.
beside=(tests/test_hosts_ring.py tests/test_celery_hosts.py)
for arg in "$@"; do
  if [ -e "${arg%%::*}" ]; then beside=(); fi
done
if [ ${#beside[@]} -gt 0 ]; then
  beside_log=$(mktemp -t asgard-hosts-ring.XXXXXX.log)
  .venv/bin/python -m pytest "$@" -p no:cacheprovider "${beside[@]}" >"$beside_log" 2>&1 &
  beside_pid=$!
  main_xml=$(mktemp -t asgard-main-pass.XXXXXX.xml)
  set +e
  .venv/bin/python -m pytest "$@" --junitxml="$main_xml" "${beside[@]/#/--ignore=}"
  main_rc=$?
  wait "$beside_pid"
  beside_rc=$?
  set -e
  echo "=== ${beside[*]} (beside the rest) ==="
  df -h . "${TMPDIR:-/tmp}" | sed "s/^/disk: /"
  cat "$beside_log"
  # last, where a CI log's tail keeps it: each failure of the main pass with its error's end
  .venv/bin/python scripts/failures_summary.py "$main_xml"
  if [ "$main_rc" -ne 0 ] || [ "$beside_rc" -ne 0 ]; then
    echo "tests failed: main pass exit $main_rc, ${beside[*]} exit $beside_rc" >&2
    exit 1
  fi
else
  .venv/bin/python -m pytest "$@"
fi

# A user's own cluster runs the release's classes, not the project's patches: the store and
# IO-manager suites again, on the local node restarted on the release alone. A test that needs
# a patch is marked needs_patches and is the only one left out.
.venv/bin/asgard cassandra down
ASGARD_CASSANDRA_PATCHES=0 .venv/bin/asgard cassandra up
ASGARD_TEST_ON_RELEASE=1 .venv/bin/python -m pytest "$@" -m "not needs_patches" -p no:cacheprovider \
  tests/test_cassandra_io_manager.py tests/test_cassandra_first_requests.py tests/test_cassandra_data_path.py \
  tests/test_store_mechanism.py tests/test_io_shapes.py tests/test_cql_client.py \
  tests/test_payload_signing.py
# back to the project's own node for whatever runs next on this machine (not in CI: nothing runs
# next there, and the restart is half a minute of its time)
.venv/bin/asgard cassandra down
if [ -z "${ASGARD_CI:-}" ]; then
  .venv/bin/asgard cassandra up
fi
