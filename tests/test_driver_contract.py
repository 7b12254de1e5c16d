"""The client's contract with cassandra-driver: every private name and signature it relies on.

The store's fast paths (``asgard.resources.stores.cql``: transport, cluster, session, early,
direct, direct_connection) subclass or call private parts of cassandra-driver. A driver release
that renames one would not fail a request -- the path steps aside and requests go the driver's
way, slower -- so this test, which needs no node, fails instead, and says what to re-check.
"""
from __future__ import annotations

import inspect
import re
from pathlib import Path

import pytest

#: the version every name below was checked against; setup.py pins the same
DRIVER_VERSION = "3.30.1"
RECHECK = ("cassandra-driver changed: re-check {what} (used by {where}) against the new driver's source, "
           "then update tests/test_driver_contract.py and setup.py's pin together.")


def _params(fn) -> list[str]:
    return [p for p in inspect.signature(fn).parameters]


def test_the_driver_is_the_pinned_version():
    import cassandra

    pin = re.search(r'"cassandra-driver==([^"]+)"', (Path(__file__).parent.parent / "setup.py").read_text()).group(1)
    assert pin == DRIVER_VERSION, f"setup.py pins cassandra-driver {pin}; this contract was checked against {DRIVER_VERSION}"
    assert cassandra.__version__ == DRIVER_VERSION, RECHECK.format(
        what=f"every name in this file (installed {cassandra.__version__}, checked {DRIVER_VERSION})", where="cql/")


# (object path, attribute, expected parameters or None for "exists", where the project uses it)
SIGNATURES = [
    ("cassandra.connection.Connection", "_get_socket_addresses", ["self"], "transport.QuickStartConnection"),
    ("cassandra.connection.Connection", "_send_options_message", ["self"], "transport.QuickStartConnection"),
    ("cassandra.connection.Connection", "_send_startup_message", ["self", "compression", "no_compact"],
     "transport.QuickStartConnection"),
    ("cassandra.connection.Connection", "register_watchers", ["self", "type_callback_dict", "register_timeout"],
     "transport.QuickStartConnection"),
    ("cassandra.connection.Connection", "get_request_id", ["self"], "transport.QuickStartConnection"),
    ("cassandra.connection.Connection", "send_msg",
     ["self", "msg", "request_id", "cb", "encoder", "decoder", "result_metadata"], "transport.FastReadConnection"),
    ("cassandra.connection.Connection", "process_msg", ["self", "header", "body"], "transport.FastReadConnection"),
    ("cassandra.connection.Connection", "defunct", ["self", "exc"], "transport.FastReadConnection"),
    ("cassandra.connection.Connection", "wait_for_responses", ["self", "msgs", "kwargs"], "session.EarlyStart.send"),
    ("cassandra.io.libevreactor.LibevConnection", "handle_read", ["self", "watcher", "revents", "errno"],
     "transport.FastReadConnection"),
    ("cassandra.connection._Frame", "__init__",
     ["self", "version", "flags", "stream", "opcode", "body_offset", "end_pos"], "transport.FastReadConnection"),
    ("cassandra.cluster.Cluster", "connection_factory", ["self", "endpoint", "args", "kwargs"],
     "cluster.PreopeningCluster"),
    ("cassandra.cluster.Cluster", "add_prepared", ["self", "query_id", "prepared_statement"], "statements.keep_registered"),
    ("cassandra.query.PreparedStatement", "__init__",
     ["self", "column_metadata", "query_id", "routing_key_indexes", "query", "keyspace", "protocol_version",
      "result_metadata", "result_metadata_id", "column_encryption_policy"], "statements.known_prepared (positional)"),
    ("cassandra.query.BatchStatement", "_add_statement_and_params", ["self", "is_prepared", "statement", "parameters"],
     "early.FirstRequests.batch"),
    ("cassandra.protocol.ExecuteMessage", "__init__",
     ["self", "query_id", "query_params", "consistency_level", "serial_consistency_level", "fetch_size",
      "paging_state", "timestamp", "skip_meta", "continuous_paging_options", "result_metadata_id"], "direct, early, senders"),
    ("cassandra.protocol.BatchMessage", "__init__",
     ["self", "batch_type", "queries", "consistency_level", "serial_consistency_level", "timestamp", "keyspace"],
     "senders.DirectSender.put, early.FirstRequests.write_early (positional)"),
    ("cassandra.protocol.ProtocolHandler", "encode_message",
     ["msg", "stream_id", "protocol_version", "compressor", "allow_beta_protocol_version"],
     "direct_connection.DirectConnection._send"),
    ("cassandra.protocol.ProtocolHandler", "decode_message",
     ["protocol_version", "user_type_map", "stream_id", "flags", "opcode", "body", "decompressor", "result_metadata"],
     "direct_connection.DirectConnection._decode"),
    ("cassandra.protocol.ColumnMetadata", "__new__", ["_cls", "keyspace_name", "table_name", "name", "type"],
     "statements.known_prepared"),
    ("cassandra.timestamps.MonotonicTimestampGenerator", "__call__", ["self"], "cluster.PinnableTimestamps"),
    # raises a refused re-prepare's error bare (tests/test_cql_node_stopping.py shows how)
    ("cassandra.cluster.ResponseFuture", "_execute_after_prepare", ["self", "host", "connection", "pool", "response"],
     "errors.is_reconnecting, retry.Requests.execute"),
]


