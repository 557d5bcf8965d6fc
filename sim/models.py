"""Resolve MODEL (a preset name, a config.json path or a checkpoint folder) into a ModelShape.

A checkpoint folder's exact bytes per unit come from the safetensors headers (no weights are read).
"""
from __future__ import annotations

import json
from importlib import resources
from pathlib import Path

from hwmodels.units import InputError, unknown_name
from sim.families import shape_from_config
from sim.formats import WeightFormat
from sim.shapes import ModelShape

# bytes per element of safetensors dtypes
DTYPE_BYTES = {"F64": 8, "I64": 8, "U64": 8, "F32": 4, "I32": 4, "U32": 4, "F16": 2, "BF16": 2, "I16": 2, "U16": 2,
               "F8_E4M3": 1, "F8_E5M2": 1, "I8": 1, "U8": 1, "BOOL": 1}


def model_presets() -> list[str]:
    return sorted(p.name[:-5] for p in resources.files("sim.data.models").iterdir() if p.name.endswith(".json"))


def preset_config(name: str) -> dict:
    names = model_presets()
    if name not in names:
        raise unknown_name("model preset", name, names)
    cfg = json.loads(resources.files("sim.data.models").joinpath(f"{name}.json").read_text())
    cfg.pop("_source", None)
    cfg["_name_or_path"] = name
    return cfg


def _read_config(path: Path) -> dict:
    try:
        cfg = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise InputError(f"{path}: not valid JSON ({exc.msg} at line {exc.lineno}); fix the file or give a preset name.") from None
    except OSError as exc:
        raise InputError(f"{path}: cannot be read ({exc.strerror}); check the path.") from None
    if isinstance(cfg, dict):
        cfg.setdefault("_name_or_path", path.parent.name if path.name == "config.json" else path.stem)
    return cfg


def checkpoint_tensors(folder: Path) -> dict[str, int]:
    """Tensor name -> stored bytes, from the safetensors headers of a folder (index file or single file)."""
    from safetensors import safe_open

    files = sorted(folder.glob("*.safetensors"))
    if not files:
        raise InputError(f"checkpoint: folder {str(folder)!r} has no *.safetensors files; point at a Hugging Face "
                         "checkpoint folder or make one with 'offloadsim make-checkpoint'.")
    sizes: dict[str, int] = {}
    for file in files:
        with safe_open(str(file), framework="numpy") as fh:
            for key in fh.keys():
                sl = fh.get_slice(key)
                n = 1
                for d in sl.get_shape():
                    n *= d
                sizes[key] = n * DTYPE_BYTES.get(sl.get_dtype(), 2)
    return sizes


def shape_from_checkpoint(folder: Path) -> ModelShape:
    """Shape from config.json, with each unit's nbytes replaced by the exact bytes of its tensors."""
    cfg_path = folder / "config.json"
    if not cfg_path.exists():
        raise InputError(f"checkpoint: folder {str(folder)!r} has no config.json; copy the model's config.json beside "
                         "its safetensors files.")
    shape = shape_from_config(_read_config(cfg_path), source=str(cfg_path))
    tensors = checkpoint_tensors(folder)
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
        units.append(u.model_copy(update={"nbytes": per_unit[u.name] + tied, "tied_nbytes": tied}))
    return shape.model_copy(update={"units": tuple(units)})


def load_model(spec: str, fmt: WeightFormat | None = None) -> ModelShape:
    """A preset name, a config.json path or a checkpoint folder -> ModelShape."""
    path = Path(spec)
    if path.is_dir():
        if fmt is not None:
            raise InputError(f"dtype: a checkpoint folder's bytes come from its files; drop --dtype for {spec!r}.")
        return shape_from_checkpoint(path)
    if path.suffix == ".json" or path.is_file():
        if not path.exists():
            raise InputError(f"model: file {spec!r} does not exist; give a preset name, a config.json or a folder.")
        return shape_from_config(_read_config(path), fmt, source=str(path))
    return shape_from_config(preset_config(spec), fmt, source=f"preset {spec}")
