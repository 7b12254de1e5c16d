from .io_manager import RedisIOManager
from .resources import RedisResource

__all__ = ["RedisIOManager", "RedisResource"]
