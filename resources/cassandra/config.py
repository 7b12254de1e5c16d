"""Render ``cassandra.yaml`` from the project's defaults plus knob overrides.

Only what differs from Cassandra's built-in defaults (``Config.java``) is written, plus the
per-instance addresses and directories, so the tuner's overrides are the whole story of a
configuration. Defaults here favour a fast-starting, local, ephemeral-data node.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from .tls import NodeTLS


#: how often a node moves buffered hints to its hint files (``hints_flush_period``)
HINTS_FLUSH_PERIOD_MS = 1000


def token_for(index: int, nodes: int) -> str:
    """Evenly spaced Murmur3 token for ring position ``index`` (1-based) of ``nodes``."""
    if not 1 <= index <= nodes:
        raise ValueError(f"ring position {index} is outside 1..{nodes}")
    return str(-(2**63) + (index - 1) * (2**64 // nodes))


#: a member keeps authorizing requests while system_auth cannot answer a LOCAL_QUORUM read (one
#: member down, another slow: a run's put failed "Unable to perform authorization of super-user
#: permission ... received only 1 responses" in the nemesis across hosts): a role's status and
#: grants refresh in the background every 2 s (Cassandra's default validity) and keep their last
#: value up to 10 minutes where a refresh fails; logins (credentials) stay at Cassandra's defaults
AUTH_CACHES = {"roles_validity": "600s", "roles_update_interval": "2s",
               "permissions_validity": "600s", "permissions_update_interval": "2s"}


def base_config(
    directory: Path,
    address: str,
    seeds: list[str],
    index: int = 1,
    nodes: int = 1,
    native_port: int = 9042,
    storage_port: int = 7000,
    cluster_name: str = "asgard",
    authenticate: bool = False,
    tls: NodeTLS | None = None,
) -> dict[str, Any]:
    """The node's configuration. With ``tls`` (a secure node) clients must use TLS with the
    node's PEM certificate, and log in (PasswordAuthenticator)."""
    config = {
        "cluster_name": cluster_name,
        # one token per node, precomputed: no token allocation work or randomness at start
        "num_tokens": 1,
        "initial_token": token_for(index, nodes),
        "auto_bootstrap": False,  # nodes of a fresh local ring have no data to stream
        # outputs are ephemeral: a dropped or truncated table's data need not stay on disk as a
        # snapshot (the snapshots of dropped test keyspaces piled up on this machine's disk)
        "auto_snapshot": False,
        "partitioner": "org.apache.cassandra.dht.Murmur3Partitioner",
        "endpoint_snitch": "SimpleSnitch",
        "seed_provider": [
            {
                "class_name": "org.apache.cassandra.locator.SimpleSeedProvider",
                "parameters": [{"seeds": ",".join(f"{s}:{storage_port}" for s in seeds)}],
            }
        ],
        "listen_address": address,
        "rpc_address": address,
        "storage_port": storage_port,
        "native_transport_port": native_port,
        "start_native_transport": True,
        "data_file_directories": [str(directory / "data")],
        "commitlog_directory": str(directory / "commitlog"),
        "hints_directory": str(directory / "hints"),
        # hints reach their file within a second (Cassandra: 10 s), so a rolling restart can tell
        # from the hint files on disk that a member has been sent everything it missed
        "hints_flush_period": f"{HINTS_FLUSH_PERIOD_MS}ms",
        "saved_caches_directory": str(directory / "saved_caches"),
        "cdc_raw_directory": str(directory / "cdc_raw"),
        "commitlog_sync": "periodic",
        "commitlog_sync_period": "10000ms",
        "authenticator": "PasswordAuthenticator" if authenticate or tls else "AllowAllAuthenticator",
        "authorizer": "CassandraAuthorizer" if authenticate or tls else "AllowAllAuthorizer",
        "role_manager": "CassandraRoleManager",
        # ephemeral objects are chunked well below this; keep Cassandra's 16 MiB frame limit
        "native_transport_max_frame_size": "16MiB",
        "concurrent_compactors": 2,
        # a small put is one UNLOGGED batch of its head and index rows, up to the store's
        # batch_bytes (40 KiB) below the 50 KiB fail threshold: no warning logged for each
        "batch_size_warn_threshold": "50KiB",
        # named memtable configurations (Cassandra 5.0, CEP-11): a table picks one with
        # ALTER TABLE ... WITH memtable = '<name>', which only works for names defined here.
        # The tuner's live `memtable` table knob needs them; "default" (what tables without
        # the option use) stays SkipListMemtable, Cassandra's own default.
        "memtable": {
            "configurations": {
                "skiplist": {"class_name": "SkipListMemtable"},
                "trie": {"class_name": "TrieMemtable"},
                "default": {"inherits": "skiplist"},
            }
        },
    }
    if authenticate or tls:
        config.update(AUTH_CACHES)
    if tls is not None:
        config["client_encryption_options"] = client_encryption(tls)
    return config


