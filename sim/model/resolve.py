"""Resolve MODEL (a preset name, a config.json path, a checkpoint folder, a .gguf file or a Hugging Face id) into a
ModelShape.

A checkpoint's exact bytes per unit come from the safetensors headers, of a local folder's files or, for a Hugging
Face id, read from the Hub by range requests (sim/model/from_hub.py); no weights are read.
"""
from __future__ import annotations

import json
from importlib import resources
from pathlib import Path

from hwmodels.files import MAX_HEADER_BYTES, load_json
from hwmodels.units import InputError, unknown_name
from sim.model.families import shape_from_config
from sim.model.formats import WeightFormat
from sim.model.shapes import ModelShape
from sim.model.from_gguf import shape_from_gguf
from sim.model.from_hub import hub_checkpoint, is_hub_id

# bytes per element of safetensors dtypes
DTYPE_BYTES = {"F64": 8, "I64": 8, "U64": 8, "F32": 4, "I32": 4, "U32": 4, "F16": 2, "BF16": 2, "I16": 2, "U16": 2,
               "F8_E4M3": 1, "F8_E5M2": 1, "I8": 1, "U8": 1, "BOOL": 1}


def model_presets() -> list[str]:
    return sorted(p.name[:-5] for p in resources.files("sim.model.presets").iterdir() if p.name.endswith(".json"))


def preset_config(name: str) -> dict:
    names = model_presets()
    if name not in names:
        raise unknown_name("model preset", name, names)
    cfg = json.loads(resources.files("sim.model.presets").joinpath(f"{name}.json").read_text())
    cfg.pop("_source", None)
    cfg["_name_or_path"] = name
    return cfg


def read_config(path: Path) -> dict:
    """A config.json, parsed and checked to be a JSON object."""
    cfg = load_json(path, str(path), fix="fix the file or give a preset name")
    if not isinstance(cfg, dict):
        raise InputError(f"{path}: expected a JSON object with model_type and sizes; got {type(cfg).__name__}.")
    cfg.setdefault("_name_or_path", path.parent.name if path.name == "config.json" else path.stem)
    return cfg


_read_config = read_config


