"""What ``dagster dev -w workspace.yaml`` loads: the paper's three applications and the demo,
their outputs in the local Cassandra; the demo and word count as software-defined assets
(``asgard.pipelines.assets``, with the map side as the asset job ``word_count_map``, which
the retune job analyses like the op jobs); nightly schedules for the applications (stopped until
turned on); the purge sensor; and the retune job with its sensor and schedule.

Jobs bound to the other stores (for comparisons) are made by
``asgard.pipelines.jobs.make_job(app, backend)``; ``asgard bench apps`` runs them all.
"""
from dagster import DefaultScheduleStatus, ScheduleDefinition

from asgard_dagster.definitions import asgard_definitions
from asgard_dagster.sensors import how_to_start
from asgard.pipelines.assets import ASSETS, word_count_map_job
from asgard.pipelines.demo import fan_out_fan_in
from asgard.pipelines.jobs import APPS, make_job

app_jobs = [make_job(app, "cassandra") for app in APPS]
nightly = [
    ScheduleDefinition(name=f"{job.name}_nightly", job=job, cron_schedule=f"{10 * i} 2 * * *",
                       default_status=DefaultScheduleStatus.STOPPED,
                       description=f"Runs {job.name} nightly at 02:{10 * i:02d} UTC. "
                       + how_to_start("schedule", f"{job.name}_nightly", DefaultScheduleStatus.STOPPED))
    for i, job in enumerate(app_jobs)
]
defs = asgard_definitions(jobs=app_jobs + [fan_out_fan_in, word_count_map_job], assets=ASSETS, schedules=nightly, retune=True)
