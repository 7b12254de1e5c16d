"""One Dagster run's steps across emulated hosts on dagster-celery's executor: the deployment of
``asgard hosts up`` (3 network namespaces, each with its member of one Cassandra ring and its
celery worker; the broker on this machine's Redis), a job whose outputs go through the project's
``CassandraIOManager`` to the ring, each step routed to a host by its queue tag and reading what
a step on another host wrote. Needs root (namespaces); runs in scripts/test.sh's second pytest
with tests/test_hosts_ring.py (the same namespace names: one after the other)."""
from __future__ import annotations

import gc
import os
import subprocess
import sys
import time

import pytest

from asgard.resources.paths import REPO_ROOT
from asgard.resources.workers.deployment import EmulatedDeployment

AIRFLOW_DAGS = REPO_ROOT / "pipelines" / "airflow_dags"  # the apps' and asgard_hosts_check

# pytest-timeout counts a test's fixtures in: the module's deployment goes up in its first test's
# setup and down in its last one's teardown (a day of 12 minutes and then `hosts down` went over 900 s
# on a slow machine); each `asgard` call keeps its own limit below
pytestmark = pytest.mark.timeout(1800)


@pytest.fixture(scope="module")
def deployment():
    # through the command, which exits: its servers are then this machine's init's children, as in
    # use (a server whose parent lives on and never waits for it stays a zombie when another
    # process stops it)
    t0 = time.monotonic()
    said = _asgard("hosts", "up", "--count", "3", "--heap", "768M", "--code-path", str(REPO_ROOT),
                   "--worker-concurrency", "1", "--airflow-dags", str(AIRFLOW_DAGS))
    print(f"\n`asgard hosts up` of 3 hosts in {time.monotonic() - t0:.1f}s:\n{said}")
    deployment = EmulatedDeployment()
    from asgard.resources.stores.cql import CassandraObjectStore

    # the job's tables made once, from here: three first steps on three hosts creating them at once
    # made two versions of one table (a run failed with "table objects_index does not exist")
    try:  # a setup that fails here still takes the hosts down
        CassandraObjectStore(**deployment.ring().client_options(), keyspace="asgard_hosts",
                             replication_factor=3).ensure_schema()
        with deployment.client_environment_set():
            yield deployment
    finally:
        # the runs' celery results let go while their broker still answers (collected later, their
        # __del__ met a broker gone, and a collection inside pytest's own ast.parse crashed it)
        gc.collect()
        t0 = time.monotonic()
        _asgard("hosts", "down")
        print(f"`asgard hosts down` in {time.monotonic() - t0:.1f}s")
        # what the runs stored in the hosts' MinIO went with it (the stock peer never deletes)
        assert not deployment.object_store().data_dir.exists()


