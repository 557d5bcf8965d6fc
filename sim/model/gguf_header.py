"""A bounded reader of a GGUF file's header (llama.cpp's format): its metadata and its tensor table, no weights.

Every size the file declares (key, string and tensor-name lengths, array element counts, nested arrays, the metadata
and tensor counts, dimensions, each tensor's data extent) is checked against the bytes left in the file and a sane
limit before anything is allocated or looped over, so no claimed count makes the reader loop or allocate beyond the
file's size. Values the model shape does not need are skipped, not decoded: a numeric array by one seek, an array of
strings (a tokenizer's vocabulary and merges) by walking its length prefixes, a long string (a chat template) by one
seek; they appear in the metadata as `Skipped` with a description. The type ids, quant block sizes and the magic are
the `gguf` package's (llama.cpp's gguf-py).
"""
from __future__ import annotations

import mmap
import struct
from dataclasses import dataclass
from pathlib import Path

from hwmodels.units import InputError

MAX_TENSORS = 1_000_000
MAX_KEYS = 65_536          # metadata entries (models write about 50)
MAX_NAME_BYTES = 65_536    # a key or a tensor name (ggml's tensor names are at most 64 bytes)
MAX_KEPT_STRING = 65_536   # longer string values (chat templates, licences) are skipped
MAX_KEPT_ARRAY = 4_096     # numeric arrays up to this many elements are decoded (per-layer counts); longer ones skipped
MAX_ARRAY = 1 << 20        # elements of any array: the largest tokenizers hold about 300k entries (Gemma 3's
#                            262,144 tokens, Llama 3's 280,147 merges); walking 1M string lengths costs about 0.3 s
MAX_NESTING = 4            # arrays of arrays
MAX_DIMS = 4               # GGML_MAX_DIMS
SKIPPED_PREFIXES = ("tokenizer.",)  # the vocabulary and its tables: never decoded
MIN_KV_BYTES = 8 + 4 + 1           # an empty key, its type, a one-byte value
MIN_TENSOR_INFO_BYTES = 8 + 4 + 4 + 8  # an empty name, no dimensions, its type, its offset
# struct codes of GGUF's scalar value types (GGUFValueType: UINT8 .. FLOAT64, without STRING and ARRAY)
SCALAR_CODES = {"UINT8": "B", "INT8": "b", "UINT16": "H", "INT16": "h", "UINT32": "I", "INT32": "i",
                "FLOAT32": "f", "BOOL": "?", "UINT64": "Q", "INT64": "q", "FLOAT64": "d"}


@dataclass(frozen=True)
class Skipped:
    """A metadata value read past without decoding it: `what` says what it was ("an array of 151,936 strings")."""
    what: str

    def __str__(self) -> str:
        return self.what


def fail(path: Path, why: str) -> InputError:
    return InputError(f"model: {str(path)!r} {why}; give an intact .gguf file (re-download it) or a config.json.")


def read_header(path: Path) -> tuple[dict, dict[str, tuple[str, int, int]]]:
    """(metadata key -> value, tensor name -> (type name, bytes, elements)); one sentence on any unreadable file."""
    try:
        import gguf
    except ImportError:
        raise InputError("model: reading .gguf files needs the 'gguf' package; run 'pip install gguf'.") from None
    try:
        with open(path, "rb") as f:
            size = f.seek(0, 2)
            if size < 24:
                raise fail(path, f"is {size} bytes, too short for a GGUF header (24 bytes)")
            with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as buf:
                return _Header(buf, path, gguf).read()
    except OSError as exc:
        raise fail(path, f"cannot be read ({exc.strerror or type(exc).__name__})") from None


