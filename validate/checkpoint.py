"""Random-weight Hugging Face checkpoints made from a config with transformers (no hub), small or full size, with a
small character-level tokenizer (validate/tiny_tokenizer.py) so that `offloadsim run` can talk to them."""
from __future__ import annotations

import json
from pathlib import Path

from hwmodels.units import InputError
from sim.model.resolve import preset_config
from validate.tiny_tokenizer import tiny_vocab, write_tiny_tokenizer


def make_config(preset: str, **overrides) -> dict:
    """A preset's config.json with overrides such as num_hidden_layers or hidden_size (None values ignored)."""
    cfg = preset_config(preset)
    cfg.pop("_name_or_path", None)
    for key, value in overrides.items():
        if value is not None:
            cfg[key] = value
    if "hidden_size" in overrides and overrides["hidden_size"] and "head_dim" in cfg:
        cfg["head_dim"] = cfg["hidden_size"] // cfg["num_attention_heads"]
    heads, kv = cfg.get("num_attention_heads", 1), cfg.get("num_key_value_heads", cfg.get("num_attention_heads", 1))
    if cfg.get("hidden_size", 0) % heads:
        raise InputError(f"heads: {heads} does not divide hidden_size {cfg['hidden_size']}; give --heads that divides "
                         "--hidden.")
    if heads % kv:
        raise InputError(f"kv-heads: {kv} does not divide num_attention_heads {heads}; give --kv-heads that divides "
                         "--heads.")
    return cfg


def make_checkpoint(cfg: dict, out: Path, seed: int = 0, device: str = "cpu") -> Path:
    """Write config.json and safetensors with random weights (std 0.02) through transformers' save_pretrained, and
    the tiny tokenizer, whose begin and end tokens the config names."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    out = Path(out)
    if out.exists() and any(out.glob("*.safetensors")):
        raise InputError(f"out: {str(out)!r} already holds a checkpoint; choose an empty folder.")
    vocab = tiny_vocab(cfg["vocab_size"])
    cfg = dict(cfg, bos_token_id=vocab["<s>"], eos_token_id=vocab["</s>"])
    torch.manual_seed(seed)
    config = AutoConfig.for_model(**{k: v for k, v in cfg.items() if not k.startswith("_")})
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() >= 2:
                p.normal_(0.0, 0.02)
            else:
                p.normal_(1.0, 0.02)
    tmp = out.with_name(out.name + ".partial")
    model.save_pretrained(tmp, max_shard_size="4GB")
    write_tiny_tokenizer(tmp, cfg["vocab_size"])
    cfg_written = json.loads((tmp / "config.json").read_text())
    cfg_written["model_type"] = cfg["model_type"]
    (tmp / "config.json").write_text(json.dumps(cfg_written, indent=1))
    tmp.rename(out)
    return out