def _asgard(*args: str) -> str:
    out = subprocess.run([sys.executable, "-m", "asgard.cli", *args], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    return out.stdout


def _run(instance):
    from dagster import execute_job, reconstructable

    from tests.celery_hosts_job import celery_hosts_job

    t0 = time.monotonic()
    with execute_job(reconstructable(celery_hosts_job), instance=instance) as result:
        seconds = time.monotonic() - t0
        failures = [str(e.event_specific_data.error.message)[:500] for e in result.all_events if e.is_step_failure]
        assert result.success, failures
        events = list(result.all_events)
        return result.run_id, result.output_for_node("gather"), events, seconds


def _step_hosts(events) -> dict[str, str]:
    """Each step's host as the step itself saw it (its output's ``host`` metadata)."""
    return {e.step_key: e.event_specific_data.metadata["host"].value for e in events if e.is_successful_output}


def _step_workers(events) -> dict[str, str]:
    """Each step's celery worker, as dagster-celery's worker reported it (``dagster@<host>``)."""
    return {e.step_key: e.event_specific_data.metadata["Celery worker"].value for e in events
            if e.is_engine_event and "Celery worker" in (e.event_specific_data.metadata or {})}


def test_each_host_runs_its_ring_member_and_its_worker(deployment):
    rows = _asgard("hosts", "status", "--json")
    import json

    by_name = {r["name"]: r for r in json.loads(rows)}
    for host, member in zip(deployment.hosts.hosts, deployment.ring().members):
        worker = by_name[f"dagster-worker-{host.name}"]
        assert worker["ready"] and worker["netns"] == host.netns and worker["queues"] == [host.name, "dagster"]
        assert by_name[member.name]["ready"] and member.netns == host.netns
        # its agent of the ring's orders: a process in its namespace, on the host's own root
        agent = by_name[f"agent-{host.name}"]
        assert agent["ready"] and agent["netns"] == host.netns and agent["root"] == str(host.root)
        assert member.workdir.is_relative_to(host.root)
        # its Airflow celery worker, on the host's queue and Airflow's default one
        airflow_worker = by_name[f"airflow-worker-{host.name}"]
        assert airflow_worker["ready"] and airflow_worker["netns"] == host.netns
        assert airflow_worker["queues"] == [host.name, "default"]
    # each worker, asked through the broker, reads its host's queue first and keeps that order
    # (QUEUE_ORDER_STRATEGY; what kombu does with it: tests/test_celery_queue_order.py)
    for worker in [*deployment.workers(), *deployment.airflow_workers()]:
        inspect = worker.client().control.inspect(destination=[worker.node_name], timeout=10)
        conf = (inspect.conf(with_defaults=False) or {}).get(worker.node_name) or {}
        assert conf.get("broker_transport_options", {}).get("queue_order_strategy") == "priority", (worker.name, conf)
        active = (inspect.active_queues() or {}).get(worker.node_name) or []
        assert [q["name"] for q in active] == worker.queues, (worker.name, active)
    assert by_name["airflow-api-server"]["ready"]
    assert by_name["airflow-api-server"]["endpoint"] == f"http://{deployment.hosts.bridge_address}:8080"
    assert by_name["broker"]["ready"] and by_name["broker"]["endpoint"].startswith(f"redis://{deployment.hosts.bridge_address}:")
    # the S3 peers' MinIO, on the bridge too
    assert by_name["hosts-minio"]["ready"]
    assert by_name["hosts-minio"]["endpoint"] == f"http://{deployment.hosts.bridge_address}:9300"
    # the worker processes are in their hosts' namespaces (what /proc says, not what was asked)
    from asgard.resources.network.namespace import namespaces

    assert {h.netns for h in deployment.hosts.hosts} <= set(namespaces())
    for worker in [*deployment.workers(), *deployment.airflow_workers()]:
        ns = subprocess.run(["ip", "netns", "identify", str(worker.pid())], capture_output=True, text=True).stdout
        assert ns.strip() == worker.host, (worker.name, ns)


def test_one_dag_runs_tasks_execute_on_the_hosts_through_airflows_celery_executor(deployment):
    """`airflow dags test --use-executor` on the CeleryExecutor: each task on the worker of the host
    its queue names, the values between them in the ring, each task's log on its own host's root."""
    import json
    import re
    import sqlite3

    import numpy as np

    from asgard.resources.stores import ObjectKey
    from asgard.resources.stores.cql import CassandraObjectStore

    env = {**{k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW__")},
           **deployment.airflow_coordinator_environment(), "PYTHONPATH": str(REPO_ROOT)}
    t0 = time.monotonic()
    out = subprocess.run([os.path.join(os.path.dirname(sys.executable), "airflow"), "dags", "test",
                          "asgard_hosts_check", "--use-executor"], env=env, capture_output=True, text=True, timeout=600)
    text = out.stdout + out.stderr
    print(f"\nasgard_hosts_check on the CeleryExecutor: {time.monotonic() - t0:.1f}s")
    match = re.search(r"DagRun Finished: dag_id=asgard_hosts_check, logical_date=[^,]+, run_id=([^,]+),[^\n]*state=(\w+)", text)
    assert out.returncode == 0 and match, text[-5000:]
    run_id, state = match.groups()
    assert state == "success", text[-5000:]
    db = sqlite3.connect(deployment.state_dir() / "airflow" / "airflow.db")
    try:
        tasks = {t: (h, q, s) for t, h, q, s in db.execute(
            "SELECT task_id, hostname, queue, state FROM task_instance WHERE dag_id = ? AND run_id = ?",
            ("asgard_hosts_check", run_id))}
        # SQLite hands back a JSON number as an int
        xcoms = {t: json.loads(v) if isinstance(v, str) else v for t, v in db.execute(
            "SELECT task_id, value FROM xcom WHERE dag_id = ? AND run_id = ? AND key = 'return_value'",
            ("asgard_hosts_check", run_id))}
    finally:
        db.close()
    hosts = deployment.hosts.hosts
    address = {h.name: h.address for h in hosts}
    # each task ran on the worker of the host its queue names (its hostname: the host's address)
    for n in (1, 2, 3):
        assert tasks[f"produce_{n}"] == (address[f"asgard-h{n}"], f"asgard-h{n}", "success"), tasks
        reader = f"asgard-h{n % 3 + 1}"
        assert tasks[f"transform_{n}"] == (address[reader], reader, "success"), tasks
    assert tasks["gather"][1:] == ("default", "success") and tasks["gather"][0] in address.values(), tasks
    assert {h for h, _, _ in tasks.values()} == set(address.values())
    # the arrays went through the ring: Airflow's table holds references, read back from here
    store = CassandraObjectStore(**deployment.ring().client_options(), keyspace="asgard_hosts")
    for step, factor in (("produce", 1), ("transform", 2)):
        for n in (1, 2, 3):
            ref = xcoms[f"{step}_{n}"]
            assert ref["backend"] == "cassandra", ref
            value, _ = store.get(ObjectKey(ref["scope"], ref["path"]))
            assert np.array_equal(value, np.full(400_000, factor * n, dtype=np.int64)), (step, n)
    assert xcoms["gather"] == sum(2 * n * 400_000 for n in (1, 2, 3))
    # each task's log is on the root of the host that ran it, and says that host's namespace
    for task_id, (hostname, _, _) in tasks.items():
        host = next(h for h in hosts if h.address == hostname)
        log = host.root / "airflow" / "logs" / "dag_id=asgard_hosts_check" / f"run_id={run_id}" / f"task_id={task_id}" / "attempt=1.log"
        text = log.read_text()
        assert f"ASGARD-HOST {host.name}" in text, (task_id, log)
        # the worker imported what its tasks use before it forked them (asgard.pipelines.airflow_task_preload):
        # the task's process imported no installed module of its own
        after = re.search(r"ASGARD-PRELOAD imported after the fork: (\[.*?\])", text.replace('\\"', '"'))
        assert after and json.loads(after.group(1)) == [], (task_id, after and after.group(1), text[-3000:])


def test_one_runs_steps_execute_on_the_hosts_and_read_each_others_outputs(deployment, dagster_instance):
    from asgard.resources.stores import ObjectKey
    from asgard.resources.stores.cql import CassandraObjectStore
    from tests.celery_hosts_job import ELEMENTS, HOSTS

    run_id, total, events, seconds = _run(dagster_instance)
    print(f"\ncelery_hosts_job: {seconds:.1f}s")
    assert total == sum(2 * n * ELEMENTS for n in (1, 2, 3))
    hosts, workers = _step_hosts(events), _step_workers(events)
    assert set(hosts) == {"produce_1", "produce_2", "produce_3", "transform_1", "transform_2", "transform_3", "gather"}
    # each step ran where its queue tag sent it, and the worker that took it says the same
    for n in (1, 2, 3):
        assert hosts[f"produce_{n}"] == HOSTS[n - 1], hosts
        assert hosts[f"transform_{n}"] == HOSTS[n % 3], hosts
    assert hosts["gather"] in HOSTS
    assert {step: f"dagster@{host}" for step, host in hosts.items()} == workers
    assert len(set(hosts.values())) == 3
    # every consumer read its input on another host than the one that wrote it
    loaded = {(e.step_key, e.event_specific_data.input_name) for e in events if e.event_type_value == "LOADED_INPUT"}
    for n in (1, 2, 3):
        assert (f"transform_{n}", "arr") in loaded and (f"gather", f"part_{n}") in loaded
        assert hosts[f"transform_{n}"] != hosts[f"produce_{n}"]
    # each input's chunks were read at ONE from the member on the reader's host (chunk_reads="auto")
    ring = deployment.ring()
    member = {h.name: ring.members_of(h)[0].address for h in deployment.hosts.hosts}
    for e in events:
        if e.event_type_value == "LOADED_INPUT":
            read = {k: getattr(v, "value", v) for k, v in e.event_specific_data.metadata.items()}
            assert read["chunk_reads"] == "nearest-one", (e.step_key, read)
            assert f"this host's member ({member[hosts[e.step_key]]})" in read["chunk_reads_reason"], (e.step_key, read)
    # the outputs are in the ring, under the run, and read back from here
    store = CassandraObjectStore(**deployment.ring().client_options(), keyspace="asgard_hosts")
    paths = store.list_paths(f"run/{run_id}")
    assert {p.split("/")[0] for p in paths} == set(hosts), paths
    for path in paths:
        store.get(ObjectKey(f"run/{run_id}", path))


_TRANSFER = """
import socket, sys, time
role, address, size = sys.argv[1], sys.argv[2], int(sys.argv[3])
if role == "serve":
    server = socket.create_server((address, 5999))
    print("listening", flush=True)
    conn, _ = server.accept()
    got, t0 = 0, None
    while chunk := conn.recv(1 << 20):
        t0 = t0 or time.perf_counter()
        got += len(chunk)
    print(got, time.perf_counter() - t0, flush=True)
else:
    conn = socket.create_connection((address, 5999))
    block = bytes(1 << 20)
    for _ in range(size >> 20):
        conn.sendall(block)
    conn.close()
"""


def _mbit_between(sender, receiver, size: int = 32 << 20) -> float:
    """A TCP stream of ``size`` bytes from a process on ``sender`` to one on ``receiver``: Mbit/s received."""
    serve = subprocess.Popen([*receiver.exec_prefix(), sys.executable, "-c", _TRANSFER, "serve", receiver.address,
                              str(size)], stdout=subprocess.PIPE, text=True)
    try:
        assert serve.stdout.readline().strip() == "listening"
        subprocess.run([*sender.exec_prefix(), sys.executable, "-c", _TRANSFER, "send", receiver.address, str(size)],
                       check=True, timeout=120)
        got, seconds = serve.stdout.readline().split()
        assert int(got) == size
        return int(got) * 8 / float(seconds) / 1e6
    finally:
        serve.kill()
        serve.wait()


def test_hosts_up_with_a_link_rate_shapes_the_links_between_hosts_and_nothing_else(deployment, dagster_instance):
    """``asgard hosts up --link-mbit`` on the running deployment: each host's link capped both ways (tc
    HTB on its veth pair), traffic within a host not, the servers kept as they ran; a run across the
    shaped hosts still succeeds; ``--link-mbit 0`` takes the cap off."""
    import json

    h1, h2 = deployment.hosts.hosts[:2]
    pids = {w.name: w.pid() for w in deployment.workers()}
    try:
        _asgard("hosts", "up", "--link-mbit", "200")
        links = {r["name"]: r for r in json.loads(_asgard("hosts", "status", "--json")) if "link_mbit" in r}
        assert {name: r["link_mbit"] for name, r in links.items()} == {"link-h1": 200, "link-h2": 200, "link-h3": 200}
        assert {w.name: w.pid() for w in deployment.workers()} == pids  # only the links changed
        across, back, within = _mbit_between(h2, h1), _mbit_between(h1, h2), _mbit_between(h1, h1)
        print(f"\nat 200 Mbit/s: h2->h1 {across:.0f}, h1->h2 {back:.0f}, within h1 {within:.0f} Mbit/s")
        assert across <= 200 * 1.1 and back <= 200 * 1.1, (across, back)  # HTB lets a burst of a few KiB by
        assert within > 2 * 200, within
        _run(dagster_instance)  # its steps on three hosts, through the shaped links
    finally:
        _asgard("hosts", "up", "--link-mbit", "0")
    rates = deployment.hosts.link_rates()
    assert rates == {h.name: None for h in deployment.hosts.hosts}, rates
    unshaped = _mbit_between(h2, h1)
    assert unshaped > 2 * 200, unshaped


def test_a_step_reading_its_producer_alone_follows_it_to_its_host_and_reads_its_copy(deployment, dagster_instance):
    """The hosts' executor (asgard_dagster.step_routing): the ETL's partitions spread over the hosts
    from the shared queue; each partition's join follows its filter, and its aggregate its join, to
    the host that ran it, and reads the output from the copy kept there (placement auto, which
    weighs the copy by the store's reads as measured: codec auto measures them); the run's result
    is the one computed here."""
    import dagster as dg

    from asgard.pipelines.etl_columnar import expected_result
    from asgard.pipelines.jobs import run_app
    from asgard_bench.day import step_workers

    run = run_app("etl_columnar", "cassandra", fanout=6, scale=0.1, instance=dagster_instance, network="hosts3",
                  io_manager_config={"placement": "auto", "codec": "auto"})
    assert run.success and run.result == pytest.approx(expected_result(0.1, 6)), run.result
    workers = step_workers(dagster_instance, run.run_id)
    parts = [f"p{n:03d}" for n in range(6)]
    for part in parts:
        assert workers[f"join_customers[{part}]"] == workers[f"filter_orders[{part}]"], workers
        assert workers[f"aggregate[{part}]"] == workers[f"join_customers[{part}]"], workers
    # the partitions themselves went wherever a worker was free: more than one host took them
    assert len({workers[f"filter_orders[{p}]"] for p in parts}) > 1, workers
    # what the IO manager chose for each output (its handled-output metadata; no placement: the ring's)
    outputs = {e.step_key: {k: getattr(v, "value", v) for k, v in e.dagster_event.event_specific_data.metadata.items()}
               for e in dagster_instance.all_logs(run.run_id, of_type=dg.DagsterEventType.HANDLED_OUTPUT)}
    loads = {(e.step_key, e.dagster_event.event_specific_data.input_name):
             {k: getattr(v, "value", v) for k, v in e.dagster_event.event_specific_data.metadata.items()}
             for e in dagster_instance.all_logs(run.run_id, of_type=dg.DagsterEventType.LOADED_INPUT)}
    for part in parts:
        for producer, reader, input_name in ((f"filter_orders[{part}]", f"join_customers[{part}]", "orders"),
                                             (f"join_customers[{part}]", f"aggregate[{part}]", "joined")):
            out = outputs[producer]
            assert out.get("placement") == "producer-local", (producer, out)
            assert "host-routed celery executor sends its reader" in out["placement_reason"], (producer, out)
            assert loads[(reader, input_name)]["read_from"] == "local copy", (reader, loads[(reader, input_name)])
    # a step that follows nothing kept its queue: the fan-in ran wherever a worker was free
    assert workers["merge_aggregates"] in {f"dagster@{h.name}" for h in deployment.hosts.hosts}


def test_workers_stop_and_start_through_the_cli_and_a_run_goes_on(deployment, dagster_instance):
    said = _asgard("workers", "down")
    assert all(not w.is_running() for w in deployment.workers()), said
    said = _asgard("workers", "up")
    assert all(w.is_ready() for w in deployment.workers()), said
    # the next test's runs go on these restarted workers


def test_a_day_of_concurrent_runs_across_the_hosts_four_ways(deployment, tmp_path):
    """``asgard bench day --settings hosts3`` in miniature: the day's runs two at once, every
    step on the hosts' workers, each variant's outputs where it puts them."""
    from asgard.pipelines.hosts import KEYSPACE
    from asgard.resources.stores.cql import CassandraObjectStore
    from asgard_bench.day import DayConfig, parse_mix, run_day, summary_json

    cfg = DayConfig(settings=["hosts3"], rounds=1, concurrent=2, search_probes=2, out=str(tmp_path),
                    mix=parse_mix("etl_columnar:scale=0.1;fanout=6,word_count:scale=0.25;fanout=3;reducers=2"))
    result = run_day(cfg, print)
    print((tmp_path / "day.txt").read_text())
    summary = summary_json(result)["settings"]
    assert summary["loopback"] == {"run": False, "reason": "not selected (--settings)"}
    hosts3 = summary["hosts3"]
    assert hosts3["failed_runs"] == 0, result["settings"]["hosts3"]["days"]
    assert set(hosts3["variants"]) == {"peer", "default", "best_static", "loop"}
    for name, variant in hosts3["variants"].items():
        assert variant["e2e_s"] > 0 and variant["perf_per_dollar"] > 0, (name, variant)
    # every run of every variant had its steps taken by more than one host's worker
    assert hosts3["runs"] == 4 * len(cfg.mix) and hosts3["runs_on_several_hosts"] == hosts3["runs"]
    workers = {h for d in result["settings"]["hosts3"]["days"] for r in d["runs"] for h in r["hosts"]}
    assert workers == {f"dagster@{h.name}" for h in deployment.hosts.hosts}
    assert 0 < hosts3["store_share_pct"] < 100
    # best_static's search on the RF 3 ring: one copy of every edge is its first lever after the
    # baseline; its days wrote the ETL's partitions at the copies it kept
    setting = result["settings"]["hosts3"]
    trials = setting["search"]["trials"]
    assert [t["client"]["replicas"] for t in trials] == ["store", "1"], trials
    # each probe ran the day's mix as a round does: the ETL and word count at once, not one app alone
    assert all(sorted(t["apps"]) == ["etl_columnar", "word_count"] for t in trials), trials
    kept_one = setting["variants"]["best_static"]["config"]["io_manager"]["replicas"] == "1"
    static_etl = [r for d in setting["days"] if d["variant"] == "best_static" for r in d["runs"]
                  if r["app"] == "etl_columnar"][0]["edges"]
    assert static_etl["filter_orders.result"]["replicas"] == ({1: 6} if kept_one else {"store": 6}), static_etl
    # the loop's per-edge placement: the broadcast (customers, read by every partition's join, on
    # the shared queue) keeps a copy on its producer's host for the readers that land there
    loop_etl = [r for d in result["settings"]["hosts3"]["days"] if d["variant"] == "loop" for r in d["runs"]
                if r["app"] == "etl_columnar"][0]["edges"]
    assert loop_etl["generate.customers"]["placement"] == {"producer-local": 1}, loop_etl["generate.customers"]
    assert any("1 in 3" in r and "a copy here serves them" in r for r in loop_etl["generate.customers"]["reasons"])
    # each partition's filter and join output, read by the one step the hosts' executor sends to its
    # producer's host, keeps its copy there
    for output in ("filter_orders.result", "join_customers.result"):
        assert loop_etl[output]["placement"] == {"producer-local": 6}, loop_etl[output]
        assert any("host-routed celery executor sends its reader" in r for r in loop_etl[output]["reasons"])
    # the environment the day set for its runs is put back (the module's, from the fixture)
    assert os.environ["ASGARD_RING_CONTACTS"] == deployment.client_environment()["ASGARD_RING_CONTACTS"]
    # each run's outputs were purged from the ring after it (ephemeral data)
    store = CassandraObjectStore(**deployment.ring().client_options(), keyspace=KEYSPACE)
    for d in result["settings"]["hosts3"]["days"]:
        if d["backend"] == "cassandra":
            for r in d["runs"]:
                assert store.list_paths(f"run/{r['run_id']}") == [], r["run_id"]


def test_a_day_on_airflow_across_the_hosts_four_ways(deployment, tmp_path):
    """``asgard bench day --engine airflow --settings hosts3`` in miniature: each run `airflow dags
    test --use-executor`, its tasks on the hosts' Airflow workers (restarted on each variant's
    settings), our values in the ring, the peer's (common-io's backend) in the hosts' MinIO."""
    from asgard_bench.day import DayConfig, parse_mix, run_day, summary_json

    cfg = DayConfig(settings=["hosts3"], rounds=1, concurrent=2, search_probes=1, out=str(tmp_path), engine="airflow",
                    mix=parse_mix("etl_columnar:scale=0.05;fanout=2,word_count:scale=0.1;fanout=2"))
    result = run_day(cfg, print)
    print((tmp_path / "day.txt").read_text())
    hosts3 = summary_json(result)["settings"]["hosts3"]
    days = result["settings"]["hosts3"]["days"]
    assert hosts3["failed_runs"] == 0, days
    for name, variant in hosts3["variants"].items():
        assert variant["e2e_s"] > 0 and variant["perf_per_dollar"] > 0, (name, variant)
    # every run of every variant had its tasks on more than one host, and all three hosts worked
    assert hosts3["runs"] == 4 * len(cfg.mix) and hosts3["runs_on_several_hosts"] == hosts3["runs"]
    assert {h for d in days for r in d["runs"] for h in r["hosts"]} == {h.address for h in deployment.hosts.hosts}
    # ours through the ring (references with a codec per value), the peer's never
    assert all(r["edges"] for d in days if d["variant"] != "peer" for r in d["runs"])
    assert all(r["edges"] == {} for d in days if d["variant"] == "peer" for r in d["runs"])
    assert 0 < hosts3["store_share_pct"] < 100
    (probe,) = result["settings"]["hosts3"]["search"]["trials"]  # the day's mix, as a round runs it
    assert sorted(probe["apps"]) == ["etl_columnar", "word_count"] and probe["e2e_s"] > 0, probe
    # the deployment's cluster policy (asgard_airflow.task_routing) sent each join_customers and
    # aggregate instance to the host that ran the filter_orders / join_customers instance it reads,
    # in every variant; in the loop's runs ([asgard] placement = auto) the routed values kept a copy
    import json
    import sqlite3

    queue_of = {h.address: h.name for h in deployment.hosts.hosts}
    db = sqlite3.connect(deployment.state_dir() / "airflow" / "airflow.db")
    try:
        for d in days:
            for r in d["runs"]:
                if r["app"] != "etl_columnar":
                    continue
                tis = {(t, i): (h, q) for t, i, h, q in db.execute(
                    "SELECT task_id, map_index, hostname, queue FROM task_instance WHERE run_id = ? AND dag_id = ?",
                    (r["run_id"], "asgard_etl_columnar"))}
                for (task_id, index), (host, queue) in tis.items():
                    upstream = {"join_customers": "filter_orders", "aggregate": "join_customers"}.get(task_id)
                    if upstream:
                        assert host == tis[(upstream, index)][0] and queue == queue_of[host], (d["variant"], tis)
                if d["variant"] == "loop":
                    refs = [json.loads(v) for t, v in db.execute(
                        "SELECT task_id, value FROM xcom WHERE run_id = ? AND task_id = 'filter_orders'", (r["run_id"],))]
                    assert refs and all(ref.get("placement") == "producer-local" for ref in refs), refs
                    assert all("host_queues routes each instance of join_customers" in ref["placement_reason"]
                               for ref in refs), refs
    finally:
        db.close()
    # the workers are back on the deployment's own settings
    from asgard.resources.workers.deployment import EmulatedDeployment

    for worker in EmulatedDeployment().airflow_workers():
        assert worker.is_ready()
        assert "AIRFLOW__ASGARD__CODEC" not in open(f"/proc/{worker.pid()}/environ", "rb").read().decode(errors="replace")
