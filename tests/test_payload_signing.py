"""Signed payloads: with a signing key, a reader refuses unsigned or altered objects before it
unpickles anything; without one, damaged records still fail only with typed errors."""
from __future__ import annotations

import json
import os
import secrets
import zlib

import numpy as np
import pytest
from dagster import ReexecutionOptions, execute_job, reconstructable
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from asgard.resources.stores import (
    ChecksumMismatchError, CorruptManifestError, Manifest, ObjectKey, StoreConfigError, StoreError,
    TamperedObjectError,
)
from asgard.resources.stores.cql import CassandraObjectStore
from asgard.resources.stores.redis import RedisObjectStore
from tests.conftest import TEST_KEYSPACE
from tests.jobs import signed_job

KEY = secrets.token_hex(32)


class Payload:
    """Unpickling this creates a directory: the effect an attacker's pickle would have."""

    def __init__(self, path: str):
        self.path = path

    def __reduce__(self):
        return os.mkdir, (self.path,)


def forge_crc32(data: bytes, target: int) -> bytes:
    """``data`` with its last 4 bytes changed so that its crc32 is ``target``: what an attacker
    who can write the store does to pass an unkeyed checksum (crc32 is affine over GF(2))."""
    base = bytearray(data)
    base[-4:] = b"\0\0\0\0"
    c0 = zlib.crc32(bytes(base))
    columns = []  # the crc change made by flipping each of the last 32 bits
    for bit in range(32):
        flipped = bytearray(base)
        flipped[-4 + bit // 8] ^= 1 << (bit % 8)
        columns.append(zlib.crc32(bytes(flipped)) ^ c0)
    want, chosen = c0 ^ target, 0
    rows = [(col, 1 << i) for i, col in enumerate(columns)]  # Gaussian elimination over GF(2)
    for b in range(32):
        pivot = next((r for r in rows if r[0] >> b & 1), None)
        if pivot is None:
            continue
        rows.remove(pivot)
        rows = [(c ^ pivot[0], m ^ pivot[1]) if c >> b & 1 else (c, m) for c, m in rows]
        if want >> b & 1:
            want ^= pivot[0]
            chosen ^= pivot[1]
    assert want == 0
    for bit in range(32):
        if chosen >> bit & 1:
            base[-4 + bit // 8] ^= 1 << (bit % 8)
    assert zlib.crc32(bytes(base)) == target
    return bytes(base)


@pytest.fixture
def signed_store(cassandra_node):
    return CassandraObjectStore(keyspace=TEST_KEYSPACE, signing_key=KEY, chunk_size=64 * 1024)


def test_a_signed_run_refuses_a_pickle_planted_by_someone_with_write_access(
        cassandra_node, dagster_instance, monkeypatch, tmp_path):
    monkeypatch.setenv("ASGARD_TEST_SIGNING_KEY", KEY)  # step processes inherit it
    with execute_job(reconstructable(signed_job), instance=dagster_instance) as first:
        assert first.success
        run_id = first.run_id
        assert first.output_for_node("consume") == sum(range(1000))
    key = ObjectKey.for_run(run_id, "produce", "result")
    signed = CassandraObjectStore(keyspace=TEST_KEYSPACE, signing_key=KEY)
    manifest = signed.read_manifest(key)
    assert manifest.signer == signed.signer.key_id and manifest.signature.startswith("v2:") and len(manifest.signature) == 67
    assert len(manifest.chunk_macs) == manifest.chunks == 1

    # someone who can write the table (no key) replaces the output with a hostile pickle
    marker = tmp_path / "unpickled"
    attacker = CassandraObjectStore(keyspace=TEST_KEYSPACE)
    attacker.put(key, Payload(str(marker)))
    attacker.get(key)  # a reader without a key runs it: the threat is real
    assert marker.is_dir()
    marker.rmdir()

    with execute_job(reconstructable(signed_job), instance=dagster_instance,
                     reexecution_options=ReexecutionOptions(run_id, step_selection=["consume"])) as again:
        assert not again.success
        failure = next(e for e in again.all_events if e.is_step_failure)
        text = str(failure.event_specific_data.error.to_string())
        assert "TamperedObjectError" in text and "carries no signature" in text
        assert signed.signer.key_id in text
    assert not marker.exists()  # refused before unpickling


def test_a_chunk_with_a_forged_crc_is_refused_by_its_mac(signed_store, run_id, tmp_path):
    key = ObjectKey.for_run(run_id, "op", "big")
    value = np.arange(60_000, dtype=np.int64)  # 480 KB: 8 chunks of 64 KiB
    signed_store.put(key, value)
    manifest = signed_store.read_manifest(key)
    assert not manifest.inline and manifest.chunks == 8
    index, original = next(iter(signed_store._read_chunks(key, manifest.version, 1)))
    altered = bytearray(original)
    altered[100:108] = (123456789).to_bytes(8, "little")
    forged = forge_crc32(bytes(altered), manifest.chunk_crcs[index])
    signed_store._write_chunks(key, manifest.version, iter([(index, forged)]), 1)
    with pytest.raises(TamperedObjectError, match=f"chunk {index} does not match its MAC"):
        signed_store.get(key)

    # the same chunk restored reads again; an altered manifest (its CRC list "fixed" to
    # match other data) is refused by the manifest's signature
    signed_store._write_chunks(key, manifest.version, iter([(index, original)]), 1)
    assert np.array_equal(signed_store.get(key)[0], value)
    manifest.chunk_crcs[index] = zlib.crc32(bytes(altered))
    signed_store._write_manifest(key, manifest, None)
    with pytest.raises(TamperedObjectError, match="does not match its signature"):
        signed_store.get(key)


def test_another_key_and_moved_objects_are_refused(signed_store, run_id):
    a, b = ObjectKey.for_run(run_id, "op", "a"), ObjectKey.for_run(run_id, "op", "b")
    signed_store.put(a, {"x": 1})
    other = CassandraObjectStore(keyspace=TEST_KEYSPACE, signing_key=secrets.token_hex(32))
    with pytest.raises(TamperedObjectError, match="signed with another key"):
        other.get(a)
    # a validly signed manifest copied under another name does not verify there
    record, inline = signed_store._read_manifest(a)
    signed_store._write_manifest(b, Manifest.from_bytes(record), bytes(inline))
    with pytest.raises(TamperedObjectError, match="does not match its signature"):
        signed_store.get(b)
    assert signed_store.get(a)[0] == {"x": 1}


def test_a_short_signing_key_is_a_typed_error(cassandra_node):
    with pytest.raises(StoreConfigError, match="at least 16 characters"):
        CassandraObjectStore(keyspace=TEST_KEYSPACE, signing_key="short")


# --- fuzzing the manifest and chunk decoder against a real Redis --------------------------
mutations = st.lists(
    st.one_of(
        st.tuples(st.just("flip"), st.integers(0, 1 << 20), st.integers(1, 255)),
        st.tuples(st.just("cut"), st.integers(0, 1 << 20), st.just(0)),
        st.tuples(st.just("insert"), st.integers(0, 1 << 20), st.integers(0, 255)),
    ),
    min_size=1, max_size=4,
)


def mutate(record: bytes, ops) -> bytes:
    data = bytearray(record)
    for kind, pos, arg in ops:
        pos = pos % (len(data) + 1)
        if kind == "flip" and pos < len(data):
            data[pos] ^= arg
        elif kind == "cut":
            del data[pos:]
        elif kind == "insert":
            data[pos:pos] = bytes([arg])
    return bytes(data)


@pytest.fixture(scope="module")
def fuzz_objects(redis_server):
    key = secrets.token_hex(32)
    signed = RedisObjectStore(signing_key=key, chunk_size=1024)
    plain = RedisObjectStore(chunk_size=1024)
    values = {"inline": {"a": list(range(20)), "b": "text"}, "chunked": np.arange(700, dtype=np.int32)}
    yield signed, plain, values
    signed.purge_scope("run/fuzz")


def _assert_refused_or_intact(store, key, original, allowed):
    try:
        value, _ = store.get(key)
    except allowed:
        return
    if isinstance(original, np.ndarray):
        assert np.array_equal(value, original)
    else:
        assert value == original


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(which=st.sampled_from(["inline", "chunked"]), target=st.sampled_from(["manifest", "chunk"]), ops=mutations)
def test_mutated_records_are_refused_before_unpickling_with_a_key(fuzz_objects, which, target, ops):
    signed, plain, values = fuzz_objects
    key = ObjectKey("run/fuzz", f"signed-{which}")
    signed.put(key, values[which])
    client = signed.client
    if target == "manifest" or which == "inline":
        name = signed.manifest_key(key)
    else:
        name = signed.chunk_key(key, signed.read_manifest(key).version, 0)
    original = client.get(name)
    client.set(name, mutate(original, ops))
    # SerializationError is not allowed: that would mean a tampered payload reached pickle
    refused = (TamperedObjectError, CorruptManifestError, ChecksumMismatchError)
    _assert_refused_or_intact(signed, key, values[which], refused)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(which=st.sampled_from(["inline", "chunked"]), ops=mutations)
def test_mutated_records_without_a_key_fail_only_with_typed_errors(fuzz_objects, which, ops):
    _, plain, values = fuzz_objects
    key = ObjectKey("run/fuzz", f"plain-{which}")
    plain.put(key, values[which])
    name = plain.manifest_key(key)
    plain.client.set(name, mutate(plain.client.get(name), ops))
    try:
        plain.get(key)
    except StoreError:
        pass  # typed: what was wrong and what to do


@settings(max_examples=300, deadline=None)
@given(st.one_of(
    st.binary(max_size=300),
    st.dictionaries(st.sampled_from(list(Manifest.__dataclass_fields__)),
                    st.one_of(st.none(), st.booleans(), st.integers(-5, 1 << 40), st.floats(), st.text(max_size=8),
                              st.lists(st.integers(-3, 1 << 20), max_size=4), st.lists(st.text(max_size=4), max_size=3)))
    .map(lambda d: json.dumps(d).encode()),
))
def test_manifest_decoder_accepts_only_well_formed_manifests(data):
    try:
        manifest = Manifest.from_bytes(data, "fuzz")
    except CorruptManifestError:
        return
    assert manifest._problem() is None and sum(manifest.chunk_sizes) == manifest.size



def _manifest(**changes):
    from asgard.resources.stores.manifest import Manifest

    fields = dict(version="v1", size=10, stored_bytes=10, chunk_size=64, chunk_sizes=[10], chunk_crcs=[7],
                  frames=[10], serializer="pickle5", codec="none", python_type="bytes", created_at=1.5,
                  inline=True, chunk_macs=["ab"])
    fields.update(changes)
    return Manifest(**fields)


def test_the_manifest_signature_covers_every_signed_field_and_not_the_dataclass_layout():
    """The MAC is over an explicit, versioned encoding (manifest.signed_bytes): a field added to
    the manifest later (here an attribute on the instance) changes no signature, and each signed
    field, when altered, makes the signature fail."""
    from asgard.resources.stores.manifest import SIGNED_FIELDS_V2, signed_bytes
    from asgard.resources.stores.signing import PayloadSigner

    signer = PayloadSigner(secrets.token_hex(32))
    key = ObjectKey("run/r", "op/out")
    manifest = _manifest()
    signer.sign(manifest, key)
    assert manifest.signature.startswith("v2:")
    encoded = signed_bytes(manifest, key)
    manifest.added_in_a_later_version = "anything"  # not signed: the encoding lists its fields
    assert signed_bytes(manifest, key) == encoded
    signer.verify_manifest(manifest, key, "uri")
    altered = {"version": "v9", "size": 11, "stored_bytes": 11, "chunk_size": 65, "chunk_sizes": [11],
               "chunk_crcs": [8], "frames": [11], "serializer": "x", "codec": "lz4", "python_type": "str",
               "created_at": 2.5, "inline": False, "chunk_macs": ["cd"], "signer": "other"}
    assert set(altered) == set(SIGNED_FIELDS_V2)
    for name, value in altered.items():
        forged = _manifest(**{"signer": manifest.signer, "signature": manifest.signature, name: value})
        with pytest.raises(TamperedObjectError):
            signer.verify_manifest(forged, key, "uri")
    with pytest.raises(TamperedObjectError, match="does not match its signature"):
        signer.verify_manifest(manifest, ObjectKey("run/r", "op/other"), "uri")


def test_an_object_signed_in_the_earlier_v1_format_still_verifies():
    """Objects stored by the version before the explicit encoding (signatures without a format
    prefix, over the dataclass's JSON) are still read during an upgrade; altered, refused."""
    import hashlib
    import hmac

    from asgard.resources.stores.manifest import signed_bytes_v1
    from asgard.resources.stores.signing import PayloadSigner

    secret = secrets.token_hex(32)
    signer = PayloadSigner(secret)
    key = ObjectKey("run/r", "op/out")
    manifest = _manifest(signer=signer.key_id)
    # what the earlier version computed: the v1 message, its HMAC in hex, no prefix
    manifest.signature = hmac.new(secret.encode(), signed_bytes_v1(manifest, key), hashlib.sha256).hexdigest()
    signer.verify_manifest(manifest, key, "uri")
    manifest.size = 11
    with pytest.raises(TamperedObjectError, match="does not match its signature"):
        signer.verify_manifest(manifest, key, "uri")