def safetensors_header(file: Path) -> dict[str, int]:
    """Tensor name -> bytes from one safetensors header, each entry checked against the file (no weights read)."""
    where = f"checkpoint: {str(file)!r}"
    fix = "re-download or re-create the checkpoint"
    try:
        size = file.stat().st_size
        with open(file, "rb") as fh:
            head = fh.read(8)
            if len(head) < 8:
                raise InputError(f"{where} is {size} bytes, too short for a safetensors header; {fix}.")
            n = int.from_bytes(head, "little")
            if n > MAX_HEADER_BYTES or 8 + n > size:
                raise InputError(f"{where} claims a {n:,}-byte header in a {size:,}-byte file; {fix}.")
            raw = fh.read(n)
        header = json.loads(raw.decode("utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError):
        raise InputError(f"{where} has an unreadable header; {fix}.") from None
    except OSError as exc:
        raise InputError(f"{where} cannot be read ({exc.strerror}); check the file.") from None
    if not isinstance(header, dict):
        raise InputError(f"{where} has a header that is not a JSON object; {fix}.")
    return header_tensor_bytes(header, size - 8 - n, where, fix)


def header_tensor_bytes(header: dict, data_bytes: int, where: str, fix: str) -> dict[str, int]:
    """Tensor name -> bytes of a parsed safetensors header, each entry checked against the `data_bytes` that follow
    the header; `where` and `fix` begin and end the sentence that refuses a malformed entry."""
    out: dict[str, int] = {}
    for key, e in header.items():
        if key == "__metadata__":
            continue
        ok = isinstance(e, dict) and e.get("dtype") in DTYPE_BYTES and isinstance(e.get("shape"), list) \
            and all(isinstance(d, int) and not isinstance(d, bool) and 0 <= d < 2**48 for d in e["shape"]) \
            and isinstance(e.get("data_offsets"), list) and len(e["data_offsets"]) == 2 \
            and all(isinstance(o, int) and not isinstance(o, bool) for o in e["data_offsets"])
        if not ok:
            raise InputError(f"{where}: tensor {str(key)[:60]!r} has a malformed header entry; {fix}.")
        count = 1
        for d in e["shape"]:
            count *= d
        nbytes = count * DTYPE_BYTES[e["dtype"]]
        begin, end = e["data_offsets"]
        if not 0 <= begin <= end <= data_bytes or end - begin != nbytes:
            raise InputError(f"{where}: tensor {str(key)[:60]!r} claims {nbytes:,} bytes at {begin}..{end} but the "
                             f"file holds {data_bytes:,} bytes of data; {fix}.")
        out[key] = nbytes
    return out


def checkpoint_tensors(folder: Path) -> dict[str, int]:
    """Tensor name -> stored bytes, from the safetensors headers of a folder (index file or single file)."""
    files = sorted(f for f in folder.glob("*.safetensors") if f.is_file())
    if not files:
        raise InputError(f"checkpoint: folder {str(folder)!r} has no *.safetensors files; point at a Hugging Face "
                         "checkpoint folder or make one with 'offloadsim make-checkpoint'.")
    if len(files) > 10_000:
        raise InputError(f"checkpoint: folder {str(folder)!r} has {len(files)} safetensors files; give one checkpoint.")
    sizes: dict[str, int] = {}
    for file in files:
        sizes.update(safetensors_header(file))
        if len(sizes) > 1_000_000:
            raise InputError(f"checkpoint: folder {str(folder)!r} holds more than a million tensors; give one checkpoint.")
    return sizes


def shape_from_checkpoint(folder: Path) -> ModelShape:
    """Shape from config.json, with each unit's nbytes replaced by the exact bytes of its tensors."""
    cfg_path = folder / "config.json"
    if not cfg_path.is_file():
        raise InputError(f"checkpoint: folder {str(folder)!r} has no config.json; copy the model's config.json beside "
                         "its safetensors files.")
    shape = shape_from_config(read_config(cfg_path), source=str(cfg_path))
    return with_tensor_bytes(shape, checkpoint_tensors(folder), f"checkpoint: no tensor of {str(folder)!r}")


def with_tensor_bytes(shape: ModelShape, tensors: dict[str, int], where: str) -> ModelShape:
    """`shape` with each unit's nbytes replaced by the exact bytes of its tensors (a tied head counts the
    embedding's); refuses a unit no tensor belongs to, the sentence beginning with `where`."""
    prefixes = sorted(((m, u.name) for u in shape.units for m in u.modules), key=lambda p: -len(p[0]))
    per_unit: dict[str, int] = {u.name: 0 for u in shape.units}
    for key, nbytes in tensors.items():
        for prefix, unit in prefixes:
            if key == prefix or key.startswith(prefix + "."):
                per_unit[unit] += nbytes
                break
    emb = shape.units[0]
    units = []
    for u in shape.units:
        tied = tensors.get(emb.modules[0] + ".weight", 0) if u.kind == "lm_head" and "lm_head.weight" not in tensors else 0
        if per_unit[u.name] + tied <= 0:
            raise InputError(f"{where} belongs to unit {u.name!r}; the safetensors files do not match config.json, "
                             "give the checkpoint they came with.")
        units.append(u.model_copy(update={"nbytes": per_unit[u.name] + tied, "tied_nbytes": tied}))
    return shape.model_copy(update={"units": tuple(units)})


def shape_from_hub(spec: str, fmt: WeightFormat | None = None) -> ModelShape:
    """Shape of a Hugging Face id from its config.json and, when the repo has safetensors files, their headers'
    exact bytes (sim/model/from_hub.py: no weights are read)."""
    hub = hub_checkpoint(spec)
    source = f"{hub.repo_id}@{hub.commit[:12]}/config.json"
    if not hub.headers:
        return shape_from_config(hub.config, fmt, source=source)
    if fmt is not None:
        raise InputError(f"dtype: a Hub checkpoint's bytes come from its safetensors files; drop --dtype for "
                         f"{spec!r}.")
    fix = "report it to the repo's owner or give a config.json path"
    tensors: dict[str, int] = {}
    for file, (data_bytes, header) in hub.headers.items():
        tensors.update(header_tensor_bytes(header, data_bytes, f"model: {hub.repo_id}'s {file}", fix))
    return with_tensor_bytes(shape_from_config(hub.config, source=source), tensors,
                             f"model: no tensor of {hub.repo_id!r}")


def model_config(spec: str) -> tuple[dict, str]:
    """(config.json contents, where it came from) of a preset name, a config.json path, a checkpoint folder or a
    Hugging Face id (its config.json only: no weights are read), the models `load_model` takes but GGUF files."""
    if is_hub_id(spec):
        hub = hub_checkpoint(spec)
        return hub.config, f"{hub.repo_id}@{hub.commit[:12]}/config.json"
    path = Path(spec)
    if path.is_dir():
        return read_config(path / "config.json"), str(path / "config.json")
    if path.suffix == ".json" or path.is_file():
        return read_config(path), str(path)
    return preset_config(spec), f"preset {spec}"


def _is_gguf(path: Path) -> bool:
    """A file that starts with GGUF's magic, whatever its name."""
    try:
        with open(path, "rb") as fh:
            return fh.read(4) == b"GGUF"
    except OSError:
        return False


def load_model(spec: str, fmt: WeightFormat | None = None) -> ModelShape:
    """A preset name, a config.json path, a checkpoint folder, a .gguf file or a Hugging Face id -> ModelShape.

    An existing path wins over an id: `owner/name[@revision]` is an id only when no such path exists."""
    if not str(spec).strip() or "\x00" in str(spec):
        raise InputError(f"model: {spec!r} is empty; give a preset name, a config.json or a checkpoint folder.")
    if is_hub_id(spec):
        return shape_from_hub(spec, fmt)
    path = Path(spec)
    if path.suffix.lower() == ".gguf" or (path.is_file() and _is_gguf(path)):
        if fmt is not None:
            raise InputError(f"dtype: a GGUF file's bytes come from its tensors; drop --dtype for {spec!r}.")
        if not path.is_file():
            raise InputError(f"model: file {spec!r} does not exist; give the path of a .gguf file.")
        return shape_from_gguf(path)
    if path.is_dir():
        if fmt is not None:
            raise InputError(f"dtype: a checkpoint folder's bytes come from its files; drop --dtype for {spec!r}.")
        return shape_from_checkpoint(path)
    if path.suffix == ".json" or path.is_file():
        if not path.exists():
            raise InputError(f"model: file {spec!r} does not exist; give a preset name, a config.json or a folder.")
        return shape_from_config(read_config(path), fmt, source=str(path))
    return shape_from_config(preset_config(spec), fmt, source=f"preset {spec}")
