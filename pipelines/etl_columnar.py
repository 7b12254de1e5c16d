"""A columnar ETL whose cost is its intermediate data (issue 37, the data-heavy day): thin
transforms over generated Arrow tables, so the store, not the compute, takes the run's time.

    generate --orders x fanout (scatter)--> filter_orders.map --> join_customers.map --> aggregate.map
             --customers (broadcast to every join)------------------^                      |
                                                                    merge_aggregates <--collect (fan-in)

* ``generate`` (config: ``fanout`` partitions, ``scale`` GiB of orders in all, ``seed``) yields
  each partition of the orders table as it makes it (32 bytes a row: ``order_id``,
  ``customer_id``, ``amount``, ``quantity``, ``day``), and a customers dimension table
  (``customer_id``, ``region``, ``segment``, ``discount``; :data:`CUSTOMERS_PER_GIB` rows a GiB).
  At the default scale, 1 GiB: four 256 MiB partitions.
* ``filter_orders`` keeps the orders of the last :data:`DAYS_KEPT` days over
  :data:`MIN_AMOUNT` (about 40% of the rows); ``join_customers`` adds each order's customer
  columns (a hash join on ``customer_id``) and the discounted amount; ``aggregate`` sums
  revenue, quantity and orders by ``(region, day)``; ``merge_aggregates`` sums the partitions'.

Each step is one vectorized Arrow call over its input: every edge carries 40-250 MiB at the
default scale, and a step computes for a fraction of the time it takes to read and write them.
The values are ``pyarrow.Table``: the IO manager's pickle protocol 5 takes their column buffers
out of band, unpickled without a copy. :func:`expected_result` computes the run's result in one
process, for checks.
"""

import dagster as dg
import numpy as np

#: 32 bytes an order row: order_id, customer_id (int64), amount (float64), quantity, day (int32)
ORDER_ROW_BYTES = 32
#: customers a GiB of orders (24 bytes a row: a 24 MiB broadcast at scale 1)
CUSTOMERS_PER_GIB = 1 << 20
DAYS, DAYS_KEPT, MIN_AMOUNT, REGIONS, SEGMENTS = 365, 182, 20.0, 16, 8


class EtlConfig(dg.Config):
    """Run config of ``generate``."""

    fanout: int = 4  # partitions of the orders table (one filter, join and aggregate each)
    scale: float = 1.0  # GiB of orders in all
    seed: int = 0


def _rows(scale: float, fanout: int) -> int:
    return max(1, int(scale * (1 << 30) / ORDER_ROW_BYTES / fanout))


def _customer_count(scale: float) -> int:
    return max(REGIONS, int(scale * CUSTOMERS_PER_GIB))


def orders_partition(scale: float, fanout: int, seed: int, part: int):
    """Partition ``part`` of the orders table (deterministic: the same in every process)."""
    import pyarrow as pa

    rows, customers = _rows(scale, fanout), _customer_count(scale)
    rng = np.random.default_rng([seed, part])
    first = part * rows
    return pa.table({
        "order_id": np.arange(first, first + rows, dtype=np.int64),
        "customer_id": rng.integers(0, customers, rows, dtype=np.int64),
        "amount": rng.exponential(30.0, rows),
        "quantity": rng.integers(1, 10, rows, dtype=np.int32),
        "day": rng.integers(0, DAYS, rows, dtype=np.int32),
    })


def customers_table(scale: float, seed: int):
    import pyarrow as pa

    n = _customer_count(scale)
    rng = np.random.default_rng([seed, 1 << 20])
    return pa.table({
        "customer_id": np.arange(n, dtype=np.int64),
        "region": rng.integers(0, REGIONS, n, dtype=np.int32),
        "segment": rng.integers(0, SEGMENTS, n, dtype=np.int32),
        "discount": rng.uniform(0.0, 0.3, n),
    })


def _mib(table) -> float:
    return round(table.nbytes / (1 << 20), 1)


@dg.op(out={"orders": dg.DynamicOut(), "customers": dg.Out()})
def generate(context: dg.OpExecutionContext, config: EtlConfig):
    """The customers table, then each partition of the orders as it is made (one in memory at a time)."""
    if config.fanout < 1 or config.scale <= 0:
        raise dg.Failure(f"fanout must be >= 1 and scale > 0, got fanout {config.fanout}, scale {config.scale}")
    customers = customers_table(config.scale, config.seed)
    yield dg.Output(customers, "customers", metadata={"rows": customers.num_rows, "mib": _mib(customers)})
    del customers
    for part in range(config.fanout):
        orders = orders_partition(config.scale, config.fanout, config.seed, part)
        context.log.info(f"orders partition {part}: {orders.num_rows} rows, {_mib(orders)} MiB")
        yield dg.DynamicOutput(orders, mapping_key=f"p{part:03d}", output_name="orders")
        del orders


def _filtered(orders):
    import pyarrow.compute as pc

    last_days = pc.greater_equal(orders["day"], DAYS - DAYS_KEPT)
    return orders.filter(pc.and_(last_days, pc.greater(orders["amount"], MIN_AMOUNT)))


def _joined(orders, customers):
    import pyarrow.compute as pc

    joined = orders.join(customers, keys="customer_id", join_type="inner")
    net = pc.multiply(joined["amount"], pc.subtract(1.0, joined["discount"]))
    return joined.append_column("net_amount", net)


def _aggregated(joined):
    return joined.group_by(["region", "day"]).aggregate(
        [("net_amount", "sum"), ("quantity", "sum"), ("order_id", "count")])


@dg.op
def filter_orders(orders):
    """The orders of the last DAYS_KEPT days over MIN_AMOUNT."""
    return _filtered(orders)


@dg.op
def join_customers(orders, customers):
    """Each order with its customer's region, segment and discount, and its net amount."""
    return _joined(orders, customers)


@dg.op
def aggregate(joined):
    """Net revenue, quantity and orders by (region, day)."""
    return _aggregated(joined)


def _merged(parts) -> dict:
    import pyarrow as pa

    total = pa.concat_tables(parts).group_by(["region", "day"]).aggregate(
        [("net_amount_sum", "sum"), ("quantity_sum", "sum"), ("order_id_count", "sum")])
    return {"app": "etl_columnar", "groups": total.num_rows,
            "orders": int(total["order_id_count_sum"].to_numpy().sum()),
            "quantity": int(total["quantity_sum_sum"].to_numpy().sum()),
            "net_revenue": float(total["net_amount_sum_sum"].to_numpy().sum())}


@dg.op
def merge_aggregates(context: dg.OpExecutionContext, parts: list) -> dict:
    """The partitions' aggregates summed by (region, day): the run's result."""
    result = _merged(parts)
    context.add_output_metadata({k: v for k, v in result.items() if k != "app"})
    return result


def expected_result(scale: float, fanout: int, seed: int = 0) -> dict:
    """The run's result computed in one process, partition by partition (for checks)."""
    customers = customers_table(scale, seed)
    return _merged([_aggregated(_joined(_filtered(orders_partition(scale, fanout, seed, p)), customers))
                    for p in range(fanout)])


@dg.graph
def etl_columnar():
    """Columnar ETL: orders scattered, customers broadcast to every join, aggregates gathered."""
    orders, customers = generate()
    joined = orders.map(filter_orders).map(lambda o: join_customers(o, customers))
    merge_aggregates(joined.map(aggregate).collect())
