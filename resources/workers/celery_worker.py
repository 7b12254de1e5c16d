"""What every celery worker of an emulated host has, whichever orchestrator's tasks it runs: a node
name ``<app>@<host>``, its host's queue and a shared one, and a readiness that is a ping answered
through the broker."""
from __future__ import annotations

from pathlib import Path

from ..process import ManagedServer

#: kombu's Redis transport reads a worker's queues in the order given (its host's, then the shared one)
#: rather than rotating them: a task routed to a host otherwise waited behind a shared-queue task there
#: while another host idled (docs/results/issue37-bench-day-airflow.txt, section 9)
QUEUE_ORDER_STRATEGY = "priority"


class CeleryWorker(ManagedServer):
    """The celery worker of host ``host``: its queue is the host's name, besides ``shared_queue``.

    Args:
        host: the host's name (its queue, and the host part of its node name).
        broker_url: the Celery broker as this machine reaches it (for pings).
        result_backend: the result backend of the worker's tasks.
        netns: the host's namespace.
        concurrency: tasks the worker runs at once, each in a process of its own.
    """

    #: the node name's first part (``<app>@<host>``)
    app_name = "celery"
    #: the queue every worker takes besides its host's
    shared_queue = "celery"

    def __init__(self, name: str, workdir: Path, host: str, broker_url: str, result_backend: str,
                 netns: str | None = None, concurrency: int = 1):
        if concurrency < 1:
            raise ValueError(f"concurrency must be at least 1, got {concurrency}")
        super().__init__(name, workdir, netns=netns)
        self.host, self.broker_url, self.result_backend = host, broker_url, result_backend
        self.concurrency = concurrency

    @property
    def node_name(self) -> str:
        """Celery's name of this worker (``hostname`` of its tasks' requests)."""
        return f"{self.app_name}@{self.host}"

    @property
    def queues(self) -> list[str]:
        return [self.host, self.shared_queue]

    @property
    def endpoint(self) -> str:
        return f"queues {','.join(self.queues)}"

    def client(self):
        """A Celery app on the same broker and backend (for pings and inspection)."""
        from celery import Celery

        return Celery("asgard-probe", broker=self.broker_url, backend=self.result_backend)

    def is_ready(self) -> bool:
        try:
            app = self.client()
            try:
                replies = app.control.ping(destination=[self.node_name], timeout=1.0)
            finally:
                app.close()
        except Exception:  # the broker is not up (yet): not ready
            return False
        return any(self.node_name in reply for reply in replies)

    def status(self) -> dict:
        info = super().status()
        info.update(host=self.host, queues=self.queues, netns=self.netns, node_name=self.node_name)
        return info
