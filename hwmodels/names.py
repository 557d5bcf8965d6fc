"""Names that come from files and devices (a model's, a machine's, a GPU's, a GGUF's general.name), made safe to
print: control and other unprintable characters escaped (a terminal never receives an escape sequence from a file),
long ones cut in the middle. Every spec's name field passes through `shown` (the `Name` type), so every command
echoes the same safe text."""
from __future__ import annotations

from typing import Annotated

from pydantic import BeforeValidator

MAX_NAME_CHARS = 100


def shown(name, limit: int = MAX_NAME_CHARS) -> str:
    """`name` as printable text: unprintable characters as escapes (\\x1b, \\u202e), at most `limit` characters (the
    head and the tail, '...' between)."""
    if not isinstance(name, str):
        return name  # not a name: the spec's own type check refuses it
    text = "".join(ch if ch.isprintable() else ch.encode("unicode_escape").decode("ascii") for ch in name)
    if len(text) > limit:
        tail = limit // 4
        text = text[: limit - tail - 3] + "..." + text[-tail:]
    return text


Name = Annotated[str, BeforeValidator(shown)]
