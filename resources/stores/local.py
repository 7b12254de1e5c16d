"""Local-filesystem object store: one data file per version plus a JSON manifest.

Layout under ``root``: ``<scope>/<path>/<version>.data`` and ``<scope>/<path>/manifest`` (the
manifest record of :func:`~asgard.resources.stores.base.pack_head`, a small object's data inline;
written to a temporary name and renamed, so the manifest swap is atomic; older versions' files
are removed after it). TTL is enforced on read from the manifest's ``created_at``;
``purge_scope`` removes the scope's directory.
"""
from __future__ import annotations

import os
import shutil
import threading
from pathlib import Path
from typing import Any, Iterator

from .base import MiB, ObjectKey, ObjectStore, pack_head, unpack_head
from .errors import StoreConfigError

MANIFEST = "manifest"


class LocalObjectStore(ObjectStore):
    backend = "local"
    expires_on_read = True

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

    def _write_chunks(self, key: ObjectKey, version: str, chunks: Iterator[tuple[int, Any]], count: int) -> None:
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

    def _write_manifest(self, key: ObjectKey, manifest, inline) -> None:
        directory = self._dir(key)
        directory.mkdir(parents=True, exist_ok=True)
        tmp = directory / f".manifest.{os.getpid()}.{threading.get_ident()}.tmp"
        with open(tmp, "wb") as f:
            f.writelines(pack_head(manifest.to_bytes(), inline))
        os.replace(tmp, directory / MANIFEST)
        # versions are time-ordered: files of older ones are superseded
        for old in directory.glob("*.data"):
            if old.stem < manifest.version:
                for suffix in (".data", ".offsets"):
                    old.with_suffix(suffix).unlink(missing_ok=True)

    def _read_manifest(self, key: ObjectKey):
        try:
            return unpack_head((self._dir(key) / MANIFEST).read_bytes(), self.uri(key))
        except FileNotFoundError:
            return None

    def _delete_key(self, key: ObjectKey) -> None:
        shutil.rmtree(self._dir(key), ignore_errors=True)

    def purge_scope(self, scope: str) -> None:
        shutil.rmtree(self.root / scope, ignore_errors=True)
        self.local_copies.purge_scope(scope)  # this host's copies go with the files

    def list_paths(self, scope: str) -> list[str]:
        base = self.root / scope
        return sorted(str(p.parent.relative_to(base)) for p in base.rglob(MANIFEST))
