"""``S3IOManager``: op outputs in S3 (a local MinIO by default; a baseline), and
:func:`stock_s3_pickle_io_manager`, dagster-aws's own ``S3PickleIOManager`` on the same MinIO
for comparison with the stock Dagster way."""
from __future__ import annotations

from typing import ClassVar, Optional

from pydantic import Field

from asgard.resources.stores.s3 import LOCAL_ENDPOINT, resolve_credentials

from ..connection import ConnectionIOManager
from .resources import S3StoreResource


class S3IOManager(ConnectionIOManager):
    """Stores each op output (or asset) in an S3 bucket: one object per chunk, PUT on a bounded
    pool of threads, committed by ``manifest.json`` written last (a single PUT is atomic).

    Object layout: ``<prefix>/run/<run_id>/<step_key>/<output>/<version>/<i>`` and
    ``<prefix>/run/<run_id>/<step_key>/<output>/manifest.json`` (see :mod:`asgard.resources.stores.s3`).
    ``purge_run`` lists ``<prefix>/run/<run_id>/`` and deletes it 1000 objects per request.
    S3 has no per-object TTL: ``ttl_seconds`` is enforced on read (an expired output reads as
    missing); in production also give the bucket a lifecycle rule expiring ``<prefix>/``.

    The connection is a nested :class:`~asgard_dagster.s3.S3StoreResource` (``s3=``), as
    dagster-aws nests its ``S3Resource``; the IO manager's own fields are how outputs are stored
    (TTL, codec, chunk size, signing key, ...).

    Example::

        from dagster import Definitions, EnvVar, job, op
        from asgard_dagster.s3 import S3IOManager, S3StoreResource

        @op
        def make(): return list(range(10))

        @op
        def total(xs): return sum(xs)

        @job
        def pipeline(): total(make())

        defs = Definitions(jobs=[pipeline], resources={"io_manager": S3IOManager(
            s3=S3StoreResource(endpoint_url=None, bucket="my-bucket", region="eu-west-1",   # AWS S3 itself
                               aws_access_key_id=EnvVar("AWS_ACCESS_KEY_ID"),
                               aws_secret_access_key=EnvVar("AWS_SECRET_ACCESS_KEY")),
            chunk_size_bytes=8 << 20)})
        # the local MinIO of `asgard minio up` (http://127.0.0.1:9000, bucket 'asgard'): S3IOManager()

    Connection fields given flat (``S3IOManager(endpoint_url=..., bucket=...)``) raise
    :class:`~asgard_dagster.FlatConnectionFieldsError`, which names the nested form.
    """

    connection_field: ClassVar[str] = "s3"
    resource_class: ClassVar[type] = S3StoreResource

    s3: Optional[S3StoreResource] = Field(
        default=None,
        description="The bucket to store outputs in, as S3StoreResource(...). None: the local MinIO of "
        "`asgard minio up` (bucket 'asgard').",
    )


#: where :func:`stock_s3_pickle_io_manager` puts a run's outputs by default: ``<prefix>/storage/<run_id>/``
STOCK_BUCKET, STOCK_PREFIX = "asgard", "dagster-stock"


def stock_s3_pickle_io_manager(
    bucket: str = STOCK_BUCKET,
    prefix: str = STOCK_PREFIX,
    endpoint_url: str | None = LOCAL_ENDPOINT,
    region: str = "us-east-1",
    aws_access_key_id: str | None = None,
    aws_secret_access_key: str | None = None,
):
    """dagster-aws's stock ``S3PickleIOManager`` (one pickled object per output, no chunking,
    no TTL, no manifest) pointed at the local MinIO, for comparing against :class:`S3IOManager`.

    Example::

        from asgard_dagster.s3 import stock_s3_pickle_io_manager

        defs = Definitions(jobs=[pipeline], resources={"io_manager": stock_s3_pickle_io_manager()})
        # objects land at s3://asgard/dagster-stock/storage/<run_id>/<step_key>/<output>
    """
    import os

    from dagster import EnvVar
    from dagster_aws.s3 import S3PickleIOManager, S3Resource

    access_key, secret_key = resolve_credentials(endpoint_url, aws_access_key_id, aws_secret_access_key)
    if aws_access_key_id is None and aws_secret_access_key is None and access_key is not None:
        # from MINIO_ROOT_*: keep a secret out of the run config shown in the UI
        if os.environ.get("MINIO_ROOT_USER"):
            access_key = EnvVar("MINIO_ROOT_USER")
        if os.environ.get("MINIO_ROOT_PASSWORD"):
            secret_key = EnvVar("MINIO_ROOT_PASSWORD")
    return S3PickleIOManager(
        s3_resource=S3Resource(endpoint_url=endpoint_url, region_name=region,
                               aws_access_key_id=access_key, aws_secret_access_key=secret_key),
        s3_bucket=bucket,
        s3_prefix=prefix,
    )
