"""Retuning a cluster the project does not run: what can be applied from outside, and a record of
every knob of a decision as applied or not, and why.

A cluster someone else runs (their operations team's, or a cass-operator ``CassandraDatacenter``)
can still take, from a client with the right role:

* keyspace and table options, by CQL (``ALTER KEYSPACE`` / ``ALTER TABLE``), on any cluster: only
  the options whose knob changes, each map merged onto the one in force (:mod:`.schema_alter`), so
  the operator's other settings stay;
* live settings, over JMX, where the user gives each member's JMX endpoint and credentials
  (nodetool's own transport: ``nodetool -h HOST -p PORT -u USER -pwf FILE``; no shell on the host).

A restart-only setting is never applied here: the project cannot restart a member it does not
run. It is recorded as not applied, with the exact ``cassandra.yaml`` change an operator would
make, and the same as a cass-operator ``spec.config`` fragment. Nothing is created on such a
cluster: a keyspace or table that does not exist yet is reported, not made.

Free of Dagster and Airflow: the retune job of either calls :func:`apply_unmanaged` and puts
:func:`knob_report` in its output.

Example::

    outcomes = apply_unmanaged(session, "asgard", "objects", current, new,
                               jmx={"10.0.0.5": JmxEndpoint("10.0.0.5", 7199, "ops", password)})
    [o.as_dict() for o in outcomes]   # each changed knob: applied or not, how or why
"""
from __future__ import annotations

import dataclasses
import os
import tempfile
from typing import Any, Mapping

from .knobs import CLIENT, KEYSPACE, KNOBS, LIVE, RESTART, TABLE, Configuration
from .schema_alter import (
    KEYSPACE_OPTION_KNOBS, TABLE_OPTION_KNOBS, _statement, alter_keyspace_statement, alter_table_statement,
    keyspace_changes, read_keyspace_options, read_table_options, table_changes,
)

#: the keyspace or table option each knob writes
OPTION_OF_KNOB = {k: option for option, knobs in {**TABLE_OPTION_KNOBS, **KEYSPACE_OPTION_KNOBS}.items() for k in knobs}

#: knob values that a Cassandra release before the one named does not have (4.1 refuses the ALTER
#: that names them: "Unable to find compaction strategy class", "Memtable configuration not found")
SINCE_RELEASE = {
    ("compaction", "UCS"): ("5.0", "UnifiedCompactionStrategy (compaction UCS)"),
    ("memtable", "trie"): ("5.0", "trie memtable (TrieMemtable)"),
}


def _release(text: str) -> tuple[int, ...]:
    parts = []
    for part in str(text).split("-")[0].split("."):
        if not part.isdigit():
            break
        parts.append(int(part))
    return tuple(parts)


def lacking(name: str, value: Any, releases: Mapping[str, str | None], new: Configuration | None = None) -> str | None:
    """Why the members at ``releases`` (``{address: release_version}``) cannot take ``name = value``
    (a compaction strategy or memtable their release does not have), or None. ``new``: the whole
    configuration (UCS's scaling parameters go with UCS)."""
    if name == "ucs_scaling_parameters" and new is not None and new["compaction"] == "UCS":
        return lacking("compaction", "UCS", releases)
    since = SINCE_RELEASE.get((name, value))
    if since is None:
        return None
    older = {m: r for m, r in releases.items() if r and _release(r) < _release(since[0])}
    if not older:
        return None
    return (f"Cassandra {', '.join(sorted(set(older.values())))} (on {sorted(older)}) has no {since[1]}: it came with "
            f"Cassandra {since[0]}. {name} stays as it is in force there; nothing was sent for it")


@dataclasses.dataclass(frozen=True)
class JmxEndpoint:
    """One member's JMX, as nodetool reaches it (``ssl``: JMX over TLS, with ``truststore`` the
    JKS/PKCS12 file that trusts its certificate)."""

    host: str
    port: int = 7199
    username: str | None = None
    password: str | None = None
    ssl: bool = False
    truststore: str | None = None
    truststore_password: str | None = None

    def __repr__(self) -> str:  # never the password
        return f"JmxEndpoint({self.host}:{self.port}, user={self.username!r}, ssl={self.ssl})"


@dataclasses.dataclass
class KnobOutcome:
    """What became of one knob of a decision."""

    name: str
    kind: str  # live | table | keyspace | restart | client
    was: Any
    wanted: Any
    applied: bool
    how: str = ""  # the CQL or nodetool command that applied it
    why: str = ""  # why it was not applied
    yaml: dict | None = None  # the cassandra.yaml change an operator would make (restart-only knobs)

    def as_dict(self) -> dict[str, Any]:
        out = {"knob": self.name, "kind": self.kind, "from": self.was, "to": self.wanted, "applied": self.applied}
        if self.how:
            out["how"] = self.how
        if self.why:
            out["why"] = self.why
        if self.yaml is not None:
            out["cassandra_yaml"] = self.yaml
            out["cass_operator_spec_config"] = {"cassandra-yaml": self.yaml}
        return out


