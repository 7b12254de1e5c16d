"""The client's JSON serializer (resources/stores/serde.py): what it writes is exactly the json
module's document, long strings included (written and read without per-character escaping when
they need none), and every value reads back as it was."""
from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from asgard.resources.stores.errors import SerializationError
from asgard.resources.stores.serde import JsonSerializer

pytestmark = pytest.mark.fast

LONG = JsonSerializer.PLAIN_STRING_BYTES


def _document(value) -> bytes:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode()


@settings(max_examples=60, deadline=None)
@given(piece=st.text(min_size=1, max_size=40), plain=st.booleans())
def test_a_long_string_is_the_json_modules_document_and_reads_back(piece, plain):
    if plain:  # nothing to escape: the fast path
        piece = "".join(c for c in piece if c not in '"\\' and ord(c) >= 0x20 and not 0xD800 <= ord(c) <= 0xDFFF) or "x"
    try:
        piece.encode()
    except UnicodeEncodeError:  # a lone surrogate: what JSON cannot carry in UTF-8
        with pytest.raises(SerializationError):
            JsonSerializer().dumps(piece * (LONG // len(piece) + 1))
        return
    value = piece * (LONG // len(piece) + 1)
    serializer = JsonSerializer()
    frames = serializer.dumps(value)
    assert b"".join(frames) == _document(value)
    assert serializer.loads(frames) == value
    assert serializer.loads([memoryview(_document(value))]) == value  # as another writer stores it


@pytest.mark.parametrize("tail", ['"', "\\", "\n", "\x00", "é€😀", "\u2028"])
def test_a_long_string_with_one_character_to_escape_anywhere(tail):
    for value in ("a" * LONG + tail, tail + "a" * LONG, "a" * (LONG // 2) + tail + "a" * (LONG // 2)):
        frames = JsonSerializer().dumps(value)
        assert b"".join(frames) == _document(value)
        assert JsonSerializer().loads(frames) == value


def test_short_values_and_structures_are_unchanged():
    for value in ("short", "", {"k": ["v" * LONG, 1, None]}, ["a\"b" * LONG]):
        frames = JsonSerializer().dumps(value)
        assert b"".join(frames) == _document(value)
        assert JsonSerializer().loads(frames) == value
