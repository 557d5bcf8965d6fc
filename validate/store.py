"""The layer store: each unit's tensors as one flat blob in its own safetensors file, raw and losslessly compressed.

A unit's blob is its tensors back to back (the layout, with names, dtypes, shapes and byte offsets, is the file's
safetensors metadata). The compressed form splits the blob into byte planes (2-byte elements) and compresses 4 MiB
chunks with zstd (the `zstandard` library); decoding is bit-exact and runs on several threads.
"""
from __future__ import annotations

import json
import os
import struct
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import torch
from safetensors import safe_open
from safetensors.torch import save_file

from pydantic import BaseModel, ConfigDict, Field, NonNegativeInt, ValidationError

from hwmodels.units import InputError
from hwmodels.files import write_atomic
from sim.costs.equations import CHUNK_BYTES
from sim.model.shapes import ModelShape
from hwmodels.files import load_json

CHUNK = CHUNK_BYTES
DTYPES = {"torch.bfloat16": torch.bfloat16, "torch.float16": torch.float16, "torch.float32": torch.float32}


def unit_tensors(checkpoint: Path, shape: ModelShape) -> dict[str, dict[str, torch.Tensor]]:
    """Checkpoint tensors grouped by unit, with names relative to the unit (full names for the head)."""
    out: dict[str, dict[str, torch.Tensor]] = {u.name: {} for u in shape.units}
    prefixes = sorted(((m, u) for u in shape.units for m in u.modules), key=lambda p: -len(p[0]))
    for file in sorted(checkpoint.glob("*.safetensors")):
        with safe_open(str(file), framework="pt") as fh:
            for key in fh.keys():
                for prefix, u in prefixes:
                    if key == prefix or key.startswith(prefix + "."):
                        rel = key if u.kind == "lm_head" else key[len(u.modules[0]) + 1:]
                        out[u.name][rel] = fh.get_tensor(key)
                        break
    return out


def _layout(tensors: dict[str, torch.Tensor]) -> tuple[list[dict], int]:
    layout, off = [], 0
    for name in sorted(tensors):
        t = tensors[name]
        n = t.numel() * t.element_size()
        layout.append({"name": name, "dtype": str(t.dtype), "shape": list(t.shape), "offset": off, "nbytes": n})
        off += (n + 63) // 64 * 64
    return layout, off


def _blob(tensors: dict[str, torch.Tensor], layout: list[dict], size: int) -> np.ndarray:
    buf = np.zeros(size, dtype=np.uint8)
    for e in layout:
        buf[e["offset"]:e["offset"] + e["nbytes"]] = tensors[e["name"]].contiguous().view(torch.uint8).flatten().numpy()
    return buf


