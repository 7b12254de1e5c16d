"""What ``dagster dev -w workspace.yaml`` loads: the paper's three applications and the demo,
their outputs in the local Cassandra, plus the purge sensor.

Jobs bound to the other stores (for comparisons) are made by
``pipelines.jobs.make_job(app, backend)``; ``asgard bench apps`` runs them all.
"""
from asgard_dagster.definitions import asgard_definitions
from pipelines.demo import fan_out_fan_in
from pipelines.jobs import APPS, make_job

defs = asgard_definitions(jobs=[make_job(app, "cassandra") for app in APPS] + [fan_out_fan_in])
