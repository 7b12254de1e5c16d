"""Run the fan-out / fan-in demo job on the local Cassandra and say where to look.

``python -m asgard.pipelines.run_demo [--chunks N] [--chunk-mib M]`` (``scripts/demo.sh`` does the
set-up first). Uses the Dagster instance in ``$DAGSTER_HOME``, so the run shows in
``dagster dev -w workspace.yaml``.
"""
import argparse

from dagster import DagsterInstance, execute_job, reconstructable

from asgard_dagster import CassandraIOManager
from asgard.pipelines.demo import fan_out_fan_in


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--chunks", type=int, default=6)
    parser.add_argument("--chunk-mib", type=int, default=16)
    args = parser.parse_args()
    run_config = {"ops": {"make_chunks": {"config": {"chunks": args.chunks, "chunk_mib": args.chunk_mib}}}}
    instance = DagsterInstance.get()
    with execute_job(reconstructable(fan_out_fan_in), instance=instance, run_config=run_config) as result:
        if not result.success:
            raise SystemExit(f"run {result.run_id} failed: see `dagster dev -w workspace.yaml`")
        stats = result.output_for_node("summarize_chunks")
        outputs = [
            (e.step_key, e.event_specific_data.metadata)
            for e in result.all_events
            if e.event_type_value == "HANDLED_OUTPUT"
        ]
        run_id = result.run_id
    print(f"\nrun {run_id} succeeded: {stats}")
    print(f"\n{'step':<24} {'bytes':>12} {'chunks':>6} {'write MB/s':>10}  location")
    for step, meta in outputs:
        print(f"{step:<24} {meta['bytes'].value:>12,} {meta['chunks'].value:>6} {meta['write_mb_s'].value:>10.1f}  "
              f"{meta['dagster/uri'].value}")
    store = CassandraIOManager().store()
    paths = store.list_paths(f"run/{run_id}")
    partitions = store.partitions(f"run/{run_id}")
    print(f"\n{len(paths)} outputs of scope 'run/{run_id}' stored in Cassandra keyspace 'asgard', "
          f"over {len(partitions)} partitions (a head per output, a partition per chunk).")
    print("Look at the run in the UI:  DAGSTER_HOME=$PWD/dagster_home .venv/bin/dagster dev -w workspace.yaml")
    print(f"  then open http://127.0.0.1:3000/runs/{run_id}  (each step's output metadata shows its Cassandra URI)")
    print("Server status: .venv/bin/asgard cassandra status")


if __name__ == "__main__":
    main()
