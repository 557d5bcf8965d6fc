"""Arguments of make-checkpoint, calibrate, validate and run (torch is imported only when they run)."""
from __future__ import annotations

import argparse

from offloadsim import handlers


def add_validate(sub: argparse._SubParsersAction) -> None:
    m = sub.add_parser("make-checkpoint", help="write a random-weight Hugging Face checkpoint from a preset's config")
    m.set_defaults(run=handlers.make_checkpoint)
    m.add_argument("--preset", required=True, help="model preset, e.g. qwen3-14b or llama-3.1-8b")
    m.add_argument("--layers", type=int, default=None, help="num_hidden_layers")
    m.add_argument("--hidden", type=int, default=None, help="hidden_size")
    m.add_argument("--intermediate", type=int, default=None, help="intermediate_size")
    m.add_argument("--heads", type=int, default=None, help="num_attention_heads")
    m.add_argument("--kv-heads", type=int, default=None, help="num_key_value_heads")
    m.add_argument("--vocab", type=int, default=None, help="vocab_size")
    m.add_argument("--device", default="cpu", help="where to initialise the weights (cpu or cuda)")
    m.add_argument("--seed", type=int, default=0)
    m.add_argument("--out", required=True, help="empty folder to write")

    c = sub.add_parser("calibrate", help="measure this machine and write a profile for simulate/plan/validate")
    c.set_defaults(run=handlers.calibrate)
    c.add_argument("--quick", action="store_true", help="small sizes, a few seconds")
    c.add_argument("--base", default="h200-testbox", help="preset whose unmeasured values the profile keeps")
    c.add_argument("--model", default="llama-3.1-8b", help="preset, config.json, checkpoint folder or Hugging Face id (Qwen/Qwen3-8B) whose decoder "
                   "layer is timed")
    c.add_argument("--dir", default=".", help="folder on the disk to measure")
    c.add_argument("--out", default="profile.json")
    c.add_argument("--peer", action="append", default=[], metavar="ENGINE",
                   help="also time this engine's own costs (repeatable), e.g. accelerate or airllm; none by default")

    cp = sub.add_parser("calibrate-peer", help="fit llama.cpp's CPU speed on this host from llama-bench's output and "
                        "write a profile that simulate --policy llamacpp and plan --engine llamacpp use")
    cp.set_defaults(run=handlers.calibrate_peer)
    cp.add_argument("model", metavar="MODEL", help="the model llama-bench ran: its .gguf file (or a config.json)")
    cp.add_argument("--bench", required=True, help="llama-bench -o json (or jsonl) output, with at least one "
                    "generation test that keeps weights on the CPU, e.g. llama-bench -m MODEL.gguf -ngl 0,99 -n 32")
    cp.add_argument("--profile", default="h200-testbox", help="machine preset or profile JSON to start from")
    cp.add_argument("--out", default="profile-llamacpp.json", help="profile JSON to write")
    cp.add_argument("--json", action="store_true")

    v = sub.add_parser("validate", help="run a plan on the engine and compare with the simulator")
    v.set_defaults(run=handlers.validate)
    v.add_argument("--checkpoint", required=True, help="Hugging Face checkpoint folder (config.json + safetensors)")
    v.add_argument("--plan", required=True, help="plan JSON (offloadsim plan --out), or a policy name")
    v.add_argument("--profile", default=None, help="machine profile JSON (offloadsim calibrate) or preset")
    v.add_argument("--store", default=None, help="layer store folder (default: CHECKPOINT/.offloadsim-store)")
    v.add_argument("--vram", default=None)
    v.add_argument("--ram-budget", default=None, help="RAM budget (default: the profile's RAM less 4 GiB)")
    v.add_argument("--prompt-tokens", type=int, default=16)
    v.add_argument("--new-tokens", type=int, default=4)
    v.add_argument("--batch", type=int, default=1)
    v.add_argument("--cold", action="store_true", help="drop the store's pages first")
    v.add_argument("--device", default=None, help="cuda or cpu (default: cuda when available)")
    v.add_argument("--out", default="validation", help="report folder")
    v.add_argument("--json", action="store_true")

    r = sub.add_parser("run", help="generate text with offloadsim's engine on a checkpoint, placed as a plan says, "
                       "and print the measured speed beside the plan's prediction")
    r.set_defaults(run=handlers.run)
    r.add_argument("checkpoint", metavar="CHECKPOINT", help="Hugging Face checkpoint folder with its tokenizer")
    r.add_argument("--plan", required=True, help="plan JSON made for this checkpoint (offloadsim plan CHECKPOINT --out)")
    r.add_argument("--prompt", required=True, help="the text to continue (or, with --chat, the user's message)")
    r.add_argument("--chat", action="store_true", help="wrap the prompt in the checkpoint's chat template")
    r.add_argument("--max-new-tokens", type=int, default=64, help="tokens to generate at most (default 64)")
    r.add_argument("--temperature", type=float, default=0.0, help="0 (default): greedy; above 0: sampled")
    r.add_argument("--top-p", type=float, default=1.0, help="sample from the smallest set of tokens reaching this "
                   "probability (default 1: all)")
    r.add_argument("--seed", type=int, default=0, help="seed of the sampling (the same seed, the same text)")
    r.add_argument("--machine", default=None, help="machine preset or profile JSON the prediction is made for "
                   "(default: the plan's machine)")
    r.add_argument("--device", default=None, help="cuda or cpu (default: cuda when available)")
    r.add_argument("--store", default=None, help="layer store folder (default: CHECKPOINT/.offloadsim-store)")
    r.add_argument("--cold", action="store_true", help="drop the store's pages first")
    r.add_argument("--ignore-eos", action="store_true", help="make all --max-new-tokens tokens (timing runs)")
    r.add_argument("--json", action="store_true", help="print the text, tokens and times as JSON at the end "
                   "instead of streaming")
