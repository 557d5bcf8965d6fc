"""llama-bench's output read as typed records: the fields a run reads, each of its type and within its physical
range (hwmodels.ranges for the times), llama-bench's other fields kept as they are. One sentence names the file, the
record, the field, the value and the fix otherwise."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from hwmodels.ranges import PHYSICAL_RANGES
from hwmodels.units import InputError

MAX_BENCH_BYTES = 64 * 2**20
MAX_RECORDS = 10_000
MAX_TOKENS = 1_048_576     # a prompt or a context (n_prompt, n_depth)
MAX_GEN_TOKENS = 8192      # a generation test simulated token by token (the CLI's --new-tokens limit)
MAX_LAYERS = 10_000        # -ngl 99 or 999 means "all"; --n-cpu-moe counts blocks
FIX = "give the output of llama-bench -o json"
_NS = PHYSICAL_RANGES["_ns"]
Nanoseconds = Annotated[float, Field(ge=_NS[0], le=_NS[1])]


class BenchRecord(BaseModel):
    """One llama-bench test as a run reads it (llama-bench -o json field names; strict types: no "3" for 3)."""
    model_config = ConfigDict(strict=True, extra="allow", frozen=True)
    n_prompt: int = Field(ge=0, le=MAX_TOKENS, description="Prompt tokens of a prompt test (-p).")
    n_gen: int = Field(ge=0, le=MAX_GEN_TOKENS, description="Tokens of a generation test (-n).")
    n_gpu_layers: int = Field(ge=-1, le=MAX_LAYERS, description="-ngl; -1 or more than the blocks: all.")
    n_cpu_moe: int | None = Field(default=None, ge=0, le=MAX_LAYERS, description="--n-cpu-moe.")
    n_depth: int | None = Field(default=None, ge=0, le=MAX_TOKENS, description="-d: the context filled first.")
    n_threads: int | None = Field(default=None, ge=1, le=4096, description="-t.")
    avg_ns: Nanoseconds = Field(description="The mean repetition, ns.")
    samples_ns: list[Nanoseconds] | None = Field(default=None, min_length=1, max_length=100_000,
                                                 description="Every repetition, ns.")
    flash_attn: bool | int | str | None = Field(default=None, description="-fa: -1 auto, 0 off, 1 on.")
    load_mode: str | None = Field(default=None, description="-lm: auto, mmap, none, mlock or dio.")
    no_host: bool | int | None = Field(default=None, description="--no-host.")
    use_mmap: bool | int | None = Field(default=None, description="-mmp of older builds.")
    args: list[str] | None = Field(default=None, max_length=10_000, description="The command line, where recorded.")


WHAT = {"n_prompt": f"an integer from 0 to {MAX_TOKENS}", "n_gen": f"an integer from 0 to {MAX_GEN_TOKENS}",
        "n_gpu_layers": f"an integer from -1 to {MAX_LAYERS}", "n_cpu_moe": f"an integer from 0 to {MAX_LAYERS}",
        "n_depth": f"an integer from 0 to {MAX_TOKENS}", "n_threads": "an integer from 1 to 4096",
        "avg_ns": f"a finite time from {_NS[0]:g} to {_NS[1]:g} ns",
        "samples_ns": f"a list of finite times from {_NS[0]:g} to {_NS[1]:g} ns",
        "flash_attn": "a number, true/false or a word", "load_mode": "a word such as mmap",
        "no_host": "true or false", "use_mmap": "true or false", "args": "a list of strings"}


def _parse(path: Path) -> object:
    """The file as JSON (an array) or JSON lines (one object a line), a UTF-8 byte-order mark and leading blank space
    allowed; one sentence otherwise."""
    try:
        if not path.is_file():
            raise InputError(f"bench: {str(path)!r} is not a regular file; {FIX}.")
        if path.stat().st_size > MAX_BENCH_BYTES:
            raise InputError(f"bench: {str(path)!r} is larger than any llama-bench output ({MAX_BENCH_BYTES >> 20} "
                             f"MiB); {FIX}.")
        text = path.read_bytes().decode("utf-8-sig").lstrip()
        if text.startswith("{"):  # -o jsonl
            return [json.loads(line) for line in text.splitlines() if line.strip()]
        return json.loads(text)
    except InputError:
        raise
    except (ValueError, RecursionError):  # bad JSON or UTF-8, an integer of more than 4300 digits, deep nesting
        raise InputError(f"bench: {str(path)!r} is neither a JSON array nor JSON lines; {FIX}.") from None
    except OSError as exc:
        raise InputError(f"bench: {str(path)!r} cannot be read ({exc.strerror}); check the path.") from None


def _record(rec, where: str) -> dict:
    if not isinstance(rec, dict):
        raise InputError(f"{where} is not an object; {FIX}.")
    try:
        r = BenchRecord.model_validate(rec).model_dump()
    except ValidationError as exc:
        field = str(exc.errors()[0]["loc"][0])
        value = repr(rec.get(field, "missing"))
        value = value if len(value) <= 40 else value[:37] + "..."
        raise InputError(f"{where} has no valid {field!r} ({value}; it must be {WHAT[field]}); {FIX}.") from None
    if r["n_gen"] == 0 and r["n_prompt"] == 0:
        raise InputError(f"{where} timed nothing (n_prompt and n_gen 0); {FIX}.")
    return r


def read_records(path: Path) -> list[dict]:
    """llama-bench's records from its `-o json` (an array) or `-o jsonl` (one object a line) output, each a
    BenchRecord (as a dict, its other fields kept); one sentence naming the file, the record and the fix otherwise."""
    data = _parse(path)
    if not isinstance(data, list) or not data or len(data) > MAX_RECORDS:
        raise InputError(f"bench: {str(path)!r} holds no list of llama-bench records (1 to {MAX_RECORDS}); {FIX}.")
    return [_record(rec, f"bench: record {i} of {str(path)!r}") for i, rec in enumerate(data)]