def _resolve(path: str):
    import importlib

    module, _, name = path.rpartition(".")
    return getattr(importlib.import_module(module), name)


@pytest.mark.parametrize("path,attribute,params,where", SIGNATURES, ids=[f"{p.rsplit('.', 1)[1]}.{a}"
                                                                        for p, a, _, _ in SIGNATURES])
def test_each_private_method_the_client_calls_or_overrides_has_the_signature_it_was_written_for(
        path, attribute, params, where):
    owner = _resolve(path)
    assert hasattr(owner, attribute), RECHECK.format(what=f"{path}.{attribute} (gone)", where=where)
    got = _params(getattr(owner, attribute))
    assert got == params, RECHECK.format(what=f"{path}.{attribute}{tuple(got)} (was {tuple(params)})", where=where)


def test_the_module_level_names_and_instance_attributes_the_client_reads_are_there():
    from cassandra import cqltypes
    from cassandra.cluster import Cluster, DefaultConnection, ResponseFuture, Session
    from cassandra.connection import NONBLOCKING, Connection, DefaultEndPoint, frame_header_v3
    from cassandra.io.libevreactor import LibevConnection, libev
    from cassandra.query import BatchStatement

    problems = []

    def need(ok: bool, what: str, where: str):
        if not ok:
            problems.append(RECHECK.format(what=what, where=where))

    need(issubclass(DefaultConnection, LibevConnection), "cluster.DefaultConnection is libev's",
         "transport.fast_read_connection_class (else the fast reader steps aside)")
    need(hasattr(libev, "EV_ERROR"), "libevreactor.libev.EV_ERROR", "transport.FastReadConnection.handle_read")
    need(frame_header_v3.size == 8, "connection.frame_header_v3 (flags, stream, opcode, length: 8 bytes)",
         "transport.FastReadConnection._parse")
    need(isinstance(NONBLOCKING, (tuple, set, frozenset)), "connection.NONBLOCKING", "transport.FastReadConnection")
    for kind in ("VarcharType", "BytesType", "Int32Type", "BooleanType", "UTF8Type"):
        need(hasattr(cqltypes, kind), f"cqltypes.{kind}", "statements.CQL_TYPES, early")

    conn = Connection(DefaultEndPoint("127.0.0.1", 9042))  # the base class opens no socket
    for attr in ("_push_watchers", "_requests", "in_flight", "lock", "cql_version", "compression",
                 "no_compact", "protocol_version", "ssl_context", "ssl_options", "is_closed", "is_defunct",
                 "endpoint", "_on_orphaned_stream_released"):
        need(hasattr(conn, attr), f"Connection().{attr}", "transport, cluster.PreopeningCluster")
    need(hasattr(conn.endpoint, "resolve") and hasattr(conn.endpoint, "socket_family"),
         "EndPoint.resolve / socket_family", "transport.QuickStartConnection._get_socket_addresses")
    # QuickStartConnection skips OPTIONS, where the driver sets _compressor, and sets it itself:
    # the driver's STARTUP handler must still be the one that reads it
    import cassandra.connection as connection_module

    source = Path(connection_module.__file__).parent / "connection.py"  # beside its compiled module
    need(source.is_file() and "if self._compressor:" in source.read_text(),
         "Connection._enable_compression reads self._compressor", "transport.QuickStartConnection")
    for attr in ("in_buffer_size", "out_buffer_size"):
        need(hasattr(Connection, attr), f"Connection.{attr}", "transport.large_buffer_connection_class")

    cluster = Cluster(["127.0.0.1"], timestamp_generator=lambda: 1)  # not connected
    for attr in ("profile_manager", "endpoints_resolved", "timestamp_generator", "connection_class",
                 "connect_timeout", "contact_points", "protocol_version", "ssl_context", "auth_provider", "metadata"):
        need(hasattr(cluster, attr), f"Cluster().{attr}", "cluster, direct, early")
    need(cluster.timestamp_generator() == 1, "Cluster(timestamp_generator=) is the one its requests use",
         "cluster.build_cluster (a put's pinned write timestamp)")
    need(hasattr(cluster.connection_class, "initialize_reactor"), "Connection.initialize_reactor",
         "cluster.PreopeningCluster.preopen")
    need(hasattr(cluster.profile_manager.default.load_balancing_policy, "make_query_plan"),
         "Cluster.profile_manager.default.load_balancing_policy.make_query_plan", "direct.DirectRequests.host")
    for attr in ("_request_init_callbacks", "client_protocol_handler"):
        need(hasattr(Session, attr), f"Session.{attr}", "direct.DirectRequests.session, connected")
    need(hasattr(ResponseFuture, "_timer"), "ResponseFuture._timer", "retry.release")
    need(hasattr(BatchStatement(), "_statements_and_parameters"), "BatchStatement._statements_and_parameters",
         "early.FirstRequests.write_early")
    assert not problems, "\n".join(problems)


