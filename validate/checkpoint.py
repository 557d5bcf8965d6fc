"""Random-weight Hugging Face checkpoints made from a config with transformers (no hub), small or full size, with a
small character-level tokenizer (validate/tiny_tokenizer.py) so that `offloadsim run` can talk to them.

The model is built on the meta device (no memory) for its tensors' names and shapes; each tensor is then written
to one safetensors file in blocks, so memory stays at a block whatever the size. Weights are N(0, 0.02) (norms
N(1, 0.02)): a block of BLOCK_ELEMENTS draws per tensor, repeated at random offsets over a larger tensor, so a
checkpoint costs the time to write its bytes, not a normal draw per weight (a one-layer DeepSeek-R1, 4.6 GB: as long
as the disk takes to write that, under 0.6 GB of memory).
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

from hwmodels.units import GiB, InputError
from sim.model.resolve import preset_config
from validate.tiny_tokenizer import tiny_vocab, write_tiny_tokenizer

BLOCK_ELEMENTS = 2**20   # normal draws per tensor; larger tensors repeat them at random offsets


def make_config(preset: str, **overrides) -> dict:
    """A preset's config.json with overrides such as num_hidden_layers or hidden_size (None values ignored)."""
    cfg = preset_config(preset)
    cfg.pop("_name_or_path", None)
    for key, value in overrides.items():
        if value is not None:
            cfg[key] = value
    if "hidden_size" in overrides and overrides["hidden_size"] and "head_dim" in cfg:
        cfg["head_dim"] = max(1, cfg["hidden_size"] // cfg["num_attention_heads"])
    return cfg


def _tensors(config) -> dict[str, tuple[tuple[int, ...], str]]:
    """Name -> (shape, 'matrix', 'vector' or 'buffer') of what save_pretrained would store (a tied weight once,
    persistent buffers), built on meta."""
    import torch
    from transformers import AutoModelForCausalLM

    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
    out = {n: (tuple(p.shape), "matrix" if p.dim() >= 2 else "vector") for n, p in model.named_parameters()}
    every = {n for n, _ in model.named_parameters(remove_duplicate=False)}
    out |= {n: (tuple(t.shape), "buffer") for n, t in model.state_dict().items() if n not in every}
    return out


def _write_tensor(fh, numel: int, kind: str, gen) -> None:
    """`numel` BF16 values: BLOCK_ELEMENTS draws, written again and again from random offsets (no copies: slices of
    the block held twice over)."""
    import torch

    n = max(min(numel, BLOCK_ELEMENTS), 1)
    block = torch.zeros(n, dtype=torch.bfloat16)
    if kind != "buffer":  # persistent buffers (a router's score bias) start at zero, as transformers makes them
        block.normal_(1.0 if kind == "vector" else 0.0, 0.02, generator=gen)
    twice = memoryview(block.repeat(2).view(torch.uint16).numpy().tobytes())
    done = 0
    while done < numel:
        take = min(n, numel - done)
        shift = int(torch.randint(0, n, (1,), generator=gen)) if done else 0
        fh.write(twice[2 * shift: 2 * (shift + take)])
        done += take


def _write_safetensors(path: Path, tensors: dict, seed: int) -> None:
    import torch

    header, off = {"__metadata__": {"format": "pt"}}, 0
    for name, (shape, _) in tensors.items():
        n = 2 * _numel(shape)
        header[name] = {"dtype": "BF16", "shape": list(shape), "data_offsets": [off, off + n]}
        off += n
    raw = json.dumps(header).encode()
    raw += b" " * (-len(raw) % 8)
    gen = torch.Generator().manual_seed(seed)
    with open(path, "wb") as fh:
        fh.write(len(raw).to_bytes(8, "little") + raw)
        for shape, kind in tensors.values():
            _write_tensor(fh, _numel(shape), kind, gen)


def make_checkpoint(cfg: dict, out: Path, seed: int = 0, device: str = "cpu") -> Path:
    """Write config.json and model.safetensors with random weights, streamed (see the module's note). `device` is
    accepted for the command line's sake: nothing is computed. Raises InputError when the disk cannot hold it."""
    from transformers import AutoConfig

    out = Path(out)
    if out.exists() and any(out.glob("*.safetensors")):
        raise InputError(f"out: {str(out)!r} already holds a checkpoint; choose an empty folder.")
    vocab = tiny_vocab(cfg["vocab_size"])
    cfg = dict(cfg, bos_token_id=vocab["<s>"], eos_token_id=vocab["</s>"])
    config = AutoConfig.for_model(**{k: v for k, v in cfg.items() if not k.startswith("_")})
    tensors = _tensors(config)
    nbytes = sum(2 * _numel(s) for s, _ in tensors.values())
    free = shutil.disk_usage(out.parent if out.parent.exists() else Path(".")).free
    if nbytes > free:
        raise InputError(f"out: the checkpoint needs {nbytes / GiB:.1f} GiB and the disk of {str(out.parent)!r} has "
                         f"{free / GiB:.1f} GiB free; free space, write elsewhere or lower --layers.")
    tmp = out.with_name(out.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        tmp.mkdir(parents=True)
        config.save_pretrained(tmp)
        write_tiny_tokenizer(tmp, cfg["vocab_size"])
        cfg_written = json.loads((tmp / "config.json").read_text())
        cfg_written["model_type"] = cfg["model_type"]
        (tmp / "config.json").write_text(json.dumps(cfg_written, indent=1))
        _write_safetensors(tmp / "model.safetensors", tensors, seed)
        if out.exists():
            out.rmdir()  # an empty folder (the command refuses any other)
        tmp.rename(out)
    except OSError as exc:
        raise InputError(f"out: {str(out)!r} cannot be written ({exc.strerror}); nothing was left behind: free "
                         "space or give another folder.") from None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out


def _numel(shape: tuple[int, ...]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n
