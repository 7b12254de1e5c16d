from .io_manager import CassandraIOManager
from .resources import CassandraResource
from .sensor import make_purge_on_success_sensor

__all__ = ["CassandraIOManager", "CassandraResource", "make_purge_on_success_sensor"]
