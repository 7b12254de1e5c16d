"""The one serializer layer: values to frames of bytes, and chunk codecs.

A serializer turns a value into *frames*: a small header plus zero-copy views of the value's
large buffers (pickle protocol 5 out-of-band buffers), so a 256 MiB array is never copied
into one big ``bytes`` on its way to the store. A codec compresses chunk by chunk.
"""
from __future__ import annotations

import abc
import io
import json
import pickle
from typing import Any, Callable

from .errors import DisallowedGlobalError, SerializationError, StoreConfigError

#: a reader's rule for what a stored pickle may import: ``(module, name) -> allowed``
AllowedGlobal = Callable[[str, str], bool]


class _CheckedUnpickler(pickle.Unpickler):
    """An unpickler that imports only what ``allowed_global`` allows (pickle's documented way to
    restrict globals: overriding ``find_class``). Pickles name a class's method (``ZoneInfo._unpickle``)
    through ``builtins.getattr``; that getattr is given only classes, and what it returns is decided
    by the same rule, as the global ``<class>.<method>``."""

    def __init__(self, file, allowed_global: AllowedGlobal, **kw):
        super().__init__(file, **kw)
        self._allowed = allowed_global

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) == ("builtins", "getattr"):
            return self._class_attribute
        if not self._allowed(module, name):
            raise DisallowedGlobalError(module, name)
        return super().find_class(module, name)

    def _class_attribute(self, owner: Any, attribute: str) -> Any:
        module, name = getattr(owner, "__module__", "?"), f"{getattr(owner, '__qualname__', '?')}.{attribute}"
        if not isinstance(owner, type) or not self._allowed(module, name):
            raise DisallowedGlobalError(module, name)
        return getattr(owner, attribute)


class Serializer(abc.ABC):
    name: str

    @abc.abstractmethod
    def dumps(self, obj: Any) -> list[memoryview]:
        """Frames whose concatenation, split back by their lengths, ``loads`` accepts."""

    @abc.abstractmethod
    def loads(self, frames: list[memoryview], allowed_global: AllowedGlobal | None = None) -> Any:
        """``allowed_global(module, name)``: whether a pickle may import it (None: anything)."""


class PickleSerializer(Serializer):
    """Pickle protocol 5 with out-of-band buffers (numpy, pandas, bytes-like stay zero-copy)."""

    name = "pickle5"

    def __init__(self, protocol: int = 5):
        self.protocol = protocol

    def dumps(self, obj: Any) -> list[memoryview]:
        buffers: list[memoryview] = []

        def keep_out_of_band(buf: pickle.PickleBuffer) -> bool:
            try:
                buffers.append(buf.raw())
            except BufferError:  # non-contiguous: let pickle copy it in-band
                return True
            return False

        try:
            header = pickle.dumps(obj, protocol=self.protocol, buffer_callback=keep_out_of_band)
        except Exception as exc:  # pickle raises many types: PicklingError, TypeError, AttributeError
            raise SerializationError(
                f"Cannot pickle a value of type {type(obj).__module__}.{type(obj).__qualname__}: "
                f"{type(exc).__name__}: {exc}. Return picklable data (plain data, numpy, pandas) "
                "from the op, or configure another serializer."
            ) from exc
        return [memoryview(header)] + buffers

    def loads(self, frames: list[memoryview], allowed_global: AllowedGlobal | None = None) -> Any:
        try:
            if allowed_global is None:
                return pickle.loads(frames[0], buffers=frames[1:])
            return _CheckedUnpickler(io.BytesIO(frames[0]), allowed_global, buffers=frames[1:]).load()
        except DisallowedGlobalError:
            raise
        except Exception as exc:
            raise SerializationError(
                f"Cannot unpickle the stored value: {type(exc).__name__}: {exc}. Was it written "
                "by a different version of the code that defines its classes?"
            ) from exc


class AlignedPickleSerializer(PickleSerializer):
    """Pickle protocol 5 as :class:`PickleSerializer`, each out-of-band buffer starting at a
    multiple of ``ALIGN`` bytes of the object: a pad frame follows every frame but the last. Read
    into a buffer aligned as much, Arrow arrays come back aligned to their values' width: Acero
    warns of every batch of a misaligned one ("An input buffer was poorly aligned"), and some
    hardware faults on them."""

    name = "pickle5-a64"
    ALIGN = 64
    _PAD = bytes(ALIGN)

    def dumps(self, obj: Any) -> list[memoryview]:
        frames: list[memoryview] = []
        end = 0
        for frame in super().dumps(obj):
            if frames:  # a zero-length pad too: the frames alternate, value and pad
                frames.append(memoryview(self._PAD[: -end % self.ALIGN]))
                end += frames[-1].nbytes
            frames.append(frame)
            end += frame.nbytes
        return frames

    def loads(self, frames: list[memoryview], allowed_global: AllowedGlobal | None = None) -> Any:
        if len(frames) % 2 == 0:
            raise SerializationError(f"A {self.name} object has {len(frames)} frames, where its header, its "
                                     "buffers and a pad between each two make an odd number. Write it again.")
        return super().loads(frames[0::2], allowed_global)


class Codec(abc.ABC):
    name: str

    @abc.abstractmethod
    def compress(self, data: memoryview) -> bytes | memoryview:
        ...

    @abc.abstractmethod
    def decompress(self, data: bytes, size: int) -> bytes:
        """``size`` is the uncompressed length."""


class NoCodec(Codec):
    name = "none"

    def compress(self, data):
        return data

    def decompress(self, data, size):
        return data


class Lz4Codec(Codec):
    name = "lz4"

    def compress(self, data):
        import lz4.block

        return lz4.block.compress(data, store_size=False)

    def decompress(self, data, size):
        import lz4.block

        return lz4.block.decompress(data, uncompressed_size=size)


