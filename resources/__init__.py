"""Infrastructure the ephemeral data lives on.

``asgard.resources.cassandra`` installs and runs Apache Cassandra (config rendering, NUMA-pinned
launch, nodetool); ``asgard.resources.redis`` and ``asgard.resources.minio`` run the baseline servers;
``asgard.resources.stores`` is the one object-store interface every backend implements.
Nothing here imports Dagster, so ``tuner`` can drive the same code.
"""