def yaml_change(config: Configuration, names: list[str]) -> dict[str, Any]:
    """The ``cassandra.yaml`` keys ``names`` set in ``config`` (``None``: remove the key, back to
    Cassandra's default), as ``Configuration.yaml_overrides`` renders them."""
    overrides = config.yaml_overrides()
    keys = set()
    for name in names:
        key = KNOBS[name].yaml_key
        if name == "file_cache_size_mib":
            keys |= {"file_cache_enabled", "file_cache_size"}
        elif name == "commitlog_sync":
            keys |= {"commitlog_sync", "commitlog_sync_group_window", "commitlog_sync_period"}
        elif key:
            keys.add(key)
    return {k: overrides.get(k) for k in sorted(keys)}


def _exists(session: Any, keyspace: str, table: str | None = None) -> bool:
    if table is None:
        return session.execute("SELECT keyspace_name FROM system_schema.keyspaces WHERE keyspace_name = %s",
                               (keyspace,)).one() is not None
    return session.execute("SELECT table_name FROM system_schema.tables WHERE keyspace_name = %s AND "
                           "table_name = %s", (keyspace, table)).one() is not None


def remote_nodetool(endpoint: JmxEndpoint, *args: str, timeout: float = 120) -> str:
    """``nodetool args`` against a member's JMX endpoint (the password by a 0600 file, never on
    the command line); the tool is the one of the project's own Cassandra jars."""
    from asgard.resources.cassandra.nodetool import nodetool

    with tempfile.TemporaryDirectory(prefix="asgard-jmx-") as tmp:
        credentials = None
        if endpoint.username:
            path = os.path.join(tmp, "jmx.password")
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w") as f:
                f.write(f"{endpoint.username} {endpoint.password or ''}\n")
            credentials = (endpoint.username, path)
        return nodetool(endpoint.port, *args, timeout=timeout, credentials=credentials, host=endpoint.host,
                        ssl=endpoint.ssl, truststore=endpoint.truststore,
                        truststore_password=endpoint.truststore_password)