#: every private name of the driver the client reads, each checked by a test above
DRIVER_PRIVATE_NAMES = frozenset({
    "_get_socket_addresses", "_send_options_message", "_send_startup_message", "_push_watchers", "_requests",
    "_compressor", "_socket", "_request_init_callbacks", "_timer",
    "_statements_and_parameters", "_add_statement_and_params", "_on_orphaned_stream_released", "_Frame",
    "_execute_after_prepare"})


def test_the_client_uses_no_private_driver_name_this_file_does_not_check():
    """A new private name in the client must be added above: every ``._name`` the client's modules
    read off a driver object is listed here (the client's own private names excluded)."""
    checked = DRIVER_PRIVATE_NAMES
    root = Path(__file__).parent.parent / "resources" / "stores" / "cql"
    own = set()
    used = set()
    for path in root.glob("*.py"):
        text = path.read_text()
        own |= set(re.findall(r"(?:def|class)\s+(_\w+)", text))
        own |= set(re.findall(r"self\.(_\w+)\s*(?::[^=\n]+)?=[^=]", text))  # attributes the client sets
        own |= set(re.findall(r"self\.(_\w+)\s*,", text))  # and those it sets in a tuple
        own |= set(re.findall(r"\bas\s+(_\w+)", text))  # its own aliases
        own |= set(re.findall(r"^\s+(_\w+)(?:\s*:[^=\n]+)?\s*=", text, re.M))  # class attributes
        used |= set(re.findall(r"\.(_[a-z]\w*)\b", text))
        used |= set(re.findall(r"import[^\n]*\b(_[A-Z]\w*)", text))
    unknown = sorted(used - own - checked - {"__init__", "__name__", "__new__", "__getitem__"})
    assert not unknown, (f"the client reads private names this contract does not check: {unknown}; "
                         "add each to the tests above with where it is used")
