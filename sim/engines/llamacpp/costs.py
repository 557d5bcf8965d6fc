"""llama.cpp's measured costs (validate/peer_calibration.py fits them on llama-bench runs: calibrate-peer)."""
from __future__ import annotations

from typing import Literal

from pydantic import Field, NonNegativeFloat, PositiveFloat

from sim.engines.hosted import HostedCosts

# the speeds of its own CPU kernels, measured on it (LlamacppCosts.host_scaled moves them together)
CPU_RATES = ("cpu_bytes_per_s", "cpu_cache_bytes_per_s", "cpu_head_bytes_per_s", "cpu_flops_per_s")
CPU_COSTS = ("cpu_op_s", "cpu_row_s", "cpu_mm_attention_s")  # seconds of the CPU's kernels: over the host's speed


class LlamacppCosts(HostedCosts):
    """llama.cpp's host costs: its generation loop (step_s, on a run that uses the GPU), its own CPU kernels
    streaming the mapped file, its GPU decode kernels, ggml's op offload and its CUDA graphs' warm-up."""
    gpu_dispatch: Literal["eager", "graph"] = Field(default="graph", description="How its GPU kernels are launched: "
                                                    "replayed from CUDA graphs (GGML_CUDA_GRAPHS, on by default) or "
                                                    "one by one (eager).")
    cpu_bytes_per_s: PositiveFloat | None = Field(default=None, description="The speed at which the engine's own "
                                                  "CPU kernels stream weights: a CPU-computed unit takes the roofline "
                                                  "of this and the CPU's FLOP rate, instead of the CPU grid and its "
                                                  "scale. Absent: the grid.")
    cpu_cache_bytes_per_s: PositiveFloat | None = Field(default=None, description="With cpu_bytes_per_s: the speed "
                                                        "instead when every weight the CPU computes with fits in "
                                                        "cpu_cache_share of the CPU's last-level cache (cpu.llc_bytes): "
                                                        "they stay there from one token to the next. Absent: none.")
    cpu_head_bytes_per_s: PositiveFloat | None = Field(default=None, description="With cpu_bytes_per_s: the speed "
                                                       "of a dense model's output head on the CPU instead (one long "
                                                       "matrix multiply, where a layer is many short ones with the "
                                                       "threads joined after each; an MoE's streams at "
                                                       "cpu_bytes_per_s, as measured). Absent: cpu_bytes_per_s.")
    cpu_cache_share: float = Field(default=0.6, gt=0, le=1, description="The share of the last-level cache the "
                                   "weights may take and stay in it (the KV cache, activations, the code and other "
                                   "processes hold the rest; replacement is not perfect): measured on the H200 host "
                                   "(300 MiB L3) between 176 MB (7 Qwen3-0.6B layers: fast) and 201 MB (8: not), "
                                   "lab/data/peers/llamacpp-{g,j}.json; with part of the model on the GPU.")
    cpu_cache_share_alone: float = Field(default=1.0, gt=0, le=1, description="cpu_cache_share when every unit is "
                                         "computed on the CPU (llama.cpp's -ngl 0: no GPU in the token's path): "
                                         "on the H200 host, all-CPU runs at 0.63-0.86 of the L3 streamed at its "
                                         "speed in lab/data/peers/llamacpp-{u,ah,am,aq}.json (SmolLM-135M, a "
                                         "24-layer Llama-640), where runs with the GPU taking part left it from "
                                         "0.64 (llamacpp-{g,h,j,aa,am}.json: Qwen3-0.6B, Llama-3B).")
    cpu_op_s: NonNegativeFloat = Field(default=0.0, description="With cpu_bytes_per_s: per computing operator of a "
                                       "CPU-computed unit in the engine's own graph (sim.model.shapes.GGML_OPS; llama.cpp "
                                       "joins its threads after each), on top of the streaming time.")
    cpu_row_s: NonNegativeFloat = Field(default=0.0, description="With cpu_bytes_per_s: per output row of a "
                                        "CPU-computed unit's weight matrices a step (sim.costs.compute.matrix_rows: ggml's "
                                        "CPU kernels make one dot product a row, each thread a contiguous run of "
                                        "rows), on top of streaming them; a short row (a narrow model) pays it over "
                                        "fewer bytes.")
    gpu_op_s: NonNegativeFloat | None = Field(default=None, description="The engine's own GPU kernels at decode (at "
                                              "most MMV_MAX_TOKENS tokens per step, llama.cpp's matrix-vector "
                                              "kernels; any decode step, with gpu_row_token_s): the unit's "
                                              "bytes at the GPU's bandwidth plus this per operator of its graph. "
                                              "Absent: the GPU grid times gpu_compute_scale.")
    gpu_row_s: NonNegativeFloat = Field(default=0.0, description="With gpu_op_s: per output row of the unit's "
                                        "weight matrices, counted as its multiplied parameters / hidden (exact for "
                                        "a square matrix, ~1.25x for a decoder whatever its size): llama.cpp's "
                                        "matrix-vector kernels give each row a thread block, whose fixed cost (a "
                                        "memory round trip and a reduction, shared by the blocks resident on the "
                                        "GPU) shows on short rows.")
    gpu_multi_row_s: NonNegativeFloat = Field(default=0.0, description="With gpu_row_token_s: per output row of a "
                                              "decode step of several sequences (or a prefill step of 2 to 32 "
                                              "tokens) instead of gpu_row_s, beside gpu_row_token_s per row and "
                                              "token.")
    gpu_row_token_s: NonNegativeFloat | None = Field(default=None, description="With gpu_op_s: per output row and "
                                                     "token of such a step: llama.cpp's decode of B sequences "
                                                     "measured linear in B per weight row "
                                                     "(lab/data/peers/llamacpp-{m,p}.json, B = 2 to 48, three "
                                                     "shapes). Absent: such a step pays gpu_row_s per row "
                                                     "up to MMV_MAX_TOKENS tokens, the GPU grid above.")
    cpu_flops_per_s: PositiveFloat | None = Field(default=None, description="With cpu_bytes_per_s: the rate of the "
                                                  "engine's own CPU matrix kernels; a CPU unit then takes the "
                                                  "OVERLAP_NORM-norm (sim.costs.compute) of its streaming and multiplying "
                                                  "times (they overlap in part). Absent: the roofline with the CPU's "
                                                  "FLOP rate.")
    gpu_offload_split_s: NonNegativeFloat = Field(default=0.0, description="llama.cpp's op offload (a step of at "
                                                  "least the plan's gpu_offload_min_tokens): per weight tensor of a "
                                                  "CPU-held unit multiplied on the GPU (sim.model.shapes.ggml_weights), "
                                                  "each a split of ggml's scheduler of its own (synchronise, copy, "
                                                  "launch); the unit's attention stays on the CPU with its KV cache "
                                                  "(at cpu_flops_per_s).")
    gpu_offload_split_prompt_s: NonNegativeFloat | None = Field(default=None, description="gpu_offload_split_s "
                                                                "instead on a prompt's step (one step of many "
                                                                "tokens) for weights of the mapped file; the fitted "
                                                                "one stands for decode steps of 32 or more sequences, "
                                                                "which copy every CPU-held weight again each step. "
                                                                "Absent: gpu_offload_split_s.")
    gpu_moe_expert_s: NonNegativeFloat = Field(default=0.0, description="Per routed expert of a block whose experts "
                                               "the GPU computes, per step of one token of each sequence (decode "
                                               "steps, and a one-token prompt), used or not: ggml-cuda's expert-"
                                               "indexed multiplies (MUL_MAT_ID) schedule work over every expert of "
                                               "the block. Longer prompt steps: not measured apart, not charged.")
    gpu_offload_split_pinned_s: NonNegativeFloat | None = Field(default=None, description="gpu_offload_split_s "
                                                                "instead for a unit in pinned host memory (ram_pinned: "
                                                                "llama.cpp --load-mode none): its copy is one DMA, "
                                                                "where a pageable one goes through the driver's "
                                                                "staging buffers. Absent: gpu_offload_split_s.")
    gpu_graph_warmup_op_s: NonNegativeFloat = Field(default=0.0, description="With gpu_dispatch 'graph': per "
                                                    "operator of a GPU-computed unit (sim.model.shapes.GGML_OPS), on each "
                                                    "decode step that warms a graph up (sim.engines.llamacpp."
                                                    "graphs.graph_warmup_steps): llama.cpp's CUDA backend runs a graph whose "
                                                    "shapes changed eagerly once, captures it on the next step and "
                                                    "replays it from then on (ggml-cuda.cu, warmup_complete).")
    flash_attention: bool = Field(default=True, description="The engine's GPU has fused attention kernels "
                                  "(llama.cpp: ggml-cuda's flash attention, compiled in by default; a build without "
                                  "them, GGML_CUDA_FA=OFF, turns flash attention off once a layer is on the GPU).")
    flash_attn: Literal["auto", "on", "off"] = Field(default="auto", description="llama.cpp's -fa: 'auto' (its "
                                                     "default) fuses every attention unless one would have to run "
                                                     "on another device than its layer (sim.engines.llamacpp."
                                                     "graphs.ggml_flash_attention); 'on' and 'off' force it.")
    gpu_mm_attention_s: NonNegativeFloat = Field(default=0.0, description="Without flash_attention or with -fa off "
                                                 "(flash_attn): per GPU-computed attention on a decode step of one "
                                                 "token, beyond the fused kernel "
                                                 "(the scores and their product with V as matrix multiplies, the "
                                                 "softmax and the copies between: one sequence took 1.26 ms a token "
                                                 "on a 16-layer Llama-1B all on the GPU with the kernels, 1.52-1.59 "
                                                 "without, lab/data/peers/llamacpp-{e..j}.json against "
                                                 "llamacpp-z.json).")
    cpu_mm_attention_s: NonNegativeFloat = Field(default=0.0, description="Per CPU-computed attention on a decode "
                                                 "step of one token when llama.cpp's flash attention is off "
                                                 "(sim.engines.llamacpp.graphs.ggml_flash_attention: -fa off, or a build without "
                                                 "ggml-cuda's kernels with an attention on the GPU), beyond the "
                                                 "operators it adds (sim.model.shapes.FLASH_ATTN_SAVED_OPS at cpu_op_s).")

    def host_scaled(self, scale: float) -> "LlamacppCosts | None":
        """These costs on a host whose CPU runs llama.cpp's kernels `scale` times as fast: every CPU speed
        (CPU_RATES) times it, the CPU's own costs (CPU_COSTS) over it; the GPU's as they were. None without its own
        CPU kernels (cpu_bytes_per_s absent: the grids price them)."""
        if self.cpu_bytes_per_s is None:
            return None
        return self.scaled(scale)

    def scaled(self, scale: float) -> "LlamacppCosts":
        update = {p: getattr(self, p) * scale for p in CPU_RATES if getattr(self, p) is not None}
        return self.model_copy(update={**update, **{p: getattr(self, p) / scale for p in CPU_COSTS}})
