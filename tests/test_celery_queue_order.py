"""A host's celery worker reads its own queue before the shared one (``QUEUE_ORDER_STRATEGY`` in
resources/workers/celery_worker.py): what kombu's Redis transport does with that option, on the
suite's Redis, a consumer of the two queues in the order a host's worker is given them. The hosts'
workers carrying it is checked on the running hosts (tests/test_celery_hosts.py)."""
from __future__ import annotations

import uuid

from kombu import Connection, Exchange, Queue

from asgard.resources.workers.celery_worker import QUEUE_ORDER_STRATEGY


def _consumed(redis_server, strategy: str) -> list[str]:
    """Three messages on the shared queue, then three on the host's, all waiting; the order a
    consumer of [host, shared] takes them under ``strategy``."""
    tag = uuid.uuid4().hex[:8]
    auth = f":{redis_server.password}@" if redis_server.password else ""
    exchange = Exchange(f"asgard-test-{tag}", type="direct")
    queues = [Queue(f"{name}-{tag}", exchange, routing_key=f"{name}-{tag}") for name in ("host", "shared")]
    got: list[str] = []
    with Connection(f"redis://{auth}{redis_server.host}:{redis_server.port}/7",
                    transport_options={"queue_order_strategy": strategy}) as conn:
        producer = conn.Producer()
        for i in range(3):
            producer.publish(f"s{i}", exchange=exchange, routing_key=queues[1].routing_key, declare=queues)
        for i in range(3):
            producer.publish(f"h{i}", exchange=exchange, routing_key=queues[0].routing_key, declare=queues)

        def take(body, message):
            got.append(body)
            message.ack()

        with conn.Consumer(queues, callbacks=[take], prefetch_count=1):
            while len(got) < 6:
                conn.drain_events(timeout=10)
        for q in queues:
            q(conn.default_channel).delete()
    return got


def test_a_worker_of_two_queues_takes_every_waiting_task_of_its_hosts_queue_first(redis_server):
    assert _consumed(redis_server, QUEUE_ORDER_STRATEGY) == ["h0", "h1", "h2", "s0", "s1", "s2"]


def test_kombus_default_rotation_would_take_a_shared_task_between_two_of_its_hosts(redis_server):
    # what the option replaces: after each message the queue it came from goes last
    got = _consumed(redis_server, "round_robin")
    assert sorted(got) == ["h0", "h1", "h2", "s0", "s1", "s2"] and got[:2] != ["h0", "h1"], got