class _Header:
    """One pass over the header of a mapped file; `pos` only moves forward, each move checked."""

    def __init__(self, buf, path: Path, gguf):
        self.buf, self.path, self.gguf, self.end, self.pos = buf, path, gguf, len(buf), 0
        self.order = "<"

    def read(self) -> tuple[dict, dict[str, tuple[str, int, int]]]:
        g = self.gguf
        if struct.unpack_from("<I", self.buf, 0)[0] != g.GGUF_MAGIC:
            raise fail(self.path, "does not start with the GGUF magic bytes")
        version = struct.unpack_from("<I", self.buf, 4)[0]
        if version & 0xFFFF == 0:  # written on a big-endian machine
            self.order, version = ">", struct.unpack_from(">I", self.buf, 4)[0]
        if version not in (2, 3):
            raise fail(self.path, f"is GGUF version {version}; only versions 2 and 3 are read, re-convert it with a "
                                  "current llama.cpp")
        self.pos = 8
        n_tensors, n_kv = self.scalar("Q", "the tensor count"), self.scalar("Q", "the metadata count")
        if n_tensors > MAX_TENSORS or n_kv > MAX_KEYS:
            raise fail(self.path, f"claims {n_tensors:,} tensors and {n_kv:,} metadata entries, more than any model "
                                  f"({MAX_TENSORS:,} and {MAX_KEYS:,} at most)")
        self.room(n_kv * MIN_KV_BYTES + n_tensors * MIN_TENSOR_INFO_BYTES,
                  f"its {n_kv:,} metadata entries and {n_tensors:,} tensors")
        meta: dict = {}
        for _ in range(n_kv):
            key = self.name("a metadata key")
            if key in meta:
                raise fail(self.path, f"holds metadata {key!r} twice")
            meta[key] = self.value(key, self.type_of(key), key.startswith(SKIPPED_PREFIXES), 0)
        infos = [self.tensor_info() for _ in range(n_tensors)]
        return meta, self.tensors(infos, self.alignment(meta))

    # -- primitives -----------------------------------------------------------------------------------------------
    def room(self, nbytes: int, what: str) -> None:
        left = self.end - self.pos
        if nbytes > left:
            raise fail(self.path, f"claims {what} ({nbytes:,} bytes or more) but only {left:,} bytes are left in the "
                                  "file")

    def scalar(self, code: str, what: str):
        fmt = self.order + code
        n = struct.calcsize(fmt)
        self.room(n, what)
        value = struct.unpack_from(fmt, self.buf, self.pos)[0]
        self.pos += n
        return value

    def name(self, what: str) -> str:
        n = self.scalar("Q", f"the length of {what}")
        if n > MAX_NAME_BYTES:
            raise fail(self.path, f"claims {what} of {n:,} bytes (at most {MAX_NAME_BYTES:,})")
        return self.text(n, what)

    def text(self, n: int, what: str) -> str:
        self.room(n, what)
        raw = self.buf[self.pos:self.pos + n]
        self.pos += n
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            raise fail(self.path, f"holds {what} that is not UTF-8 text") from None

    def type_of(self, key: str):
        raw = self.scalar("I", f"the value type of metadata {key!r}")
        try:
            return self.gguf.GGUFValueType(raw)
        except ValueError:
            raise fail(self.path, f"gives metadata {key!r} the value type {raw}, which GGUF does not define") from None

    # -- metadata values ------------------------------------------------------------------------------------------
    def value(self, key: str, vtype, skip: bool, depth: int):
        """The value at pos (decoded, or Skipped), pos moved past it; its declared sizes checked first."""
        kind = vtype.name
        if kind in SCALAR_CODES:
            return self.scalar(SCALAR_CODES[kind], f"the value of metadata {key!r}")
        if kind == "STRING":
            n = self.scalar("Q", f"the length of metadata {key!r}")
            if skip or n > MAX_KEPT_STRING:
                self.room(n, f"a string of {n:,} bytes for metadata {key!r}")
                self.pos += n
                return Skipped(f"a string of {n:,} bytes")
            return self.text(n, f"metadata {key!r}")
        return self.array(key, skip, depth)  # ARRAY: the only other GGUFValueType

    def array(self, key: str, skip: bool, depth: int):
        if depth >= MAX_NESTING:
            raise fail(self.path, f"nests arrays in metadata {key!r} more than {MAX_NESTING} deep")
        itype = self.type_of(key)
        count = self.scalar("Q", f"the element count of metadata {key!r}")
        kind = itype.name
        # the fewest bytes an element takes: a scalar's size, a string's length prefix, an array's type and count
        least = struct.calcsize("<" + SCALAR_CODES[kind]) if kind in SCALAR_CODES else 8 if kind == "STRING" else 12
        what = f"{count:,} elements of {kind.lower()} for metadata {key!r}"
        if count > MAX_ARRAY:
            raise fail(self.path, f"claims {what}, more than any model's ({MAX_ARRAY:,} at most; the largest "
                                  "tokenizers hold about 300k entries)")
        self.room(count * least, what)
        if kind in SCALAR_CODES:
            if skip or count > MAX_KEPT_ARRAY:
                self.pos += count * least
                return Skipped(f"an array of {count:,} {kind.lower()} values")
            fmt = f"{self.order}{count}{SCALAR_CODES[kind]}"
            out = struct.unpack_from(fmt, self.buf, self.pos)
            self.pos += count * least
            return out
        if kind == "STRING":
            self.skip_strings(count, key)
            return Skipped(f"an array of {count:,} strings")
        for _ in range(count):  # arrays of arrays: each inner one checked the same way
            self.array(key, True, depth + 1)
        return Skipped(f"an array of {count:,} arrays")

    def skip_strings(self, count: int, key: str) -> None:
        """Past `count` length-prefixed strings (the room for their prefixes is checked): each length is read, no
        string is decoded."""
        unpack, buf, pos = struct.Struct(self.order + "Q").unpack_from, self.buf, self.pos
        try:
            for _ in range(count):
                pos += 8 + unpack(buf, pos)[0]
        except (struct.error, OverflowError):
            pos = self.end + 1
        if pos > self.end:
            raise fail(self.path, f"claims strings in metadata {key!r} that run past the end of the file")
        self.pos = pos

    # -- tensor table ---------------------------------------------------------------------------------------------
    def tensor_info(self) -> tuple[str, tuple[int, ...], int, int]:
        name = self.name("a tensor name")
        n_dims = self.scalar("I", f"the dimension count of tensor {name!r}")
        if n_dims > MAX_DIMS:
            raise fail(self.path, f"gives tensor {name!r} {n_dims:,} dimensions (ggml has at most {MAX_DIMS})")
        dims = tuple(self.scalar("Q", f"the dimensions of tensor {name!r}") for _ in range(n_dims))
        return name, dims, self.scalar("I", f"the type of tensor {name!r}"), self.scalar("Q", f"the offset of {name!r}")

    def alignment(self, meta: dict) -> int:
        align = meta.get("general.alignment", self.gguf.GGUF_DEFAULT_ALIGNMENT)
        if isinstance(align, bool) or not isinstance(align, int) or align <= 0 or align & (align - 1):
            raise fail(self.path, f"gives metadata 'general.alignment' as {str(align)[:40]!r}; it must be a power of "
                                  "two")
        return align

    def tensors(self, infos, align: int) -> dict[str, tuple[str, int, int]]:
        g = self.gguf
        data_start = -(-self.pos // align) * align
        out: dict[str, tuple[str, int, int]] = {}
        for name, dims, raw_type, offset in infos:
            try:
                qtype = g.GGMLQuantizationType(raw_type)
                block, type_bytes = g.GGML_QUANT_SIZES[qtype]
            except (ValueError, KeyError):
                raise fail(self.path, f"gives tensor {name!r} the type id {raw_type}, unknown to the installed 'gguf' "
                                      "package (upgrade it: pip install -U gguf)") from None
            elements = 1
            for d in dims:
                elements *= d
            if dims and dims[0] % block:
                raise fail(self.path, f"gives tensor {name!r} rows of {dims[0]:,} values, not whole blocks of "
                                      f"{block} for type {qtype.name}")
            nbytes = elements // block * type_bytes
            stop = data_start + offset + nbytes
            if stop > self.end:
                raise fail(self.path, f"is truncated or inconsistent: tensor {name!r} ends at byte {stop:,} but the "
                                      f"file has {self.end:,} bytes")
            if name in out:
                raise fail(self.path, f"holds tensor {name!r} twice")
            out[name] = (qtype.name, nbytes, elements)
        if not out:
            raise fail(self.path, "holds no tensors")
        return out
