"""A local MinIO for the S3 baseline: the pinned MinIO built from source with ``go install``
into ``$ASGARD_HOME/cache/minio/<MINIO_VERSION>/minio`` (the same command as
``scripts/setup.sh``), serving S3 on 127.0.0.1:9000 (console 9001) from a single drive in
``$ASGARD_HOME/run/minio/data``; the bucket ``asgard`` is created on start.

Credentials come from ``MINIO_ROOT_USER`` / ``MINIO_ROOT_PASSWORD``. When those are unset the
server uses the user ``asgard-local`` and a password generated on first use into
``$ASGARD_HOME/run/minio/root.password`` (mode 0600): no secret is written in the code. The
server binds to 127.0.0.1 only and holds only ephemeral test data. Set both variables for
anything else.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import urllib.error
import urllib.request
from pathlib import Path

from ..paths import cache_dir, run_dir
from ..process import ManagedServer, ServerError
from ..stores.local_servers import local_credentials

#: github.com/minio/minio pseudo-version, pinned (keep equal to MINIO_VERSION in scripts/setup.sh)
MINIO_VERSION = "v0.0.0-20260212201848-7aac2a2c5b7c"


def minio_version() -> str:
    """MINIO_VERSION, or $ASGARD_MINIO_VERSION where it is set (read at each use, never at import)."""
    return os.environ.get("ASGARD_MINIO_VERSION") or MINIO_VERSION


MINIO_MODULE = "github.com/minio/minio"
DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 9000
DEFAULT_CONSOLE_PORT = 9001
DEFAULT_BUCKET = "asgard"
LOCAL_ENDPOINT = f"http://{DEFAULT_HOST}:{DEFAULT_PORT}"


def minio_binary_path(version: str | None = None) -> Path:
    version = version or minio_version()
    return cache_dir("minio", version) / "minio"


def install_minio(version: str | None = None, quiet: bool = True) -> Path:
    """The MinIO binary of ``version``, built on first use with
    ``GOBIN=$ASGARD_HOME/cache/minio/<version> go install github.com/minio/minio@<version>``
    (several minutes the first time; needs Go on PATH)."""
    version = version or minio_version()
    binary = minio_binary_path(version)
    if os.access(binary, os.X_OK):
        return binary
    go = shutil.which("go") or ("/usr/local/go/bin/go" if os.access("/usr/local/go/bin/go", os.X_OK) else None)
    if go is None:
        raise ServerError("Go is not on PATH, so MinIO cannot be built: run scripts/setup.sh "
                          "(or install Go 1.24+ from https://go.dev/dl/)")
    staging = binary.parent / ".partial"
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    env = dict(os.environ, GOBIN=str(staging))
    proc = subprocess.run([go, "install", f"{MINIO_MODULE}@{version}"], env=env,
                          capture_output=quiet, text=True)
    built = staging / "minio"
    if proc.returncode != 0 or not built.exists():
        raise ServerError(f"go install {MINIO_MODULE}@{version} failed:\n"
                          f"{(proc.stdout or '')[-2000:]}{(proc.stderr or '')[-3000:]}")
    os.replace(built, binary)
    shutil.rmtree(staging, ignore_errors=True)
    return binary


class MinioServer(ManagedServer):
    """One local single-drive MinIO server.

    Example::

        server = MinioServer()      # S3 on http://127.0.0.1:9000, console on :9001
        server.start()              # builds MinIO on first use, waits for /minio/health/live,
                                    # creates the bucket 'asgard'
        server.client().list_objects_v2(Bucket="asgard")
        server.stop()

    Credentials: ``MINIO_ROOT_USER`` / ``MINIO_ROOT_PASSWORD`` from the environment, else
    ``asgard-local`` and a generated local password (see :func:`local_credentials`).
    """

    start_timeout = 60.0

    def __init__(
        self,
        port: int = DEFAULT_PORT,
        console_port: int = DEFAULT_CONSOLE_PORT,
        host: str = DEFAULT_HOST,
        bucket: str = DEFAULT_BUCKET,
        version: str | None = None,
        numa_node: int | None = None,
        workdir: Path | None = None,
        netns: str | None = None,
    ):
        version = version or minio_version()
        super().__init__("minio", workdir or run_dir("minio"), numa_node, netns)
        self.host, self.port, self.console_port = host, port, console_port
        self.bucket, self.version = bucket, version
        self.access_key, self.secret_key = local_credentials()

    @property
    def data_dir(self) -> Path:
        return self.workdir / "data"

    @property
    def endpoint(self) -> str:
        return f"http://{self.host}:{self.port}"

    def prepare(self) -> None:
        install_minio(self.version)
        self.data_dir.mkdir(parents=True, exist_ok=True)

    def command(self) -> list[str]:
        return [
            str(install_minio(self.version)), "server", str(self.data_dir),
            "--address", f"{self.host}:{self.port}",
            "--console-address", f"{self.host}:{self.console_port}",
        ]

    def environment(self) -> dict[str, str]:
        env = dict(os.environ)
        env.update(MINIO_ROOT_USER=self.access_key, MINIO_ROOT_PASSWORD=self.secret_key,
                   MINIO_UPDATE="off", MINIO_BROWSER_REDIRECT="off",
                   # the request counters `asgard bench apps` prices S3 by; the server binds to
                   # loopback only, so reading them without a token exposes nothing
                   MINIO_PROMETHEUS_AUTH_TYPE="public")
        return env

    def is_ready(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.endpoint}/minio/health/live", timeout=1.0) as resp:
                return resp.status == 200
        except (urllib.error.URLError, OSError):
            return False

    def start(self, timeout: float | None = None) -> float:
        seconds = super().start(timeout)
        self.ensure_bucket()
        return seconds

    def client(self):
        """A boto3 S3 client for this server with its root credentials."""
        import boto3
        from botocore.config import Config

        return boto3.client(
            "s3", endpoint_url=self.endpoint, aws_access_key_id=self.access_key,
            aws_secret_access_key=self.secret_key, region_name="us-east-1",
            config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 2, "mode": "standard"},
                          connect_timeout=2, read_timeout=30),
        )

    def request_counts(self) -> dict[str, int]:
        """S3 API requests served since the server started, ``{api: count}`` with lower-case
        API names (``putobject``, ``getobject``, ``headobject``, ``listobjectsv2``, ...), from
        its Prometheus metrics (v3: live counters; v2's are refreshed only every 10 s)."""
        import re

        url = f"{self.endpoint}/minio/metrics/v3/api/requests"
        try:
            with urllib.request.urlopen(url, timeout=5.0) as resp:
                text = resp.read().decode()
        except (urllib.error.URLError, OSError) as exc:
            raise ServerError(f"MinIO metrics at {url} unreadable ({exc}); restart it with "
                              "`asgard minio down && asgard minio up` so MINIO_PROMETHEUS_AUTH_TYPE=public applies") from exc
        counts: dict[str, int] = {}
        for m in re.finditer(r'^minio_api_requests_total\{([^}]*)\}\s+([0-9.e+]+)$', text, re.M):
            labels = dict(re.findall(r'(\w+)="([^"]*)"', m.group(1)))
            if labels.get("type", "s3") == "s3" and "name" in labels:
                api = labels["name"].lower()
                counts[api] = counts.get(api, 0) + int(float(m.group(2)))
        return counts

    def ensure_bucket(self, bucket: str | None = None) -> str:
        """Create ``bucket`` (default: the server's) unless it exists; returns its name."""
        from botocore.exceptions import ClientError

        bucket = bucket or self.bucket
        client = self.client()
        try:
            client.head_bucket(Bucket=bucket)
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") not in ("404", "NoSuchBucket", "NotFound"):
                raise
            try:
                client.create_bucket(Bucket=bucket)
            except ClientError as exc2:
                if exc2.response.get("Error", {}).get("Code") not in ("BucketAlreadyOwnedByYou", "BucketAlreadyExists"):
                    raise
        return bucket

    def status(self) -> dict:
        info = super().status()
        info["console"] = f"http://{self.host}:{self.console_port}"
        info["bucket"] = self.bucket
        info["version"] = self.version
        return info