class ZstdCodec(Codec):
    name = "zstd"

    def __init__(self, level: int = 3):
        self.level = level

    def compress(self, data):
        import zstandard

        return zstandard.ZstdCompressor(level=self.level).compress(data)

    def decompress(self, data, size):
        import zstandard

        return zstandard.ZstdDecompressor().decompress(data, max_output_size=size)


class BloscLz4Codec(Codec):
    """LZ4 after Blosc's byte shuffle of 8-byte words (numcodecs' Blosc): each byte position of a
    numeric column's values grouped together first, so LZ4 finds the runs that interleaving hides.
    On the ETL's orders table (int64, float64 and int32 columns) it stores 2.59x against plain LZ4's
    1.61x and compresses 3.8x faster here; on text it barely compresses (1.07x against LZ4's 2.93x):
    an edge's data decides (docs/results/issue37-codec-blosc.txt).
    The frame records its own sizes and word size, so any reader decodes it."""

    name = "blosc-lz4"
    #: bytes of a word the shuffle groups by: Arrow's and numpy's int64, float64 and timestamps
    WORD_BYTES = 8
    #: Blosc's own default level
    LEVEL = 5

    def compress(self, data):
        from numcodecs import blosc

        return blosc.compress(data, b"lz4", self.LEVEL, blosc.SHUFFLE, blosc.AUTOBLOCKS, typesize=self.WORD_BYTES)

    def decompress(self, data, size):
        from numcodecs import blosc

        return blosc.decompress(data) if size else b""  # Blosc refuses to decode an empty frame


class StreamBytesSerializer(Serializer):
    """A stream's bytes (written by ``put_stream``), read whole as ``bytes`` by a consumer that
    did not ask for a ``Stream``."""

    name = "stream"

    def dumps(self, obj: Any) -> list[memoryview]:
        return [memoryview(obj).cast("B")]

    def loads(self, frames: list[memoryview], allowed_global: AllowedGlobal | None = None) -> Any:
        return b"".join(frames)


class JsonSerializer(Serializer):
    """UTF-8 JSON: what any language reads. ``dumps`` takes a value JSON carries as it is (str,
    numbers, bools, None, lists, dicts with str keys); anything else is a :class:`SerializationError`."""

    name = "json"
    #: a string this long or longer is written and read without the json module's per-character
    #: escaping when it needs none (64 MiB: 48 ms against 165 to write, 40 against 112 to read here)
    PLAIN_STRING_BYTES = 64 * 1024

    def dumps(self, obj: Any) -> list[memoryview]:
        if type(obj) is str and len(obj) >= self.PLAIN_STRING_BYTES:
            plain = _plain_json_string(obj)
            if plain is not None:
                return [memoryview(b'"'), memoryview(plain), memoryview(b'"')]
        try:
            text = json.dumps(obj, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
            return [memoryview(text.encode())]
        except (TypeError, ValueError, RecursionError) as exc:  # ValueError: NaN, or a lone surrogate
            raise SerializationError(f"{type(obj).__name__} value is not plain JSON ({exc}): store it with "
                                     "the pickle5 serializer") from exc

    def loads(self, frames: list[memoryview], allowed_global: AllowedGlobal | None = None) -> Any:
        data = b"".join(frames)
        # a long string with nothing escaped: its bytes between the quotes are its UTF-8
        if len(data) >= self.PLAIN_STRING_BYTES and data[:1] == b'"' and data[-1:] == b'"' \
                and data.find(b"\\") < 0 and data.find(b'"', 1, len(data) - 1) < 0:
            return str(memoryview(data)[1:-1], "utf-8")
        return json.loads(data)


def _plain_json_string(text: str) -> bytes | None:
    """``text``'s UTF-8 if JSON needs no escape in it (no quote, backslash or control character),
    else None (a lone surrogate too: the json module then says what is wrong)."""
    import numpy as np

    try:
        body = text.encode()
    except UnicodeEncodeError:
        return None
    if body.find(b'"') >= 0 or body.find(b"\\") >= 0 or int(np.frombuffer(body, np.uint8).min()) < 0x20:
        return None
    return body


#: by the name a manifest records: the reader of each layout ever written
SERIALIZERS: dict[str, type[Serializer]] = {s.name: s for s in (PickleSerializer, AlignedPickleSerializer,
                                                                StreamBytesSerializer, JsonSerializer)}
#: a setting's name for the serializer a put writes with today (objects of the earlier layout
#: still read: their manifests say "pickle5", which a reader of this version knows)
WRITTEN_AS = {PickleSerializer.name: AlignedPickleSerializer.name}
CODECS: dict[str, type[Codec]] = {c.name: c for c in (NoCodec, Lz4Codec, ZstdCodec, BloscLz4Codec)}
#: the codec setting that chooses one of CODECS per output (:mod:`.codec_choice`)
AUTO_CODEC = "auto"


def get_serializer(name: str, stored: bool = False) -> Serializer:
    """The serializer a setting names (``pickle5``: today's layout of it), or with ``stored``, the
    one that reads what a manifest names."""
    try:
        return SERIALIZERS[name if stored else WRITTEN_AS.get(name, name)]()
    except KeyError:
        raise StoreConfigError(f"Unknown serializer {name!r}; known: {sorted(SERIALIZERS)}") from None


def get_codec(name: str | None) -> Codec:
    try:
        return CODECS[name or "none"]()
    except KeyError:
        raise StoreConfigError(f"Unknown codec {name!r}; known: {sorted(CODECS)}, or {AUTO_CODEC!r} to choose "
                               "per output") from None
