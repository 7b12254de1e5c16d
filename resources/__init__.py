"""Infrastructure the ephemeral data lives on.

``resources.cassandra`` installs and runs Apache Cassandra (config rendering, NUMA-pinned
launch, nodetool); ``resources.redis`` and ``resources.minio`` run the baseline servers;
``resources.stores`` is the one object-store interface every backend implements.
Nothing here imports Dagster, so ``tuner`` can drive the same code.
"""
