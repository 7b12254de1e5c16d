"""``S3StoreResource``: S3 (a local MinIO by default) as an Asgard object store.

Named so as not to be confused with dagster-aws's ``S3Resource`` (a plain boto3 client
factory): this one hands out :class:`~asgard.resources.stores.s3.S3ObjectStore` s.
"""
from __future__ import annotations

from typing import ClassVar, Optional

from dagster import ConfigurableResource

from asgard.resources.stores.s3 import S3ObjectStore
from asgard.resources.stores.settings import S3

from ..io_manager import resolved
from ..settings import described


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

    backend: ClassVar[str] = "s3"

    endpoint_url: Optional[str] = described(S3["endpoint_url"])
    bucket: str = described(S3["bucket"])
    prefix: str = described(S3["prefix"])
    region: str = described(S3["region"])
    aws_access_key_id: Optional[str] = described(S3["aws_access_key_id"])
    aws_secret_access_key: Optional[str] = described(S3["aws_secret_access_key"])
    aws_session_token: Optional[str] = described(S3["aws_session_token"])
    connect_timeout: float = described(S3["connect_timeout"])
    read_timeout: float = described(S3["read_timeout"])

    def connection_kwargs(self) -> dict:
        # outside a run (the purge sensor, the CLI) an EnvVar field is still the variable's name
        return {name: resolved(getattr(self, name)) for name in S3.names()}

    def get_store(self, **store_kwargs) -> S3ObjectStore:
        """An :class:`S3ObjectStore` on this bucket (``ttl_seconds``, ``codec``, ... as keywords)."""
        return S3ObjectStore(**self.connection_kwargs(), **store_kwargs)

    def purge_run(self, run_id: str) -> None:
        """Delete every stored output of one run (everything under ``<prefix>/run/<run_id>/``)."""
        self.get_store().purge_scope(f"run/{run_id}")
