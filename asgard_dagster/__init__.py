"""asgard-dagster: ephemeral op outputs in a self-tuning Apache Cassandra.

What a Dagster user imports: IO managers (Cassandra, and the Redis, S3 and local baselines),
the resources they nest for their connection, the purge sensor, and :class:`Stream` for outputs
bigger than memory.
"""
from .cassandra import CassandraIOManager, CassandraResource, make_purge_on_success_sensor
from .connection import FlatConnectionFieldsError
from .io_manager import OutputSettingError, PlacementCannotServeError, StoreIOManager
from .placement import check_job_placements
from .local import LocalIOManager
from .redis import RedisIOManager, RedisResource
from .s3 import S3IOManager, S3StoreResource, stock_s3_pickle_io_manager
from asgard.resources.stores.stream import Stream

__all__ = [
    "CassandraIOManager", "CassandraResource", "FlatConnectionFieldsError", "LocalIOManager", "OutputSettingError",
    "PlacementCannotServeError", "StoreIOManager", "check_job_placements",
    "make_purge_on_success_sensor", "RedisIOManager", "RedisResource", "S3IOManager", "S3StoreResource",
    "stock_s3_pickle_io_manager", "Stream",
]
