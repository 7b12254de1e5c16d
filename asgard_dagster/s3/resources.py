"""``S3StoreResource``: S3 (a local MinIO by default) as an Asgard object store.

Named so as not to be confused with dagster-aws's ``S3Resource`` (a plain boto3 client
factory): this one hands out :class:`~asgard.resources.stores.s3.S3ObjectStore` s.
"""
from __future__ import annotations

from typing import Optional

from dagster import ConfigurableResource
from pydantic import Field

from asgard.resources.stores.s3 import LOCAL_ENDPOINT, S3ObjectStore

from ..io_manager import resolved


class S3StoreResource(ConfigurableResource):
    """Connection settings for an S3 bucket; the defaults reach the local MinIO that
    ``asgard minio up`` starts (http://127.0.0.1:9000, bucket ``asgard``).

    Example::

        from dagster import Definitions, EnvVar
        from asgard_dagster.s3 import S3StoreResource

        defs = Definitions(resources={"s3_store": S3StoreResource(
            endpoint_url=None, bucket="my-bucket", region="eu-west-1",
            aws_access_key_id=EnvVar("AWS_ACCESS_KEY_ID"), aws_secret_access_key=EnvVar("AWS_SECRET_ACCESS_KEY"))})
        # the IO manager's connection, nested: S3IOManager(s3=S3StoreResource(...))
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
    read_timeout: float = Field(default=60.0, description="Seconds per request (a chunk's GET or PUT).")

    def connection_kwargs(self) -> dict:
        kwargs = dict(endpoint_url=self.endpoint_url, bucket=self.bucket, prefix=self.prefix, region=self.region,
                      aws_access_key_id=self.aws_access_key_id, aws_secret_access_key=self.aws_secret_access_key,
                      aws_session_token=self.aws_session_token, connect_timeout=self.connect_timeout,
                      read_timeout=self.read_timeout)
        # outside a run (the purge sensor, the CLI) an EnvVar field is still the variable's name
        return {k: resolved(v) for k, v in kwargs.items()}

    def get_store(self, **store_kwargs) -> S3ObjectStore:
        """An :class:`S3ObjectStore` on this bucket (``ttl_seconds``, ``codec``, ... as keywords)."""
        return S3ObjectStore(**self.connection_kwargs(), **store_kwargs)

    def purge_run(self, run_id: str) -> None:
        """Delete every stored output of one run (everything under ``<prefix>/run/<run_id>/``)."""
        self.get_store().purge_scope(f"run/{run_id}")
