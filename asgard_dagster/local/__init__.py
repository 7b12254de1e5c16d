from .io_manager import LocalIOManager

__all__ = ["LocalIOManager"]