def client_encryption(tls: NodeTLS) -> dict[str, Any]:
    """TLS on the CQL port only (``optional: false``: a plain client is refused), from PEM files
    (Cassandra 5.0's PEMBasedSslContextFactory: no JKS keystore, no keystore password to keep).
    Clients are not asked for a certificate: they log in with a password."""
    return {
        "enabled": True,
        "optional": False,
        "ssl_context_factory": {"class_name": "org.apache.cassandra.security.PEMBasedSslContextFactory"},
        "keystore": str(tls.keystore),  # private key, then certificate chain
        "truststore": str(tls.ca_cert),
        "require_client_auth": "false",
    }


def render_config(base: dict[str, Any], overrides: dict[str, Any] | None = None) -> dict[str, Any]:
    """``base`` updated by ``overrides``; ``None`` values remove a key (back to Cassandra's default)."""
    config = dict(base)
    for key, value in (overrides or {}).items():
        if value is None:
            config.pop(key, None)
        else:
            config[key] = value
    return config


def write_config(path: Path, config: dict[str, Any]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(config, sort_keys=True))
    return path


LOGBACK_XML = """<configuration scan="false">
  <appender name="FILE" class="ch.qos.logback.core.rolling.RollingFileAppender">
    <file>${cassandra.logdir}/system.log</file>
    <rollingPolicy class="ch.qos.logback.core.rolling.SizeAndTimeBasedRollingPolicy">
      <fileNamePattern>${cassandra.logdir}/system.log.%d{yyyy-MM-dd}.%i.zip</fileNamePattern>
      <maxFileSize>20MB</maxFileSize><maxHistory>3</maxHistory><totalSizeCap>100MB</totalSizeCap>
    </rollingPolicy>
    <encoder><pattern>%-5level [%thread] %date{ISO8601} %F:%L - %msg%n</pattern></encoder>
  </appender>
  <appender name="STDOUT" class="ch.qos.logback.core.ConsoleAppender">
    <filter class="ch.qos.logback.classic.filter.ThresholdFilter"><level>WARN</level></filter>
    <encoder><pattern>%-5level [%thread] %date{ISO8601} %F:%L - %msg%n</pattern></encoder>
  </appender>
  <root level="INFO"><appender-ref ref="FILE"/><appender-ref ref="STDOUT"/></root>
  <logger name="org.apache.cassandra" level="INFO"/>
</configuration>
"""


def server_encryption(tls: NodeTLS) -> dict[str, Any]:
    """Internode TLS for every connection (``internode_encryption: all``), mutual: each member
    presents its certificate and trusts only the ring's CA (PEM files, as for clients)."""
    return {
        "internode_encryption": "all",
        "optional": False,
        "ssl_context_factory": {"class_name": "org.apache.cassandra.security.PEMBasedSslContextFactory"},
        "keystore": str(tls.keystore),
        "truststore": str(tls.ca_cert),
        "require_client_auth": True,
        "require_endpoint_verification": False,  # members are reached by IP; the CA is the ring's own
    }


def host_ring_settings(seeds: list[str], storage_port: int, replication_factor: int,
                       tls: NodeTLS | None) -> dict[str, Any]:
    """What a member of a ring across hosts sets beside :func:`base_config`: the seeds of several
    hosts, the datacenter-and-rack snitch, tokens allocated for the keyspace's replication factor
    (16 per member), bootstrap on join (a host joining a running ring streams its ranges), and
    internode TLS on one CA."""
    settings: dict[str, Any] = {
        "seed_provider": [{"class_name": "org.apache.cassandra.locator.SimpleSeedProvider",
                           "parameters": [{"seeds": ",".join(f"{s}:{storage_port}" for s in seeds)}]}],
        "endpoint_snitch": "GossipingPropertyFileSnitch",
        "num_tokens": 16,
        "allocate_tokens_for_local_replication_factor": replication_factor,
        "initial_token": None,
        "auto_bootstrap": None,  # Cassandra's default, true: a joining member streams its ranges
    }
    if tls is not None:
        settings["server_encryption_options"] = server_encryption(tls)
    return settings
