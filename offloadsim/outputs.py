"""Output files of the CLI: checked before any work, written atomically, never over an input of the same run, never
over an existing file unless --force says so.

`check_output` refuses a missing folder, a directory, a special file, a name longer than the folder allows, an input
of this run, or an existing file without --force; `atomic` yields a temporary path beside the target (same suffix,
so plotting libraries pick the format), renames it on success and removes it on any failure (a full disk included),
naming the target, never the temporary file.
"""
from __future__ import annotations

import os
import stat
from pathlib import Path

from hwmodels.files import atomic_path as atomic  # noqa: F401  (the CLI's writers use it by this name)
from hwmodels.units import InputError

_SPECIAL = ("/proc", "/sys", "/dev")


def _same(a: Path, b: Path) -> bool:
    try:
        return a.resolve() == b.resolve() or (a.exists() and b.exists() and os.path.samefile(a, b))
    except (OSError, RuntimeError):
        return False


def add_force(parser) -> None:
    """The --force flag of a command that writes files."""
    parser.add_argument("--force", action="store_true", help="replace output files that exist")


def _name_max(folder: Path) -> int:
    try:
        return os.pathconf(folder, "PC_NAME_MAX")
    except (OSError, ValueError):
        return 255


def check_output(path: str | None, field: str, inputs: tuple = (), suffixes: tuple[str, ...] = (),
                 force: bool = False) -> Path | None:
    """The output path, refused in one sentence when it cannot or must not be written (an existing file: unless
    `force`)."""
    if path is None:
        return None
    if not str(path).strip() or "\x00" in str(path):
        raise InputError(f"{field}: {path!r} is not a file name; give a path like 'out.json'.")
    p = Path(path)
    try:
        resolved = p.resolve()
    except (OSError, RuntimeError):
        raise InputError(f"{field}: {str(path)!r} cannot be resolved (a symlink loop?); give a plain path.") from None
    if any(str(resolved) == s or str(resolved).startswith(s + "/") for s in _SPECIAL):
        raise InputError(f"{field}: {str(path)!r} is a system path; write the output to an ordinary folder.")
    parent = resolved.parent
    if not parent.is_dir():
        raise InputError(f"{field}: folder {str(p.parent)!r} does not exist; create it first or give another path.")
    if not os.access(parent, os.W_OK):
        raise InputError(f"{field}: folder {str(p.parent)!r} is not writable; give a path you can write to.")
    if len(os.fsencode(p.name)) > _name_max(parent):
        raise InputError(f"{field}: the file name {_short(p.name)!r} is {len(os.fsencode(p.name))} bytes, too long for "
                         f"its folder (at most {_name_max(parent)}); give a shorter name.")
    if p.exists() or p.is_symlink():
        try:
            mode = p.stat().st_mode
        except OSError:
            raise InputError(f"{field}: {str(path)!r} cannot be read (a broken link?); give another path.") from None
        if stat.S_ISDIR(mode):
            raise InputError(f"{field}: {str(path)!r} is a folder; give a file name inside it.")
        if not stat.S_ISREG(mode):
            raise InputError(f"{field}: {str(path)!r} is not a regular file; give an ordinary file path.")
        if not force:
            raise InputError(f"{field}: {str(path)!r} exists; give --force to replace it, or another path.")
    for other in inputs:
        if other and _same(p, Path(other)):
            raise InputError(f"{field}: {str(path)!r} is an input of this run; write the output to another file.")
    if suffixes and p.suffix.lower() not in suffixes:
        raise InputError(f"{field}: {str(path)!r} must end in {' or '.join(suffixes)}; rename it.")
    return p


def check_distinct(outputs: dict[str, Path | None]) -> None:
    """Two outputs of one run must not be the same file."""
    seen: dict[Path, str] = {}
    for field, p in outputs.items():
        if p is None:
            continue
        key = p.resolve()
        if key in seen:
            raise InputError(f"{field}: {str(p)!r} is also the {seen[key]} output; give each output its own file.")
        seen[key] = field


def _short(name: str, n: int = 60) -> str:
    return name if len(name) <= n else name[: n - 3] + "..."


def write_text(path: str | Path, text: str) -> None:
    with atomic(path) as tmp:
        tmp.write_text(text)
