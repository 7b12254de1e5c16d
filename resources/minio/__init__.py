"""MinIO for the S3 baseline store: :class:`MinioServer` runs the pinned MinIO (built with
``go install``) on 127.0.0.1:9000 with the bucket ``asgard`` (``asgard minio up|down|status``)."""
from ..stores.local_servers import LOCAL_DEFAULT_USER, local_credentials, local_password_file
from .server import DEFAULT_BUCKET, LOCAL_ENDPOINT, MINIO_VERSION, MinioServer, install_minio, minio_binary_path, minio_version

__all__ = [
    "MinioServer", "MINIO_VERSION", "minio_version", "install_minio", "minio_binary_path", "local_credentials",
    "local_password_file", "LOCAL_ENDPOINT", "DEFAULT_BUCKET", "LOCAL_DEFAULT_USER",
]
