"""The client's switches, one typed object, and the one place the environment overrides them.

Each field is on by default where an A/B measured it faster here; the variable beside it turns
it off (or sets it) for a comparison, or for a cluster where it does not apply. The store takes
its per-store settings (``batch_bytes``, ``direct_requests``, ...) as constructor arguments; the
fields here are per process, because they shape the driver's connections, which a process's
stores share.

================================  =====================  ==============================================
field                             variable               default
================================  =====================  ==============================================
``protocol_version``              ASGARD_CQL_PROTOCOL    4 (the direct connection speaks v3/v4)
``buffer_bytes``                  ASGARD_CQL_BUFFER      1 MiB socket reads and writes
``compression``                   ASGARD_CQL_COMPRESSION none ("lz4" on a slow network)
``quick_start``                   ASGARD_CQL_QUICKSTART  1: STARTUP without OPTIONS, REGISTER not awaited
``fast_read``                     ASGARD_CQL_FASTREAD    1: frames read with ``recv_into``
``in_place_read``                 ASGARD_CQL_INPLACE     1: chunks received into the output buffer
``first_requests``                ASGARD_CQL_FIRST       "known" (also ASGARD_CQL_UNPREPARED=0: "prepare")
``preopen``                       ASGARD_CQL_PREOPEN     1: pools connect beside the control connection
``early_first``                   ASGARD_CQL_EARLY       1: a fresh process's first put goes early
``direct``                        ASGARD_CQL_DIRECT      1: small requests on the process's own socket
``batch_bytes``                   ASGARD_CQL_BATCH       40 KiB: a small put's rows as one batch
================================  =====================  ==============================================

The figures behind the defaults are in the docstrings of the modules that use them
(:mod:`.transport`, :mod:`.early`, :mod:`.direct_connection`) and in ``docs/results/``.
"""
from __future__ import annotations

import dataclasses
import os
from typing import Mapping

from ..errors import StoreConfigError


@dataclasses.dataclass(frozen=True)
class ClientOptions:
    """How this process's driver connections are built and which fast paths a store may take."""

    #: native protocol version every session asks for
    protocol_version: int = 4
    #: bytes per socket read and write (the driver's default is 4 KiB: 256 calls per 1 MiB chunk)
    buffer_bytes: int = 1024 * 1024
    #: frame compression ("lz4", "snappy") or False: chunks are mostly incompressible here
    compression: str | bool = False
    #: open a connection in fewer round trips (:func:`.transport.quick_start_connection_class`)
    quick_start: bool = True
    #: read frames into buffers the connection keeps (:func:`.transport.fast_read_connection_class`)
    fast_read: bool = True
    #: receive a chunk's blob straight into the output buffer (needs ``fast_read``)
    in_place_read: bool = True
    #: a fresh process's first put and get: "known" (by their computed prepared ids), "text", "prepare"
    first_requests: str = "known"
    #: open the pools' connections while the control connection starts
    preopen: bool = True
    #: a fresh process's first put and get on a pre-opened connection while the session opens
    early_first: bool = True
    #: small requests and single-node chunk reads on a blocking connection of the process's own
    direct: bool = True
    #: the default ``batch_bytes`` of a store
    batch_bytes: int = 40 * 1024

    def __post_init__(self):
        if self.first_requests not in ("known", "text", "prepare"):
            raise StoreConfigError(f"first_requests {self.first_requests!r} is not one of known, text, prepare "
                                   "(ASGARD_CQL_FIRST)")
        if self.protocol_version < 3:
            raise StoreConfigError(f"protocol_version {self.protocol_version} is below 3, which the store needs "
                                   "(ASGARD_CQL_PROTOCOL)")

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> "ClientOptions":
        """The defaults, overridden by the ``ASGARD_CQL_*`` variables that are set (the table above)."""
        env = os.environ if env is None else env
        fields: dict = {}

        def number(var, name):
            if env.get(var, "") != "":
                try:
                    fields[name] = int(env[var])
                except ValueError:
                    raise StoreConfigError(f"{var}={env[var]!r} is not an integer") from None

        def flag(var, name):
            if env.get(var, "") != "":
                if env[var] not in ("0", "1"):
                    raise StoreConfigError(f"{var}={env[var]!r}: set it to 1 (on) or 0 (off)")
                fields[name] = env[var] == "1"

        number("ASGARD_CQL_PROTOCOL", "protocol_version")
        number("ASGARD_CQL_BUFFER", "buffer_bytes")
        number("ASGARD_CQL_BATCH", "batch_bytes")
        if env.get("ASGARD_CQL_COMPRESSION"):
            fields["compression"] = env["ASGARD_CQL_COMPRESSION"]
        flag("ASGARD_CQL_QUICKSTART", "quick_start")
        flag("ASGARD_CQL_FASTREAD", "fast_read")
        flag("ASGARD_CQL_INPLACE", "in_place_read")
        flag("ASGARD_CQL_PREOPEN", "preopen")
        flag("ASGARD_CQL_EARLY", "early_first")
        flag("ASGARD_CQL_DIRECT", "direct")
        if env.get("ASGARD_CQL_FIRST"):
            fields["first_requests"] = env["ASGARD_CQL_FIRST"]
        elif env.get("ASGARD_CQL_UNPREPARED") == "0":
            fields["first_requests"] = "prepare"
        return cls(**fields)


#: this process's options once read (a step process inherits its launcher's environment)
_current: dict[str, ClientOptions] = {}


def opts() -> ClientOptions:
    """This process's options, read from the environment at first use; :func:`clear_options`
    has the next use read them again."""
    current = _current.get("options")
    if current is None:
        current = _current["options"] = ClientOptions.from_env()
    return current


def set_options(**changes) -> ClientOptions:
    """Replace fields of this process's options (A/B scripts and tests; before any session opens)."""
    _current["options"] = dataclasses.replace(opts(), **changes)
    return _current["options"]


def clear_options() -> None:
    _current.clear()
