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
# the suite's nodes live seconds to minutes, on two cores shared by three passes: C2's compilations
# cost them more CPU than they give back (measured: scripts/jvm_start_cpu.py, docs/results/ci-time.txt);
# JVM_EXTRA_OPTS is Cassandra's own variable, read at each start, so a set one is kept
export JVM_EXTRA_OPTS="${JVM_EXTRA_OPTS--XX:TieredStopAtLevel=1}"
.venv/bin/asgard stores up
# the disk before and after: MinIO refuses writes and pip fails near a full disk (seen in CI)
df -h . "${TMPDIR:-/tmp}" | sed "s/^/disk: /"

# Three pytest processes at once, as this machine's two cores measured them busy at about two
# thirds with one (the rest waits on JVM starts, gossip and subprocesses) and at 90% with three (so
# moving a test between passes moves the wait; less CPU work is what shortens CI: docs/results/ci-time.txt):
# - the main pass: every test of the suite's node (127.0.0.1), Redis and MinIO;
# - the ring across emulated hosts (tests/test_hosts_ring.py: its own namespaces, addresses,
#   members and Dagster instance; mostly waiting on gossip, drains and hint deliveries), then the
#   celery workers on the same hosts' names (tests/test_celery_hosts.py), then the Airflow XCom files
#   on the suite's node (airflow_keyspace below), so that the three passes end close together;
# - the files that start nodes of their own on loopback (own_nodes below: no instance index of theirs
#   is one the main pass starts), and the wheel's, whose installs are CPU the main pass has not to wait on
#   (its runs on the suite's node are dry runs: they change nothing the main pass reads).
# Their logs follow the main one. With test paths given, pytest runs just those.
beside=(tests/test_hosts_ring.py tests/test_celery_hosts.py)
# every file whose DAG runs write to the keyspace asgard_airflow_test, in one process: `asgard airflow
# purge` drops that keyspace's runs its Airflow home does not know, another process's too
airflow_keyspace=(tests/test_airflow_xcom.py tests/test_airflow_xcom_semantics.py tests/test_airflow_placement.py
  tests/test_replicas_per_object.py tests/test_airflow_task_settings.py)
own_nodes=(tests/test_rolling_retune.py tests/test_cassandra_ring.py tests/test_cassandra_runtime.py
  tests/test_patches_differential.py tests/test_ring_orders.py tests/test_tuner_calibration.py tests/test_numa.py
  tests/test_patches_read_repair.py tests/test_unmanaged_cluster.py tests/test_hand_started_cassandra.py
  tests/test_tuner_models.py tests/test_cassandra_auth.py tests/test_cassandra_tls.py tests/test_ring_ca.py
  tests/test_patch_build.py tests/test_layout.py tests/test_network.py tests/test_bench_day_cloud.py tests/test_wheel.py)
for arg in "$@"; do
  if [ -e "${arg%%::*}" ]; then beside=(); fi
done
if [ ${#beside[@]} -gt 0 ]; then
  beside_log=$(mktemp -t asgard-hosts-ring.XXXXXX.log)
  beside_xml=$(mktemp -t asgard-hosts-ring.XXXXXX.xml)
  # the suite's keyspace is the main pass's to drop when it ends (tests/conftest.py), not this pass's
  ASGARD_TEST_KEEP_KEYSPACE=1 .venv/bin/python -m pytest "$@" -p no:cacheprovider --junitxml="$beside_xml" \
    "${beside[@]}" "${airflow_keyspace[@]}" >"$beside_log" 2>&1 &
  beside_pid=$!
  own_log=$(mktemp -t asgard-own-nodes.XXXXXX.log)
  own_xml=$(mktemp -t asgard-own-nodes.XXXXXX.xml)
  ASGARD_TEST_KEEP_KEYSPACE=1 .venv/bin/python -m pytest "$@" -p no:cacheprovider --junitxml="$own_xml" "${own_nodes[@]}" >"$own_log" 2>&1 &
  own_pid=$!
  main_xml=$(mktemp -t asgard-main-pass.XXXXXX.xml)
  set +e
  .venv/bin/python -m pytest "$@" --junitxml="$main_xml" "${beside[@]/#/--ignore=}" "${own_nodes[@]/#/--ignore=}" \
    "${airflow_keyspace[@]/#/--ignore=}"
  main_rc=$?
  wait "$own_pid"
  own_rc=$?
  wait "$beside_pid"
  beside_rc=$?
  set -e
  echo "=== ${own_nodes[*]} (beside the rest) ==="
  cat "$own_log"
  echo "=== ${beside[*]} ${airflow_keyspace[*]} (beside the rest) ==="
  df -h . "${TMPDIR:-/tmp}" | sed "s/^/disk: /"
  cat "$beside_log"
  # last, where a CI log's tail keeps it: each failure of the three passes with its error's end
  .venv/bin/python scripts/failures_summary.py "$own_xml" "the own-nodes pass"
  .venv/bin/python scripts/failures_summary.py "$beside_xml" "the hosts' pass"
  .venv/bin/python scripts/failures_summary.py "$main_xml"
  if [ "$main_rc" -ne 0 ] || [ "$own_rc" -ne 0 ] || [ "$beside_rc" -ne 0 ]; then
    echo "tests failed: main pass exit $main_rc, own nodes exit $own_rc, the hosts' pass exit $beside_rc" >&2
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
