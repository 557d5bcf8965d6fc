"""The model shapes of the H200 runs (benchmarks/h200_*.py): a preset of sim/model/presets and its config overrides,
by name; `NAME:LAYERS` on their command lines cuts one to that many layers. No torch here: the reports read it too.
"""
from validate.checkpoint import make_config

# Real shapes of six public models (hidden, MLP, heads, KV heads, head dim, vocab), fewer layers; all with their
# own output head (Qwen3-0.6B and 1.7B tie it to the embedding: here it is untied; the `-tied` shapes below tie it,
# which llama.cpp runs too).
ARCHS = {
    "llama-8b": ("llama-3.1-8b", dict(num_hidden_layers=4)),
    "llama-1b": ("llama-3.1-8b", dict(num_hidden_layers=8, hidden_size=2048, intermediate_size=8192,
                                      num_attention_heads=32, num_key_value_heads=8, head_dim=64)),
    "qwen3-14b": ("qwen3-14b", dict(num_hidden_layers=4)),
    "qwen3-4b": ("qwen3-14b", dict(num_hidden_layers=8, hidden_size=2560, intermediate_size=9728,
                                   num_attention_heads=32, num_key_value_heads=8, head_dim=128)),
    "qwen3-1.7b": ("qwen3-14b", dict(num_hidden_layers=28, hidden_size=2048, intermediate_size=6144,
                                     num_attention_heads=16, num_key_value_heads=8, head_dim=128)),
    "qwen3-0.6b": ("qwen3-14b", dict(num_hidden_layers=28, hidden_size=1024, intermediate_size=3072,
                                     num_attention_heads=16, num_key_value_heads=8, head_dim=128)),
    "llama-3b": ("llama-3.1-8b", dict(num_hidden_layers=28, hidden_size=3072, intermediate_size=8192,
                                      num_attention_heads=24, num_key_value_heads=8, head_dim=128)),
    "qwen3-8b": ("qwen3-14b", dict(num_hidden_layers=36, hidden_size=4096, intermediate_size=12288,
                                   num_attention_heads=32, num_key_value_heads=8, head_dim=128)),
    # shapes no fit has seen (lab/data/peers/llamacpp-u.json): Llama-3.1-70B's layer (hidden 8192) and SmolLM-135M's
    # (hidden 576, 9 heads)
    "llama-70b": ("llama-3.1-8b", dict(num_hidden_layers=80, hidden_size=8192, intermediate_size=28672,
                                       num_attention_heads=64, num_key_value_heads=8, head_dim=128)),
    "smollm-135m": ("llama-3.1-8b", dict(num_hidden_layers=30, hidden_size=576, intermediate_size=1536,
                                         num_attention_heads=9, num_key_value_heads=3, head_dim=64,
                                         vocab_size=49152)),
    # llamacpp-v.json: a width between the fitted ones and llamacpp-u.json's (hidden 5120): Qwen3-32B's layer (64 heads
    # over 8 KV heads, a 25600-wide MLP; head_dim hidden / heads = 80, as make_config derives it) and a Llama layer like
    # Mistral-NeMo-12B's (a 14336-wide MLP, a 131072-token vocabulary; 40 heads of 128 over 10 KV heads)
    "qwen3-32b": ("qwen3-14b", dict(num_hidden_layers=64, hidden_size=5120, intermediate_size=25600,
                                    num_attention_heads=64, num_key_value_heads=8)),
    "llama-12b": ("llama-3.1-8b", dict(num_hidden_layers=40, hidden_size=5120, intermediate_size=14336,
                                       num_attention_heads=40, num_key_value_heads=10, vocab_size=131072)),
    # llamacpp-w.json, a probe of llama.cpp's attention for many sequences all on the GPU (40 heads over 10 KV heads and
    # 9 over 3 ran 3-4x slower than 8 KV heads did, llamacpp-{u,v}.json): head layouts apart, Llama layers with head_dim
    # 128
    "fa-20-10": ("llama-3.1-8b", dict(num_hidden_layers=8, hidden_size=2560, intermediate_size=6912,
                                      num_attention_heads=20, num_key_value_heads=10, vocab_size=32000)),
    "fa-20-4": ("llama-3.1-8b", dict(num_hidden_layers=8, hidden_size=2560, intermediate_size=6912,
                                     num_attention_heads=20, num_key_value_heads=4, vocab_size=32000)),
    "fa-24-8": ("llama-3.1-8b", dict(num_hidden_layers=8, hidden_size=3072, intermediate_size=8192,
                                     num_attention_heads=24, num_key_value_heads=8, vocab_size=32000)),
    "fa-16-16": ("llama-3.1-8b", dict(num_hidden_layers=8, hidden_size=2048, intermediate_size=5632,
                                      num_attention_heads=16, num_key_value_heads=16, vocab_size=32000)),
    # MoE for llama.cpp's --n-cpu-moe (llamacpp-ab.json): Qwen3-30B-A3B's layer (128 experts of 768, 8 a token; head_dim
    # hidden / heads = 64, as make_config derives it) and a Mixtral-like one of few wide experts (8 of 14336, 2 a
    # token) in the same qwen3moe architecture
    "qwen3-30b-a3b": ("qwen3-235b-a22b", dict(num_hidden_layers=8, hidden_size=2048, num_attention_heads=32,
                                              num_key_value_heads=4, moe_intermediate_size=768)),
    "moe-8x2": ("qwen3-235b-a22b", dict(num_hidden_layers=4, hidden_size=4096, num_attention_heads=32,
                                        num_key_value_heads=8, moe_intermediate_size=14336, num_experts=8,
                                        num_experts_per_tok=2, vocab_size=32000)),
    # OLMoE-1B-7B's shape: 64 experts of 1024, eight per token
    "moe-64x8": ("qwen3-235b-a22b", dict(num_hidden_layers=16, hidden_size=2048, num_attention_heads=16,
                                         num_key_value_heads=16, moe_intermediate_size=1024,
                                         num_experts=64, num_experts_per_tok=8, vocab_size=50304)),
    # llamacpp-aj.json, shapes no fit has seen: Phi-3-mini's layer (32 heads of 96, no grouped KV, a 32064-token
    # vocabulary), SmolLM-360M's (hidden 960, 15 heads over 5) and Qwen1.5-MoE-A2.7B's routed experts (60 of 1408,
    # four a token; its shared expert left out, as the qwen3moe architecture has none)
    "phi3-mini": ("llama-3.1-8b", dict(num_hidden_layers=32, hidden_size=3072, intermediate_size=8192,
                                       num_attention_heads=32, num_key_value_heads=32, head_dim=96,
                                       vocab_size=32064)),
    "smollm-360m": ("llama-3.1-8b", dict(num_hidden_layers=32, hidden_size=960, intermediate_size=2560,
                                         num_attention_heads=15, num_key_value_heads=5, head_dim=64,
                                         vocab_size=49152)),
    # held out of llama.cpp's CPU cost per matrix row (llamacpp-{am,an,ao}.json): widths no fit has seen, below and
    # between the fitted ones: TinyLlama-1.1B's layer (hidden 2048, a 5632-wide MLP, 32 heads over 4), Qwen2.5-0.5B's
    # dimensions on a Llama layer (hidden 896, 14 heads over 2, a 4864-wide MLP, its 151936-token vocabulary; its q/k/v
    # biases left out) and a 640-wide layer (10 heads over 2, a 1728-wide MLP)
    "tinyllama-1.1b": ("llama-3.1-8b", dict(num_hidden_layers=22, hidden_size=2048, intermediate_size=5632,
                                            num_attention_heads=32, num_key_value_heads=4, head_dim=64,
                                            vocab_size=32000)),
    "qwen2.5-0.5b": ("llama-3.1-8b", dict(num_hidden_layers=24, hidden_size=896, intermediate_size=4864,
                                          num_attention_heads=14, num_key_value_heads=2, head_dim=64,
                                          vocab_size=151936)),
    "llama-640": ("llama-3.1-8b", dict(num_hidden_layers=24, hidden_size=640, intermediate_size=1728,
                                       num_attention_heads=10, num_key_value_heads=2, head_dim=64, vocab_size=32000)),
    # a head tied to the embedding, as Llama-3.2-1B's own (AirLLM keeps that matrix resident; airllm policy)
    "llama-1b-tied": ("llama-3.1-8b", dict(num_hidden_layers=16, hidden_size=2048, intermediate_size=8192,
                                           num_attention_heads=32, num_key_value_heads=8, head_dim=64,
                                           tie_word_embeddings=True)),
    # heads tied to the embedding as the real models' are (held out: lab/data/peers/peers-{v,w}.json): Qwen3-0.6B's and
    # Qwen3-1.7B's own, and a Llama-3.2-3B-like layer (hidden 3072, 24 heads over 8 of 128, a 128256-token vocabulary)
    "qwen3-0.6b-tied": ("qwen3-14b", dict(num_hidden_layers=28, hidden_size=1024, intermediate_size=3072,
                                          num_attention_heads=16, num_key_value_heads=8, head_dim=128,
                                          tie_word_embeddings=True)),
    "qwen3-1.7b-tied": ("qwen3-14b", dict(num_hidden_layers=28, hidden_size=2048, intermediate_size=6144,
                                          num_attention_heads=16, num_key_value_heads=8, head_dim=128,
                                          tie_word_embeddings=True)),
    "llama-3b-tied": ("llama-3.1-8b", dict(num_hidden_layers=28, hidden_size=3072, intermediate_size=8192,
                                           num_attention_heads=24, num_key_value_heads=8, head_dim=128,
                                           tie_word_embeddings=True)),
    "moe-60x4": ("qwen3-235b-a22b", dict(num_hidden_layers=24, hidden_size=2048, num_attention_heads=16,
                                         num_key_value_heads=16, moe_intermediate_size=1408,
                                         num_experts=60, num_experts_per_tok=4, vocab_size=151936)),
}


def arch_config(spec: str, extra: dict | None = None) -> tuple[str, dict]:
    """(name, config) of NAME[:LAYERS]: the shape's preset with its overrides, cut to LAYERS where given, without
    the preset's rope scaling (random checkpoints do not need it). `extra`: more NAME -> (preset, overrides)."""
    name, layers = (spec.split(":") + [""])[:2]
    preset, over = {**ARCHS, **(extra or {})}[name]
    cfg = make_config(preset, **dict(over, **({"num_hidden_layers": int(layers)} if layers else {})))
    cfg.pop("rope_scaling", None)
    return name, cfg
