"""Signed payloads: an HMAC-SHA256 over every stored chunk and over the manifest that lists them.

Threat model: anyone who can write the store's table, bucket or keys could otherwise make
every step that reads an output unpickle (run) bytes of their choosing. With a signing key
set, a reader verifies the manifest's signature (which binds the object's key, its version and
every chunk's MAC) and each chunk's MAC before anything is decompressed or unpickled, and
refuses unsigned objects. It does not hide the data (use TLS and the server's access control
for that) and does not stop a writer from replaying an older signed version of the same key.
"""
from __future__ import annotations

import hashlib
import hmac
from typing import TYPE_CHECKING, Any

from .errors import StoreConfigError, TamperedObjectError
from .manifest import SIGNED_FORMAT, signed_bytes, signed_bytes_v1

if TYPE_CHECKING:
    from .manifest import Manifest, ObjectKey

MIN_KEY_CHARS = 16
GENERATE_HINT = "generate one with `python -c 'import secrets; print(secrets.token_hex(32))'`"


class PayloadSigner:
    """Signs and verifies objects with one secret key (give it through a Dagster ``EnvVar``)."""

    def __init__(self, key: str | bytes):
        if not isinstance(key, (str, bytes)) or len(key) < MIN_KEY_CHARS:
            raise StoreConfigError(
                f"signing_key must be a string of at least {MIN_KEY_CHARS} characters (got "
                f"{type(key).__name__} of length {len(key) if isinstance(key, (str, bytes)) else '-'}); "
                f"{GENERATE_HINT} and pass it as an environment variable.")
        self._key = key.encode() if isinstance(key, str) else bytes(key)
        # names the key in errors and manifests without revealing it (32 bits of its SHA-256)
        self.key_id = hashlib.sha256(b"asgard-key-id\n" + self._key).hexdigest()[:8]

    def chunk_mac(self, data: Any) -> str:
        return hmac.new(self._key, data, hashlib.sha256).hexdigest()

    def _manifest_mac(self, manifest: "Manifest", key: "ObjectKey") -> str:
        """``v2:`` and the HMAC over the manifest's explicit encoding (:func:`.manifest.signed_bytes`)."""
        return f"{SIGNED_FORMAT}:" + hmac.new(self._key, signed_bytes(manifest, key), hashlib.sha256).hexdigest()

    def _expected(self, manifest: "Manifest", key: "ObjectKey") -> str:
        """The signature ``manifest`` should carry, in the format it names (no prefix: v1)."""
        if manifest.signature.startswith(f"{SIGNED_FORMAT}:"):
            return self._manifest_mac(manifest, key)
        return hmac.new(self._key, signed_bytes_v1(manifest, key), hashlib.sha256).hexdigest()

    def sign(self, manifest: "Manifest", key: "ObjectKey") -> None:
        """Set the manifest's signer and signature (its ``chunk_macs`` are already filled in)."""
        manifest.signer = self.key_id
        manifest.signature = self._manifest_mac(manifest, key)

    def verify_manifest(self, manifest: "Manifest", key: "ObjectKey", uri: str) -> None:
        if not manifest.signature:
            raise TamperedObjectError(uri, self.key_id, "it carries no signature (written by a store without "
                                      "signing_key, or its signature was stripped)")
        if manifest.signer != self.key_id:
            raise TamperedObjectError(uri, self.key_id, f"it was signed with another key (id {manifest.signer})")
        if not hmac.compare_digest(self._expected(manifest, key), manifest.signature):
            raise TamperedObjectError(uri, self.key_id, "its manifest does not match its signature")
        if not isinstance(manifest.chunk_macs, list) or len(manifest.chunk_macs) != manifest.chunks:
            raise TamperedObjectError(uri, self.key_id, "its manifest lists no MAC for every chunk")

    def verify_chunk(self, manifest: "Manifest", index: int, data: Any, uri: str) -> None:
        if not hmac.compare_digest(self.chunk_mac(data), manifest.chunk_macs[index]):
            raise TamperedObjectError(uri, self.key_id, f"chunk {index} does not match its MAC")
