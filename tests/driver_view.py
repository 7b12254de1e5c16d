"""What the driver's own view of the ring says: a member restarted by a test is up again for the
driver only after its reconnection backoff, which a test on that member's routing must wait out."""
from __future__ import annotations

import time


def wait_driver_sees(cluster, address: str, up: bool = True, timeout: float = 60.0):
    """The driver's Host for ``address`` once ``cluster`` sees it ``up`` (or down)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        host = next((h for h in cluster.metadata.all_hosts() if h.address == address), None)
        if host is not None and bool(host.is_up) == up:
            return host
        time.sleep(0.2)
    raise AssertionError(f"the driver did not see {address} {'up' if up else 'down'} within {timeout:.0f}s")