def apply_unmanaged(session: Any, keyspace: str, table: str, current: Configuration, new: Configuration,
                    members: list[str], jmx: Mapping[str, JmxEndpoint] | None = None,
                    apply: bool = True, releases: Mapping[str, str | None] | None = None) -> list[KnobOutcome]:
    """Bring what can be changed from outside to ``new``; one :class:`KnobOutcome` per knob that
    differs. ``members``: the ring's member addresses; ``jmx``: each member's endpoint (a live
    setting is applied only if every member has one). ``apply=False``: the same record, nothing
    changed (a dry run). ``releases``: each member's Cassandra release (``release_version``): a
    value a member's release lacks (:func:`lacking`) is recorded as not applied, and not sent; an
    ``ALTER`` the cluster refuses all the same is recorded with the server's message, and the rest
    goes on."""
    changed = new.diff(current)  # {knob: (current's, new's)}
    lacks = {k: why for k, (_, wanted) in changed.items() if (why := lacking(k, wanted, releases or {}, new))}
    outcomes: list[KnobOutcome] = []
    jmx = dict(jmx or {})
    without_jmx = [m for m in members if m not in jmx]
    keyspace_exists = _exists(session, keyspace)
    table_exists = keyspace_exists and _exists(session, keyspace, table)

    def execute(cql: str, params: tuple) -> Any:
        return session.execute(cql, params, timeout=60)

    # only the options a changed knob writes and the schema in force lacks, maps merged onto it
    schema_knobs = {k for k in changed if KNOBS[k].apply in (KEYSPACE, TABLE) and k not in lacks}
    keyspace_cql = table_cql = None
    keyspace_options: dict[str, Any] = {}
    table_options: dict[str, Any] = {}
    if keyspace_exists and any(KNOBS[k].apply == KEYSPACE for k in schema_knobs):
        in_force = read_keyspace_options(execute, keyspace) or {}
        keyspace_options = keyspace_changes(in_force, new, schema_knobs)
        keyspace_cql = alter_keyspace_statement(keyspace, in_force, new, schema_knobs)
    if table_exists and any(KNOBS[k].apply == TABLE for k in schema_knobs):
        in_force = read_table_options(execute, keyspace, table) or {}
        table_options = table_changes(in_force, new, schema_knobs)
        table_cql = alter_table_statement(keyspace, table, in_force, new, schema_knobs)
    in_force_already: set[str] = set()  # knobs whose option needs no change
    for name in sorted(changed):
        was, wanted = changed[name]
        kind = KNOBS[name].apply
        outcome = KnobOutcome(name, kind, was, wanted, applied=False)
        if name in lacks:
            outcome.why = lacks[name]
        elif kind == KEYSPACE:
            if not keyspace_exists:
                outcome.why = (f"keyspace {keyspace} does not exist yet (nothing is created on a cluster the "
                               "project does not run): the store creates it with its first output")
            elif OPTION_OF_KNOB[name] in keyspace_options:
                outcome.how = keyspace_cql
            else:
                in_force_already.add(name)
        elif kind == TABLE:
            if not table_exists:
                outcome.why = (f"table {keyspace}.{table} does not exist yet (nothing is created on a cluster the "
                               "project does not run): the store creates it with its first output")
            elif OPTION_OF_KNOB[name] in table_options:
                outcome.how = table_cql
            else:
                in_force_already.add(name)
        elif kind == LIVE:
            if without_jmx:
                command = " ".join(new.live_commands()[name])
                outcome.why = (f"a live setting goes over JMX, and no JMX endpoint was given for {without_jmx} "
                               f"(set jmx_port or jmx_endpoints, and jmx_username/jmx_password): an operator runs "
                               f"`nodetool {command}` on each member, and sets it in cassandra.yaml to keep it")
                outcome.yaml = yaml_change(new, [name])
            else:
                outcome.how = "nodetool " + " ".join(new.live_commands()[name]) + f" on {sorted(jmx)}"
        elif kind == RESTART:
            outcome.why = (f"restart-only, and the project does not run {members}: it restarts only members it "
                           "launched. Change cassandra.yaml on each member and restart them one at a time (or set "
                           "spec.config in the cass-operator CassandraDatacenter, which rolls them)")
            outcome.yaml = yaml_change(new, [name])
        elif kind == CLIENT:
            client = new.client_options()
            outcome.why = (f"a client option: set it on the IO manager or XCom backend ({client}); the retune job "
                           "does not change a running pipeline's settings")
        outcomes.append(outcome)
    for o in (o for o in outcomes if o.name in in_force_already):  # in force already, or no effect there
        where = keyspace if o.kind == KEYSPACE else f"{keyspace}.{table}"
        o.applied, o.how = True, f"nothing sent: {where}'s {OPTION_OF_KNOB[o.name]} is as {o.name} = {o.wanted!r} wants"
    if not apply:
        for o in outcomes:
            if o.how and o.name not in in_force_already:
                o.why, o.how = "not applied: a dry run (apply: false)", f"would run: {o.how}"
        return outcomes
    from cassandra import InvalidRequest, Unauthorized
    from cassandra.protocol import RequestValidationException

    refusal = (RequestValidationException, InvalidRequest, Unauthorized)  # the server said no; the run goes on
    refused: dict[str, str] = {}  # option -> why, with the server's message
    alone_how: dict[str, str] = {}  # option -> the ALTER that set it on its own (after a refused one of several)
    for cql, head, options in ((keyspace_cql, f"ALTER KEYSPACE {keyspace}", keyspace_options),
                               (table_cql, f"ALTER TABLE {keyspace}.{table}", table_options)):
        if not cql:
            continue
        try:
            session.execute(cql, timeout=60)
        except refusal as exc:
            if len(options) == 1:
                refused[next(iter(options))] = f"the cluster refused `{cql}`: {_server_message(exc)}"
                continue
            # one option the release (or its cassandra.yaml) lacks: the others go on their own
            for option, value in options.items():
                alone = _statement(head, {option: value})
                try:
                    session.execute(alone, timeout=60)
                    alone_how[option] = alone
                except refusal as one:
                    refused[option] = f"the cluster refused `{alone}`: {_server_message(one)}"
    for o in outcomes:
        if o.kind in (KEYSPACE, TABLE) and o.how:
            option = OPTION_OF_KNOB[o.name]
            if o.name not in in_force_already and option in refused:
                o.why = refused[option]
            else:
                o.applied = True  # the ALTER that carries its option was sent (or none was needed)
                o.how = alone_how.get(option, o.how) if o.name not in in_force_already else o.how
    live = [o for o in outcomes if o.kind == LIVE and o.how]
    for o in live:
        args = new.live_commands()[o.name]
        failed = []
        for member in members:
            try:
                remote_nodetool(jmx[member], *args)
            except Exception as exc:  # a refused login, an unreachable port: recorded, the run goes on
                failed.append(f"{member}: {exc}")
        o.applied = not failed
        if failed:
            o.why = "JMX refused or unreachable on " + "; ".join(failed)
    return outcomes


def _server_message(exc: Exception) -> str:
    return getattr(exc, "message", None) or str(exc)


def knob_report(outcomes: list[KnobOutcome]) -> dict[str, Any]:
    """The op's record: every knob, applied or not, and a one-line summary."""
    applied = [o.name for o in outcomes if o.applied]
    not_applied = [o.name for o in outcomes if not o.applied]
    return {"knobs": [o.as_dict() for o in outcomes], "applied_knobs": applied, "not_applied_knobs": not_applied,
            "summary": (f"applied {len(applied)} of {len(outcomes)} changed knobs"
                        + (f"; not applied: {', '.join(not_applied)}" if not_applied else ""))}
