"""Toxiproxy (github.com/Shopify/toxiproxy), built with ``go install`` at a pinned version: the
TCP proxy in front of a server in its namespace that adds a link's delay and per-connection
bandwidth (``latency`` and ``bandwidth`` toxics), where this kernel has no netem.

Its API takes whole milliseconds: a delay below 1 ms each way (the in-VPC links) is left to
the proxy's own hop, which :func:`measure_rtt_ms` reports beside the profile's figure.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import urllib.error
import urllib.request
from pathlib import Path

from ..paths import cache_dir
from ..process import ManagedServer, ServerError
from .profile import Link, applied_mbit

#: pinned (keep equal to TOXIPROXY_VERSION in scripts/setup.sh)
TOXIPROXY_VERSION = "v2.5.0"


def toxiproxy_version() -> str:
    """TOXIPROXY_VERSION, or $ASGARD_TOXIPROXY_VERSION where it is set (read at each use, never at import)."""
    return os.environ.get("ASGARD_TOXIPROXY_VERSION") or TOXIPROXY_VERSION


TOXIPROXY_MODULE = "github.com/Shopify/toxiproxy/v2/cmd/server"
API_PORT = 8474


def toxiproxy_binary_path(version: str | None = None) -> Path:
    version = version or toxiproxy_version()
    return cache_dir("toxiproxy", version) / "server"


def install_toxiproxy(version: str | None = None) -> Path:
    """The Toxiproxy server binary, built on first use with ``GOBIN=... go install`` (seconds)."""
    version = version or toxiproxy_version()
    binary = toxiproxy_binary_path(version)
    if os.access(binary, os.X_OK):
        return binary
    go = shutil.which("go") or ("/usr/local/go/bin/go" if os.access("/usr/local/go/bin/go", os.X_OK) else None)
    if go is None:
        raise ServerError("Go is not on PATH, so Toxiproxy cannot be built: run scripts/setup.sh")
    staging = binary.parent / ".partial"
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    proc = subprocess.run([go, "install", f"{TOXIPROXY_MODULE}@{version}"], env=dict(os.environ, GOBIN=str(staging)),
                          capture_output=True, text=True)
    built = staging / "server"
    if proc.returncode != 0 or not built.exists():
        raise ServerError(f"go install {TOXIPROXY_MODULE}@{version} failed:\n{proc.stderr[-3000:]}")
    os.replace(built, binary)
    shutil.rmtree(staging, ignore_errors=True)
    return binary


class ToxiproxyServer(ManagedServer):
    """One Toxiproxy in a namespace, its API on ``host:8474``.

    Example::

        proxy = ToxiproxyServer(workdir, host="10.211.17.2", netns="asgard-s17")
        proxy.start()
        proxy.expose("redis", listen="10.211.17.2:6380", upstream="10.211.17.2:16380", link=Link(rtt_ms=50))
    """

    start_timeout = 30.0

    def __init__(self, workdir: Path, host: str, netns: str | None = None, version: str | None = None):
        version = version or toxiproxy_version()
        super().__init__("toxiproxy", workdir, None, netns)
        self.host, self.version = host, version

    @property
    def api(self) -> str:
        return f"http://{self.host}:{API_PORT}"

    @property
    def endpoint(self) -> str:
        return self.api

    def prepare(self) -> None:
        install_toxiproxy(self.version)

    def command(self) -> list[str]:
        return [str(install_toxiproxy(self.version)), "-host", self.host, "-port", str(API_PORT)]

    def _call(self, method: str, path: str, body: dict | None = None) -> dict | list | None:
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(f"{self.api}{path}", data=data, method=method,
                                         headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=5.0) as resp:
                text = resp.read().decode()
        except urllib.error.HTTPError as exc:
            if method == "DELETE" and exc.code == 404:
                return None
            raise ServerError(f"toxiproxy {method} {path}: HTTP {exc.code} {exc.read().decode()[:300]}") from exc
        return json.loads(text) if text.strip() else None

    def is_ready(self) -> bool:
        try:
            self._call("GET", "/proxies")
            return True
        except (ServerError, urllib.error.URLError, OSError):
            return False

    def expose(self, name: str, listen: str, upstream: str, link: Link) -> None:
        """Proxy ``listen`` to ``upstream`` with the link's delay (half the round trip each way,
        in whole ms) and per-connection bandwidth; replaces a proxy of the same name."""
        self._call("DELETE", f"/proxies/{name}")
        self._call("POST", "/proxies", {"name": name, "listen": listen, "upstream": upstream, "enabled": True})
        half, jitter = int(round(link.rtt_ms / 2)), int(round(link.jitter_ms / 2))
        for stream in ("upstream", "downstream"):
            if half:
                self._call("POST", f"/proxies/{name}/toxics", {
                    "name": f"latency_{stream}", "type": "latency", "stream": stream, "toxicity": 1.0,
                    "attributes": {"latency": half, "jitter": jitter}})
            mbit = applied_mbit(link.conn_up_mbit if stream == "upstream" else link.conn_down_mbit)
            if mbit:
                self._call("POST", f"/proxies/{name}/toxics", {
                    "name": f"bandwidth_{stream}", "type": "bandwidth", "stream": stream, "toxicity": 1.0,
                    "attributes": {"rate": int(mbit * 1000 / 8)}})  # KB/s

    def set_latency(self, name: str, stream: str, latency_ms: int) -> None:
        """Delay one direction (``upstream``: towards the server) of proxy ``name`` by ``latency_ms``; 0 removes it."""
        toxic = f"latency_{stream}"
        self._call("DELETE", f"/proxies/{name}/toxics/{toxic}")
        if latency_ms:
            self._call("POST", f"/proxies/{name}/toxics", {
                "name": toxic, "type": "latency", "stream": stream, "toxicity": 1.0,
                "attributes": {"latency": int(latency_ms), "jitter": 0}})

    def proxies(self) -> dict:
        return self._call("GET", "/proxies") or {}


def measure_rtt_ms(host: str, port: int, samples: int = 20) -> float:
    """Median round trip of a one-byte exchange with a Redis-protocol ``PING`` at ``host:port``
    (any RESP server answers it): the delay a request sees on the link, proxy hop included."""
    import socket
    import statistics
    import time

    times = []
    with socket.create_connection((host, port), timeout=5.0) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        for _ in range(samples):
            t0 = time.perf_counter()
            sock.sendall(b"PING\r\n")
            sock.recv(64)
            times.append((time.perf_counter() - t0) * 1000)
    return statistics.median(times)
