from .io_manager import S3IOManager, stock_s3_pickle_io_manager
from .resources import S3StoreResource

__all__ = ["S3IOManager", "S3StoreResource", "stock_s3_pickle_io_manager"]
