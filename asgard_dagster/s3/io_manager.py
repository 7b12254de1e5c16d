"""``S3IOManager``: op outputs in S3 (a local MinIO by default; a baseline), and
:func:`stock_s3_pickle_io_manager`, dagster-aws's own ``S3PickleIOManager`` on the same MinIO
for comparison with the stock Dagster way."""
from __future__ import annotations

from typing import Optional

from pydantic import Field

from resources.stores.s3 import LOCAL_ENDPOINT, S3ObjectStore, resolve_credentials

from ..io_manager import StoreIOManager


class S3IOManager(StoreIOManager):
    """Stores each op output (or asset) in an S3 bucket: one object per chunk, PUT on a bounded
    pool of threads, committed by ``manifest.json`` written last (a single PUT is atomic).

    Object layout: ``<prefix>/run/<run_id>/<step_key>/<output>/<version>/<i>`` and
    ``<prefix>/run/<run_id>/<step_key>/<output>/manifest.json`` (see :mod:`resources.stores.s3`).
    ``purge_run`` lists ``<prefix>/run/<run_id>/`` and deletes it 1000 objects per request.
    S3 has no per-object TTL: ``ttl_seconds`` is enforced on read (an expired output reads as
    missing); in production also give the bucket a lifecycle rule expiring ``<prefix>/``.

    Example::

        from dagster import Definitions, EnvVar, job, op
        from asgard_dagster.s3 import S3IOManager

        @op
        def make(): return list(range(10))

        @op
        def total(xs): return sum(xs)

        @job
        def pipeline(): total(make())

        # the local MinIO of `asgard minio up` (http://127.0.0.1:9000, bucket 'asgard')
        defs = Definitions(jobs=[pipeline], resources={"io_manager": S3IOManager()})
        # AWS: S3IOManager(endpoint_url=None, bucket="my-bucket", region="eu-west-1",
        #                  aws_access_key_id=EnvVar("AWS_ACCESS_KEY_ID"), aws_secret_access_key=EnvVar("AWS_SECRET_ACCESS_KEY"))
    """

    endpoint_url: Optional[str] = Field(
        default=LOCAL_ENDPOINT, description="S3 endpoint; the local MinIO by default, None for AWS S3 itself."
    )
    bucket: str = Field(default="asgard", description="An existing bucket (`asgard minio up` creates 'asgard').")
    prefix: str = Field(default="asgard", description="Key prefix inside the bucket.")
    region: str = Field(default="us-east-1", description="Signing region.")
    aws_access_key_id: Optional[str] = Field(
        default=None,
        description="Access key; None takes it from the environment (AWS_ACCESS_KEY_ID, profile, role; for the "
        "local MinIO, MINIO_ROOT_USER or its local default). Pass EnvVar('...'), never a literal.",
    )
    aws_secret_access_key: Optional[str] = Field(
        default=None, description="Secret key; None takes it from the environment like aws_access_key_id. Pass EnvVar('...')."
    )
    aws_session_token: Optional[str] = Field(default=None, description="Session token for temporary credentials (EnvVar).")
    connect_timeout: float = Field(default=5.0, description="Seconds to wait for a connection before failing with 'unreachable'.")
    read_timeout: float = Field(default=60.0, description="Seconds per chunk request.")

    def open_store(self, **store_kwargs) -> S3ObjectStore:
        return S3ObjectStore(
            endpoint_url=self.endpoint_url, bucket=self.bucket, prefix=self.prefix, region=self.region,
            aws_access_key_id=self.aws_access_key_id, aws_secret_access_key=self.aws_secret_access_key,
            aws_session_token=self.aws_session_token, connect_timeout=self.connect_timeout,
            read_timeout=self.read_timeout, **store_kwargs,
        )


def stock_s3_pickle_io_manager(
    bucket: str = "asgard",
    prefix: str = "dagster-stock",
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
