"""Every setting of the stores, declared once: its name, kind, default and description.

The stores' constructors take their defaults from here; the Dagster resources expose each as a
described field (``asgard_dagster.settings.described``); the Airflow XCom backend reads each from
``[asgard]`` (``AIRFLOW__ASGARD__<NAME>``) or its connection. ``tests/test_settings.py`` fails if
an adapter lacks one.

Usage::

    from asgard.resources.stores.settings import BACKEND_SETTINGS, STORAGE

    BACKEND_SETTINGS["cassandra"]["port"].default      # 9042
    STORAGE["ttl_seconds"].parse("3600")               # 3600, or StoreConfigError naming the setting
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterator

from .errors import StoreConfigError

#: the local MinIO of ``asgard minio up``
LOCAL_S3_ENDPOINT = "http://127.0.0.1:9000"


@dataclass(frozen=True)
class Setting:
    """One setting. ``kind`` is how its text (an ``[asgard]`` value) parses: ``str``, ``int``,
    ``float``, ``bool`` or ``list`` (comma-separated); ``secret`` ones come from the environment or
    a connection, never from code, and are never logged."""

    name: str
    kind: str
    default: Any
    description: str
    secret: bool = False

    def parse(self, text: str) -> Any:
        """The value of ``text`` (as an ``[asgard]`` setting gives it), or a :class:`StoreConfigError`."""
        text = text.strip()
        try:
            if self.kind == "int":
                return int(text)
            if self.kind == "float":
                return float(text)
        except ValueError:
            raise StoreConfigError(f"{self.name} = {text!r} is not a number ({self.description})") from None
        if self.kind == "bool":
            if text.lower() in ("1", "true", "yes", "on"):
                return True
            if text.lower() in ("0", "false", "no", "off"):
                return False
            raise StoreConfigError(f"{self.name} = {text!r}: say true or false")
        if self.kind == "list":
            return [part.strip() for part in text.split(",") if part.strip()]
        return text


class SettingGroup:
    """The settings of one backend (or those every store shares), by name, in declaration order."""

    def __init__(self, name: str, settings: list[Setting]):
        self.name = name
        self._settings = {s.name: s for s in settings}

    def __getitem__(self, name: str) -> Setting:
        return self._settings[name]

    def __iter__(self) -> Iterator[Setting]:
        return iter(self._settings.values())

    def __contains__(self, name: str) -> bool:
        return name in self._settings

    def names(self, secret: bool | None = None) -> list[str]:
        return [s.name for s in self if secret is None or s.secret == secret]

    def defaults(self) -> dict[str, Any]:
        return {s.name: s.default for s in self}


CONNECT_TIMEOUT = "Seconds to wait for a connection before failing with 'unreachable'."
USE_ENV = "pass it from the environment (Dagster EnvVar('...'), Airflow's connection), never a literal"

#: what every store shares: lifetime, compression, size limit, chunking, signing
STORAGE = SettingGroup("storage", [
    Setting("ttl_seconds", "int", 7 * 24 * 3600,
            "Lifetime of stored objects in seconds (ephemeral data). Keep it longer than you may wait before "
            "re-running from a failure, which reads the earlier run's outputs."),
    Setting("codec", "str", "none", "Chunk compression: 'none', 'lz4', 'zstd' or 'blosc-lz4' (numeric columns); 'auto' chooses per output "
            "(1 MiB or more) from a trial on a sample of it and the store's measured throughput."),
    Setting("placement", "str", "ring",
            "Where outputs live relative to their readers: 'ring' (the store only), 'producer-local' (the store, "
            "and a copy on the producer's host that readers there use after checking it against the manifest), "
            "'auto' (producer-local for an output whose readers all run on the producer's host, as the job's "
            "executor and topology say)."),
    Setting("replicas", "str", "store",
            "Copies the ring keeps of an output's chunks: 'store' (the keyspace's replication factor), '1' (one copy: "
            "an intermediate its run can re-make by re-running its step; lost with its host), 'auto' (one for an "
            "output a single step reads, the store's factor for one several steps read, each from the copy nearest "
            "it, and for an asset). Only Cassandra has a count to give: the other stores take 'store' or 'auto'."),
    Setting("max_object_bytes", "int", 2 << 30,
            "Largest serialized object accepted; a larger one fails before anything is written."),
    Setting("chunk_size_bytes", "int", 0, "Bytes per chunk; 0 uses the backend's default."),
    Setting("concurrency", "int", 8, "Chunk requests in flight per object (the backpressure window)."),
    Setting("signing_key", "str", None,
            "Secret for HMAC-SHA256 signatures: every object is signed, and verified before it is "
            f"deserialized; unsigned or altered objects are refused (TamperedObjectError). {USE_ENV}.",
            secret=True),
])

CASSANDRA = SettingGroup("cassandra", [
    Setting("contact_points", "list", ("127.0.0.1",), "Cassandra hosts to contact first (the local node by default)."),
    Setting("port", "int", 9042, "CQL native transport port."),
    Setting("keyspace", "str", "asgard", "Keyspace of the objects table (created if missing)."),
    Setting("table", "str", "objects", "Table holding manifests and chunks (created if missing)."),
    Setting("replication_factor", "int", 1, "SimpleStrategy replication factor used when creating the keyspace."),
    Setting("consistency", "str", "LOCAL_QUORUM",
            "Consistency level of reads and writes (ONE, LOCAL_QUORUM, QUORUM, ALL, ...). (LOCAL_)QUORUM falls to "
            "one replica only for a request that meets a replica known to be down (a rolling restart)."),
    Setting("username", "str", None, f"User for PasswordAuthenticator; {USE_ENV}.", secret=True),
    Setting("password", "str", None, f"Password for PasswordAuthenticator; {USE_ENV}.", secret=True),
    Setting("ssl_ca_file", "str", None,
            "PEM file of the CA that signed the nodes' certificates; set, every connection uses TLS (1.2+) and "
            "trusts only this CA. For a node of `asgard cassandra up --secure`: its conf/tls/ca.pem. None: plain."),
    Setting("ssl_certfile", "str", None,
            "PEM client certificate, for a cluster that requires one (require_client_auth); needs ssl_ca_file."),
    Setting("ssl_keyfile", "str", None, "PEM private key of ssl_certfile (if not in it)."),
    Setting("ssl_verify_hostname", "bool", True,
            "Check that each node's certificate names the address it is reached at (a secure local node has its "
            "IP in the SAN). False checks the CA signature only."),
    Setting("connect_timeout", "float", 5.0, CONNECT_TIMEOUT),
    Setting("request_timeout", "float", 30.0, "Seconds per read or write request."),
    Setting("durable_writes", "bool", False,
            "durable_writes of the keyspace when it is created. False skips the commit log (outputs are "
            "recomputable; 40% less server CPU per byte written); a crashed node then loses what it had not flushed."),
    Setting("chunk_reads", "str", "auto",
            "How an object's chunks are read: 'quorum' at the consistency above; 'nearest-one' at ONE, from a "
            "replica on this host first (chunks never change once written and are checked against the manifest, "
            "read at the consistency above), a chunk that replica lacks read again at that consistency; 'auto' "
            "nearest-one where the ring spans hosts and has a member on this one (2.2-2.3x faster reads of "
            "64-256 MiB across 3 emulated hosts, docs/results/issue37-chunk-reads-hosts3.txt), else quorum. "
            "An input's metadata 'asgard/chunk_reads' wins."),
    Setting("ride_through_seconds", "float", 60.0,
            "Seconds a request keeps retrying while a node restarts, or a replica is down or draining, before "
            "failing with 'unreachable' (twice the slowest retune restart measured, docs/results). At replication "
            "factor 2 a request does not wait for a restarting member. 0 fails at once."),
])

REDIS = SettingGroup("redis", [
    Setting("host", "str", "127.0.0.1", "Redis host (the local server of `asgard redis up` by default)."),
    Setting("port", "int", 6380, "Redis port (6380: the project's own server, not the distribution's 6379)."),
    Setting("db", "int", 0, "Redis logical database number."),
    Setting("username", "str", None, "ACL user name, if the server uses ACLs.", secret=True),
    Setting("password", "str", None,
            f"Redis password (requirepass); {USE_ENV}. None: for a local host, ASGARD_REDIS_PASSWORD if set "
            "(the password of `asgard redis up`), else no password.", secret=True),
    Setting("key_prefix", "str", "asgard", "First field of every key written."),
    Setting("connect_timeout", "float", 5.0, CONNECT_TIMEOUT),
    Setting("socket_timeout", "float", 60.0, "Seconds per request (a pipelined batch of chunk requests)."),
    Setting("ssl_ca_file", "str", None,
            "PEM CA certificate to verify a TLS server against (its name too); set, every connection uses TLS. "
            "None: plain."),
])

S3 = SettingGroup("s3", [
    Setting("endpoint_url", "str", LOCAL_S3_ENDPOINT, "S3 endpoint; the local MinIO by default, None for AWS S3 itself."),
    Setting("bucket", "str", "asgard", "An existing bucket (`asgard minio up` creates 'asgard')."),
    Setting("prefix", "str", "asgard", "Key prefix inside the bucket."),
    Setting("region", "str", "us-east-1", "Signing region."),
    Setting("aws_access_key_id", "str", None,
            "Access key; None takes it from the environment (AWS_ACCESS_KEY_ID, profile, role; for the local MinIO, "
            f"MINIO_ROOT_USER or its local default); {USE_ENV}.", secret=True),
    Setting("aws_secret_access_key", "str", None,
            f"Secret key; None takes it from the environment like aws_access_key_id; {USE_ENV}.", secret=True),
    Setting("aws_session_token", "str", None, f"Session token for temporary credentials; {USE_ENV}.", secret=True),
    Setting("connect_timeout", "float", 5.0, CONNECT_TIMEOUT),
    Setting("read_timeout", "float", 60.0, "Seconds per request (a chunk's GET or PUT)."),
])

LOCAL = SettingGroup("local", [
    Setting("root", "str", "", "Directory for stored objects; empty uses $ASGARD_HOME/objects."),
])

#: each backend's connection settings
BACKEND_SETTINGS = {group.name: group for group in (CASSANDRA, REDIS, S3, LOCAL)}
