"""An exported device_map as Python a user pastes: the consecutive decoder layers that share a device written as one
dict comprehension, so a 120-layer map stays a few lines and still names every module."""
from __future__ import annotations

import re

_LAYER = re.compile(r"^(?P<prefix>.*\.layers\.)(?P<index>\d+)$")


def device_map_source(device_map: dict) -> str:
    """Python source of a dict equal to `device_map`, keys in its order (runs of `...layers.N` keys with one device
    as `**{f"...layers.{i}": dev for i in range(a, b)}`)."""
    parts: list[str] = []
    run: tuple[str, object, int, int] | None = None  # (prefix, device, first, next index)

    def close():
        if run is not None:
            prefix, dev, a, b = run
            parts.append(f"**{{f'{prefix}{{i}}': {dev!r} for i in range({a}, {b})}}" if b - a > 1
                         else f"{prefix + str(a)!r}: {dev!r}")

    for key, dev in device_map.items():
        m = _LAYER.match(key)
        if m and run is not None and run[0] == m["prefix"] and run[1] == dev and run[3] == int(m["index"]):
            run = (run[0], dev, run[2], run[3] + 1)
            continue
        close()
        run = None
        if m:
            run = (m["prefix"], dev, int(m["index"]), int(m["index"]) + 1)
        else:
            parts.append(f"{key!r}: {dev!r}")
    close()
    return "{" + ", ".join(parts) + "}"


def accelerate_snippet(export: dict, weights: str, new_tokens: int) -> list[str]:
    """transformers' from_pretrained with the exported device_map and max_memory, then one generate."""
    return ["from transformers import AutoModelForCausalLM, AutoTokenizer",
            f"device_map = {device_map_source(export['device_map'])}",
            f"model = AutoModelForCausalLM.from_pretrained({weights!r}, device_map=device_map, "
            f"max_memory={export['max_memory']!r}, offload_folder='offload')",
            f"tokenizer = AutoTokenizer.from_pretrained({weights!r})",
            f"out = model.generate(**tokenizer('Hello', return_tensors='pt'), max_new_tokens={new_tokens})",
            "print(tokenizer.decode(out[0]))"]
