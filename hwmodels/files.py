"""Files every layer reads and writes: bounded JSON reading and atomic writing.

Readers bound their work by the file's size before they parse; writers never leave a file half-written.
"""
from __future__ import annotations

import contextlib
import json
import math
import os
import tempfile
from pathlib import Path

from hwmodels.names import shown
from hwmodels.ranges import nonfinite_at
from hwmodels.units import InputError

MAX_CONFIG_BYTES = 16 * 2**20      # config.json files are a few KiB
MAX_HEADER_BYTES = 100 * 2**20     # safetensors refuses larger headers too
MAX_JSON_DEPTH = 32


def _depth(obj, limit: int = MAX_JSON_DEPTH) -> int:
    """Nesting depth of parsed JSON, iteratively (no recursion on hostile input); stops past `limit`."""
    depth, level = 0, [obj]
    while level and depth <= limit:
        depth += 1
        level = [v for x in level for v in (x.values() if isinstance(x, dict) else x if isinstance(x, list) else ())
                 if isinstance(v, (dict, list))]
    return depth


def load_json(path: Path, field: str, max_bytes: int = MAX_CONFIG_BYTES, fix: str = "fix the file"):
    """Parse a JSON file the CLI reads: refuses non-files, huge files, bad JSON and deep nesting in one sentence."""
    try:
        if not path.is_file():
            raise InputError(f"{field}: {str(path)!r} is not a regular file; give the path of a JSON file.")
        size = path.stat().st_size
        if size > max_bytes:
            raise InputError(f"{field}: {str(path)!r} is {size / 2**20:.0f} MiB, larger than any such file "
                             f"({max_bytes / 2**20:.0f} MiB); {fix}.")
        text = path.read_bytes().decode("utf-8")
        data = json.loads(text)
    except InputError:
        raise
    except json.JSONDecodeError as exc:
        raise InputError(f"{field}: {str(path)!r} is not valid JSON ({exc.msg} at line {exc.lineno}); {fix}.") from None
    except UnicodeDecodeError:
        raise InputError(f"{field}: {str(path)!r} is not UTF-8 text; {fix}.") from None
    except ValueError as exc:  # an integer of more than 4300 digits
        raise InputError(f"{field}: {str(path)!r} holds an integer of more than 4300 digits, which is no real "
                         f"value ({type(exc).__name__}); {fix}.") from None
    except RecursionError:
        raise InputError(f"{field}: {str(path)!r} nests deeper than {MAX_JSON_DEPTH} levels; {fix}.") from None
    except OSError as exc:
        raise InputError(f"{field}: {str(path)!r} cannot be read ({exc.strerror}); check the path.") from None
    if _depth(data) > MAX_JSON_DEPTH:
        raise InputError(f"{field}: {str(path)!r} nests deeper than {MAX_JSON_DEPTH} levels; {fix}.")
    bad = nonfinite_at(data)  # NaN, Infinity or 1e400, which json reads as numbers
    if bad is not None:
        raise InputError(f"{field}: {str(path)!r} field {bad!r} is not a finite number; {fix}.")
    return data


def plain(data):
    """`data` with JSON's own types only: numpy scalars as numbers, tuples as lists, a non-finite number (NaN: a
    value that does not apply, e.g. an error against a measured zero) as None."""
    if isinstance(data, dict):
        return {str(k): plain(v) for k, v in data.items()}
    if isinstance(data, (list, tuple)):
        return [plain(v) for v in data]
    if hasattr(data, "item") and not isinstance(data, (str, bytes)):  # a numpy scalar
        data = data.item()
    if isinstance(data, float) and not math.isfinite(data):
        return None
    return data


def json_text(data, indent: int | None = 1) -> str:
    """Valid JSON (RFC 8259: no NaN or Infinity) of `data`, through `plain`."""
    return json.dumps(plain(data), indent=indent, allow_nan=False)


@contextlib.contextmanager
def atomic_path(path: str | Path):
    """Yield a temporary path beside `path` with the same suffix; rename it over `path` when the block succeeds. A
    failure to write (a full disk, a quota) removes the temporary file and raises InputError naming `path`."""
    path = Path(path)
    try:
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".offloadsim-", suffix=f".tmp{path.suffix[:16]}")
        os.close(fd)
    except OSError as exc:
        raise InputError(f"{shown(str(path), 80)!r}: cannot be written ({exc.strerror}); nothing was written: free "
                         "space or give another folder.") from None
    try:
        yield Path(tmp)
        os.replace(tmp, path)
    except OSError as exc:
        raise InputError(f"{shown(str(path), 80)!r}: cannot be written ({exc.strerror}); nothing was written: free "
                         "space or give another folder.") from None
    finally:
        Path(tmp).unlink(missing_ok=True)


def write_atomic(path: Path, text: str) -> None:
    """Write `text` to `path` through a temporary file in the same folder, replaced in one step; a failure to write
    (a full disk) leaves nothing behind and raises InputError naming `path`."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = None
    try:
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".offloadsim-", suffix=".tmp")
        with os.fdopen(fd, "w") as fh:
            fh.write(text)
        os.replace(tmp, path)
    except OSError as exc:
        raise InputError(f"{shown(str(path), 80)!r}: cannot be written ({exc.strerror}); nothing was written: free space "
                         "or give another folder.") from None
    finally:
        if tmp is not None:
            Path(tmp).unlink(missing_ok=True)
