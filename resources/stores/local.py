"""Local-filesystem object store: one data file per version plus a JSON manifest.

Layout under ``root``: ``<scope>/<path>/<version>.data`` and ``<scope>/<path>/manifest.json``
(written to a temporary name and renamed, so the manifest swap is atomic). TTL is enforced on
read from the manifest's ``created_at``; ``purge_scope`` removes the scope's directory.
"""
from __future__ import annotations

import os
import shutil
import time
from pathlib import Path
from typing import Any, Iterator

from .base import MiB, ObjectKey, ObjectStore
from .errors import StoreConfigError


class LocalObjectStore(ObjectStore):
    backend = "local"

    def __init__(self, root: str | os.PathLike, **kwargs):
        kwargs.setdefault("chunk_size", 8 * MiB)
        super().__init__(**kwargs)
        self.root = Path(root).resolve()
        self.root.mkdir(parents=True, exist_ok=True)

    def _dir(self, key: ObjectKey) -> Path:
        path = (self.root / key.scope / key.path).resolve()
        if self.root not in path.parents:
            raise StoreConfigError(f"Key {key} escapes the store root {self.root}")
        return path

    def uri(self, key: ObjectKey) -> str:
        return f"file://{self._dir(key)}"

    def _write_chunks(self, key: ObjectKey, version: str, chunks: Iterator[tuple[int, Any]]) -> None:
        directory = self._dir(key)
        directory.mkdir(parents=True, exist_ok=True)
        # chunks arrive in order; one sequential file beats a file per chunk
        with open(directory / f"{version}.data", "wb") as f:
            offsets = []
            for _, data in chunks:
                offsets.append(f.tell())
                f.write(data)
        (directory / f"{version}.offsets").write_text(",".join(map(str, offsets)))

    def _read_chunks(self, key: ObjectKey, version: str, count: int) -> Iterator[tuple[int, bytes]]:
        directory = self._dir(key)
        try:
            offsets = [int(x) for x in (directory / f"{version}.offsets").read_text().split(",") if x]
            f = open(directory / f"{version}.data", "rb")
        except FileNotFoundError:
            for i in range(count):
                yield i, None
            return
        with f:
            end = os.fstat(f.fileno()).st_size
            bounds = offsets + [end]
            for i in range(count):
                f.seek(bounds[i])
                yield i, f.read(bounds[i + 1] - bounds[i])

    def _write_manifest(self, key: ObjectKey, data: bytes) -> None:
        directory = self._dir(key)
        tmp = directory / f".manifest.{os.getpid()}.tmp"
        tmp.write_bytes(data)
        os.replace(tmp, directory / "manifest.json")

    def _read_manifest(self, key: ObjectKey) -> bytes | None:
        path = self._dir(key) / "manifest.json"
        try:
            if self.ttl_seconds and time.time() - path.stat().st_mtime > self.ttl_seconds:
                return None  # expired, like a TTL'd row
            return path.read_bytes()
        except FileNotFoundError:
            return None

    def _delete_version(self, key: ObjectKey, version: str, count: int) -> None:
        for suffix in (".data", ".offsets"):
            (self._dir(key) / f"{version}{suffix}").unlink(missing_ok=True)

    def _delete_key(self, key: ObjectKey) -> None:
        shutil.rmtree(self._dir(key), ignore_errors=True)

    def purge_scope(self, scope: str) -> None:
        shutil.rmtree(self.root / scope, ignore_errors=True)

    def list_paths(self, scope: str) -> list[str]:
        base = self.root / scope
        return sorted(str(p.parent.relative_to(base)) for p in base.rglob("manifest.json"))