def _planes(blob: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(blob.reshape(-1, 2).T).reshape(-1)


class StoreEntry(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    nbytes: NonNegativeInt = Field(description="Bytes of the unit's raw blob (64-byte aligned tensors).")
    raw: str = Field(description="File name of the raw blob, inside the store folder.")
    zst: str | None = Field(default=None, description="File name of the zstd byte-plane blob.")
    stored_nbytes: NonNegativeInt | None = Field(default=None, description="Bytes of the compressed blob.")


class StoreIndex(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    units: dict[str, StoreEntry] = Field(description="Unit name -> its files.")


def check_store(store: Path, shape: ModelShape) -> StoreIndex:
    """Read store.json and check it against the model and the folder; InputError names the fix (rebuild)."""

    fix = f"delete {str(store)!r} to rebuild it"
    data = load_json(store / "store.json", "store", 64 * 2**20, fix)
    try:
        index = StoreIndex.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        raise InputError(f"store: field {'.'.join(map(str, err['loc']))!r} of {str(store / 'store.json')!r} is invalid "
                         f"({err['msg']}); {fix}.") from None
    for u in shape.units:
        e = index.units.get(u.name)
        if e is None:
            raise InputError(f"store: {str(store)!r} has no entry for unit {u.name!r} (another model's store?); {fix}.")
        for name in (e.raw, e.zst):
            f = store / name if name else None
            if f is not None and (Path(name).name != name or not f.is_file()):
                raise InputError(f"store: file {name!r} of unit {u.name!r} is missing from {str(store)!r}; {fix}.")
    return index


def build_store(checkpoint: Path, shape: ModelShape, out: Path, compress: bool = True, level: int = 3,
                threads: int = 4) -> dict:
    """Write `<unit>.raw.safetensors` (and `<unit>.zst.safetensors`) for every unit, plus store.json."""
    return write_store(unit_tensors(checkpoint, shape).items(), out, compress, level, threads)


def write_store(units, out: Path, compress: bool = True, level: int = 3, threads: int = 4) -> dict:
    """The store of `units`, an iterable of (unit name, {tensor name: tensor})."""
    import zstandard

    out.mkdir(parents=True, exist_ok=True)
    pool = ThreadPoolExecutor(threads)
    index = {"units": {}}
    for name, tensors in units:
        if not tensors:
            raise InputError(f"checkpoint: no tensors found for unit {name!r}; is this checkpoint the model's?")
        layout, size = _layout(tensors)
        blob = _blob(tensors, layout, size)
        meta = {"layout": json.dumps(layout), "nbytes": str(size)}
        save_file({"blob": torch.from_numpy(blob)}, str(out / f"{name}.raw.safetensors"), metadata=meta)
        entry = {"nbytes": size, "raw": f"{name}.raw.safetensors"}
        if compress:
            planes = _planes(blob)
            chunks = list(pool.map(lambda i: zstandard.ZstdCompressor(level=level).compress(planes[i:i + CHUNK].tobytes()),
                                   range(0, len(planes), CHUNK)))
            packed = np.frombuffer(b"".join(chunks), dtype=np.uint8).copy()
            cmeta = dict(meta, chunks=json.dumps([len(c) for c in chunks]))
            save_file({"blob": torch.from_numpy(packed)}, str(out / f"{name}.zst.safetensors"), metadata=cmeta)
            entry.update(zst=f"{name}.zst.safetensors", stored_nbytes=int(packed.size))
        index["units"][name] = entry
    pool.shutdown()
    write_atomic(out / "store.json", json.dumps(index, indent=1))
    return index


def blob_offset(path: Path) -> int:
    """Where the single tensor's bytes start in a one-tensor safetensors file (8-byte header length + header)."""
    with open(path, "rb") as fh:
        return 8 + struct.unpack("<Q", fh.read(8))[0]


def file_meta(path: Path) -> dict:
    with safe_open(str(path), framework="pt") as fh:
        meta = fh.metadata()
        n = fh.get_slice("blob").get_shape()[0]
    return {"layout": json.loads(meta["layout"]), "nbytes": int(meta["nbytes"]), "stored": n,
            "chunks": json.loads(meta["chunks"]) if "chunks" in meta else None, "offset": blob_offset(path)}


def read_into(path: Path, meta: dict, dest: torch.Tensor) -> None:
    """Read a raw unit file's blob into `dest` (uint8, e.g. a pinned buffer) with one buffered read."""
    with open(path, "rb", buffering=0) as fh:
        fh.seek(meta["offset"])
        view = memoryview(dest.numpy())[: meta["stored"]]
        got = 0
        while got < meta["stored"]:
            n = fh.readinto(view[got:])
            if not n:
                raise InputError(f"store: {path} ended early; rebuild the layer store.")
            got += n


def read_bytes(path: Path, meta: dict) -> np.ndarray:
    buf = np.empty(meta["stored"], dtype=np.uint8)
    read_into(path, meta, torch.from_numpy(buf))
    return buf


def decompress_into(packed: np.ndarray, meta: dict, dest: torch.Tensor, pool: ThreadPoolExecutor) -> None:
    """Decode the zstd chunks in parallel, each worker writing its bytes straight into their byte plane of `dest`."""
    import zstandard

    sizes = meta["chunks"]
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(int)
    n = meta["nbytes"]
    half = n // 2
    d = dest.numpy()[:n].reshape(-1, 2)
    mv = memoryview(packed)

    def one(k: int) -> None:
        out = np.frombuffer(zstandard.ZstdDecompressor().decompress(mv[starts[k]:starts[k] + sizes[k]]), dtype=np.uint8)
        lo = k * CHUNK
        hi = lo + out.size
        if lo < half:  # low bytes of elements lo..
            m = min(hi, half) - lo
            np.copyto(d[lo:lo + m, 0], out[:m])
        if hi > half:  # high bytes
            a = max(lo, half)
            np.copyto(d[a - half:hi - half, 1], out[a - lo:])

    list(pool.map(one, range(len(sizes))))


def views(buf: torch.Tensor, layout: list[dict]) -> dict[str, torch.Tensor]:
    """Tensors of a unit as views into a flat uint8 buffer (CPU or GPU)."""
    out = {}
    for e in layout:
        out[e["name"]] = buf[e["offset"]:e["offset"] + e["nbytes"]].view(DTYPES[e["dtype"]]).view(e["shape"])
    return out


def drop_cache(path: Path) -> None:
    """Ask the kernel to drop this file's pages (posix_fadvise DONTNEED), no root needed."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)
