#!/usr/bin/env bash
# All set-up on a fresh machine, idempotent: system packages, the Python environment in
# .venv, the Cassandra jars, the MinIO and Toxiproxy binaries. Later runs reuse what is there.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
export ASGARD_HOME=${ASGARD_HOME:-$ROOT/.asgard}
say() { printf '\n== %s\n' "$*"; }

need_apt=()
command -v java >/dev/null || need_apt+=(openjdk-17-jre-headless)
command -v mvn >/dev/null || need_apt+=(maven)
command -v redis-server >/dev/null || need_apt+=(redis-server)
command -v numactl >/dev/null || need_apt+=(numactl)
# `ip netns`, `ip link` and `tc` for the network profiles (resources/network)
{ command -v ip >/dev/null && command -v tc >/dev/null; } || need_apt+=(iproute2)
# Debian's browser and its driver: tests/test_ui.py drives the Dagster UI (nothing downloads one)
command -v chromium >/dev/null || need_apt+=(chromium)
command -v chromedriver >/dev/null || need_apt+=(chromium-driver)
command -v ffmpeg >/dev/null || true
if [ ${#need_apt[@]} -gt 0 ]; then
  say "apt-get install ${need_apt[*]}"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need_apt[@]}" >/dev/null
  # Debian's package starts a system redis on 6379; the project runs its own
  (command -v systemctl >/dev/null && $SUDO systemctl disable --now redis-server 2>/dev/null) || \
    $SUDO service redis-server stop 2>/dev/null || true
fi

if [ ! -x .venv/bin/python ]; then
  say "python venv in .venv"
  python3 -m venv .venv
fi
stamp=.venv/.asgard-installed
if [ ! -f "$stamp" ] || [ setup.py -nt "$stamp" ]; then
  # uv resolves and installs as pip does, in about a minute here where pip took several (torch and its
  # CUDA wheels, 6 GB); --compile-bytecode as pip does: with PYTHONDONTWRITEBYTECODE set (as on this
  # machine) nothing writes a .pyc later, and every process would compile every module it imports
  say "uv pip install -e .[all] (first time: about a minute, torch is large)"
  .venv/bin/pip install -q --upgrade pip "uv>=0.13,<0.14"
  .venv/bin/python -m uv pip install -q --compile-bytecode --python .venv/bin/python -e ".[all]"
  touch "$stamp"
fi

# the Go builds (MinIO's about 4 minutes of CPU the first time) beside the driver's and Cassandra's
# downloads, which mostly wait on the network and the disk; their output follows when both are done
go_log=$(mktemp -t asgard-setup-go.XXXXXX.log)
(
  say "MinIO (go install once, about 4 minutes the first time)"
  .venv/bin/python -c "from asgard.resources.minio import install_minio; print(install_minio(quiet=False))"
  say "Toxiproxy (go install once, seconds): the delay and per-connection rate of the network profiles"
  .venv/bin/python -c "from asgard.resources.network.toxiproxy import install_toxiproxy; print(install_toxiproxy())"
) >"$go_log" 2>&1 &
go_pid=$!

say "scylla-driver beside cassandra-driver (asgard bench drivers measures the store on both; pinned, once)"
.venv/bin/python -c "from asgard_bench.drivers import install_driver; print(install_driver('scylla-driver'))"

say "Cassandra jars (mvn, once)"
.venv/bin/python -c "from asgard.resources.cassandra import install; print(install())"
# the releases a user's own node is tested on, started by hand (tests/test_hand_started_cassandra.py)
.venv/bin/python -c "from asgard.resources.cassandra.install import TESTED_RELEASES, install
for version in TESTED_RELEASES: print(install(version, tools=False))"
# the AppCDS archive of a Cassandra start: built from the class list the first start on this
# machine records (none yet on a fresh machine: that start then builds it in the background)
.venv/bin/python -c "from asgard.resources.cassandra.install import build_cds_archive; print(build_cds_archive() or 'CDS archive: after the first start')"

go_rc=0
wait "$go_pid" || go_rc=$?
cat "$go_log"
rm -f "$go_log"
if [ "$go_rc" -ne 0 ]; then
  echo "set-up failed: the MinIO or Toxiproxy build (exit $go_rc; its output above)" >&2
  exit "$go_rc"
fi
say "set-up done"
