"""Network profiles: what link each store is reached over (``profiles.yaml`` beside this file)."""
from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field
from pathlib import Path


PROFILES_FILE = Path(__file__).with_name("profiles.yaml")
from ..stores.backends import LINKED_SERVERS, server_of
from ..stores.local_servers import PROJECT_SUBNET

#: the servers a profile can put behind a link (each backend's ``server`` in the one backend
#: table: s3_stock shares the s3 server)
LINKED_BACKENDS = LINKED_SERVERS
#: A bandwidth limit at or above this cannot bind on this machine, and the limiter costs CPU that
#: the servers share: over a veth with no limiter, 16 MiB Redis values moved at 5.0-5.8 Gbit/s;
#: an HTB class took that from ~700 to ~470 MB/s and Toxiproxy's bandwidth toxic the proxied path
#: from ~340 to ~240 MB/s (measured here 2026-11-24, 2 cores). Such a limit is reported, not applied.
UNBINDING_MBIT = 5000.0


def applied_mbit(mbit: float | None) -> float | None:
    """The limit to apply for a profile's ``mbit``: None when absent or unable to bind here."""
    return mbit if mbit and mbit < UNBINDING_MBIT else None


class NetworkProfileError(ValueError):
    """A profile that does not exist or does not make sense."""


@dataclass(frozen=True)
class Link:
    """The link to one store: round trip, jitter, the host's bandwidth and one connection's."""

    rtt_ms: float
    jitter_ms: float = 0.0
    rate_mbit: float | None = None
    conn_up_mbit: float | None = None
    conn_down_mbit: float | None = None
    sources: dict = field(default_factory=dict, compare=False)

    def __post_init__(self):
        for name in ("rtt_ms", "jitter_ms"):
            if getattr(self, name) < 0:
                raise NetworkProfileError(f"{name} must be >= 0, got {getattr(self, name)}")
        if self.jitter_ms > self.rtt_ms / 2:
            raise NetworkProfileError(f"jitter_ms {self.jitter_ms} exceeds half the round trip ({self.rtt_ms} ms)")
        for name in ("rate_mbit", "conn_up_mbit", "conn_down_mbit"):
            value = getattr(self, name)
            if value is not None and value <= 0:
                raise NetworkProfileError(f"{name} must be > 0 (or absent for no limit), got {value}")

    def describe(self) -> str:
        parts = [f"RTT {self.rtt_ms:g} ms"]
        if self.jitter_ms:
            parts.append(f"jitter {self.jitter_ms:g} ms")
        def limit(mbit):
            return f"{mbit:g}" + ("" if applied_mbit(mbit) else " (not applied: cannot bind here)")

        if self.rate_mbit:
            parts.append(f"host {limit(self.rate_mbit)} Mbit/s")
        if self.conn_up_mbit or self.conn_down_mbit:
            parts.append(f"per connection up {limit(self.conn_up_mbit) if self.conn_up_mbit else '-'} / down "
                         f"{limit(self.conn_down_mbit) if self.conn_down_mbit else '-'} Mbit/s")
        return ", ".join(parts)


@dataclass(frozen=True)
class NetworkProfile:
    """A named set of links; ``slot_base`` places its namespaces in the subnet (10.211.<slot>.x)."""

    name: str
    description: str = ""
    links: dict[str, Link] = field(default_factory=dict)
    slot_base: int = 0

    def __post_init__(self):
        unknown = set(self.links) - set(LINKED_BACKENDS)
        if unknown:
            raise NetworkProfileError(f"profile {self.name!r}: no store named {sorted(unknown)}; "
                                      f"links are for {', '.join(LINKED_BACKENDS)}")
        if self.links and not 1 <= self.slot_base <= 250 - len(LINKED_BACKENDS):
            raise NetworkProfileError(f"profile {self.name!r}: slot_base must be 1..{250 - len(LINKED_BACKENDS)}")

    @property
    def emulated(self) -> bool:
        """True when some store is behind a link (not plain loopback)."""
        return bool(self.links)

    def link(self, backend: str) -> Link | None:
        server = server_of(backend)
        return self.links.get(server) if server else None

    def slot(self, backend: str) -> int:
        return self.slot_base + LINKED_BACKENDS.index(server_of(backend))


def _document(path: Path | None = None) -> dict:
    import yaml  # here: a store client that only asks is_project_host(loopback) never parses YAML

    return yaml.safe_load((path or PROFILES_FILE).read_text())


def subnet() -> ipaddress.IPv4Network:
    """The namespaces' subnet (declared once, in the client: it tells the project's servers by address)."""
    return PROJECT_SUBNET


def profile_names(path: Path | None = None) -> list[str]:
    return list(_document(path)["profiles"])


def load_profile(name: str, path: Path | None = None) -> NetworkProfile:
    """The profile ``name`` of ``profiles.yaml`` (or ``path``)."""
    profiles = _document(path)["profiles"]
    if name not in profiles:
        raise NetworkProfileError(f"no network profile {name!r}; known: {', '.join(profiles)} "
                                  f"(in {path or PROFILES_FILE})")
    spec = profiles[name]
    links = {b: Link(**{k: v for k, v in link.items()}) for b, link in (spec.get("links") or {}).items()}
    return NetworkProfile(name=name, description=" ".join(str(spec.get("description", "")).split()),
                          links=links, slot_base=int(spec.get("slot_base", 0)))
