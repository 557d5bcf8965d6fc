"""Frozen hardware specs. SI units inside, the unit in every field name.

Each spec checks its own invariants (positive bandwidths, sane counts) when built;
pydantic raises ValidationError, which the CLI turns into one sentence.
"""
from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, PositiveFloat, PositiveInt, NonNegativeFloat, NonNegativeInt

from hwmodels.profiles import ComputeGrid, H2DPoint


class Spec(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


# Per-lane per-direction signalling after encoding, bytes per second [D]:
# PCIe 3.0 8 GT/s 128b/130b; 4.0 16 GT/s; 5.0 32 GT/s; 6.0 64 GT/s PAM4 FLIT (~121 GB/s at x16).
PCIE_LANE_BYTES_PER_S = {3: 8e9 * 128 / 130 / 8, 4: 16e9 * 128 / 130 / 8, 5: 32e9 * 128 / 130 / 8, 6: 121e9 / 16}


def pcie_theoretical_bytes_per_s(generation: int, lanes: int) -> float:
    """Theoretical per-direction PCIe rate (hpc-notes.pages.dev/reference/pcie; yduf.github.io/pcie for 6.0)."""
    return PCIE_LANE_BYTES_PER_S[generation] * lanes


class StorageSpec(Spec):
    name: str = Field(description="Device name.")
    cold_read_bytes_per_s: PositiveFloat = Field(description="Sequential read speed with the page cache empty.")
    cache_read_bytes_per_s: PositiveFloat = Field(description="Re-read speed when the data sits in the page cache.")
    write_bytes_per_s: PositiveFloat = Field(description="Sequential write speed.")
    request_latency_s: NonNegativeFloat = Field(description="Fixed cost per read request (one per layer file).")
    queue_depth: PositiveInt = Field(description="Reads the device serves at once.")


class HostMemorySpec(Spec):
    capacity_bytes: PositiveInt = Field(description="Installed RAM.")
    bandwidth_bytes_per_s: PositiveFloat = Field(description="Achievable RAM bandwidth for streaming reads (all cores).")
    memcpy_bytes_per_s: PositiveFloat = Field(description="Single-thread memcpy speed (e.g. pageable -> pinned).")
    first_touch_bytes_per_s: PositiveFloat = Field(default=4e9, description="Speed of filling freshly allocated "
                                                   "memory (page faults); default [E] ~1 page per us per core.")
    pin_bytes_per_s: PositiveFloat = Field(default=1.44e9, description="Speed of allocating page-locked (pinned) host "
                                           "memory; default measured on the H200 host (h200-stream-probe.json).")
    map_touch_bytes_per_s: PositiveFloat | None = Field(default=None, description="Speed of mapping page-cache pages "
                                                        "into a fresh memory map (one touch per page): what using a "
                                                        "memory-mapped file in place adds; calibrate measures it; None: "
                                                        "not measured, taken as free.")


class LinkSpec(Spec):
    name: str = Field(description="Link name, e.g. pcie4x16.")
    generation: int = Field(ge=3, le=6, description="PCIe generation.")
    lanes: PositiveInt = Field(description="PCIe lanes.")
    pinned_h2d_bytes_per_s: PositiveFloat = Field(description="Achieved host-to-device copy speed from pinned memory.")
    pageable_h2d_bytes_per_s: PositiveFloat = Field(description="Achieved host-to-device copy speed from pageable memory.")
    latency_s: NonNegativeFloat = Field(default=10e-6, description="Fixed cost per copy.")
    by_size: tuple[H2DPoint, ...] = Field(default=(), description="Measured copy speeds by transfer size (calibrate); "
                                          "when present they replace the two speeds above, interpolated in log size.")

    @property
    def theoretical_bytes_per_s(self) -> float:
        return pcie_theoretical_bytes_per_s(self.generation, self.lanes)


class GpuSpec(Spec):
    name: str = Field(description="GPU name.")
    year: int = Field(description="Year of release.")
    market: str = Field(description="'consumer' or 'datacenter'.", pattern="^(consumer|datacenter)$")
    vram_bytes: PositiveInt = Field(description="VRAM capacity.")
    vram_bytes_per_s: PositiveFloat = Field(description="VRAM bandwidth.")
    bf16_flops_per_s: PositiveFloat = Field(description="Dense BF16 (FP16 where no BF16) tensor FLOP/s.")
    kernel_overhead_s: NonNegativeFloat = Field(description="Launch and scheduling overhead per kernel launched "
                                                "eagerly (the peers; calibrate's single-layer decode).")
    graph_kernel_overhead_s: NonNegativeFloat | None = Field(
        default=None, description="Overhead per kernel inside a replayed CUDA graph (offloadsim's engine: one graph "
                                  "per unit). None: GRAPH_OVERHEAD_SHARE of kernel_overhead_s.")
    pcie_generation: int = Field(ge=3, le=6, description="PCIe generation of the card.")
    pcie_lanes: int | None = Field(default=None, ge=1, le=16, description="PCIe lanes of the card when fewer than 16 "
                                   "(laptop and entry cards); None: x16.")
    measured_h2d_bytes_per_s: PositiveFloat | None = Field(
        default=None, description="A published pinned host-to-device measurement on this card's link, if any.")


class CpuSpec(Spec):
    name: str = Field(description="CPU (or CPUs) name.")
    cores: PositiveInt = Field(description="Physical cores used for compute and unpacking.")
    memory_bytes_per_s: PositiveFloat = Field(description="RAM bandwidth the CPU achieves in matrix-vector work.")
    flops_per_s: PositiveFloat = Field(description="Achievable BF16 FLOP/s for matrix work (all cores).")
    op_overhead_s: NonNegativeFloat = Field(default=20e-6, description="Overhead per operator on the CPU.")
    llc_bytes: NonNegativeInt | None = Field(default=None, description="The last-level cache the compute threads "
                                             "share (lscpu's L3): a CPU share of the weights that fits in it is read "
                                             "from it on every token after the first. Absent: not known, no effect.")
    unpack_bytes_per_s_per_thread: dict[str, PositiveFloat] = Field(
        description="Lossless decode speed per thread by codec, in decoded bytes per second.")
    unpack_threads: PositiveInt = Field(description="Threads an engine gives to unpacking.")
    copy_contention: float = Field(default=1.0, ge=1.0, description="CPU compute time multiplier while host-to-device "
                                   "copies, reads or unpacking run beside it (shared cores and DRAM); calibrate measures it.")


class EngineSpec(Spec):
    """Host-side costs of the engine that executes plans (offloadsim's own streaming engine), measured by calibrate."""
    stream_overhead_s: dict[str, NonNegativeFloat] = Field(
        default_factory=dict, description="Extra compute-lane seconds per streamed item, by tier: the stage threads' "
        "hand-offs and bookkeeping that delay the compute thread. Absent: 0 (an ideal engine).")
    stream_startup_s: NonNegativeFloat = Field(default=0.0, description="Seconds a run that streams loses before its "
                                               "first load is ready (starting the stage threads); 0: an ideal engine.")


PEER_ENGINES = ("accelerate", "airllm", "llamacpp")


class PeerSpec(Spec):
    """Host-side costs of a peer engine beyond the pipeline it runs (validate/peer_calibration.py fits them on runs
    of the real engine: lab/campaigns/h200_peers.py). Seconds on the compute lane unless said otherwise."""
    step_s: NonNegativeFloat = Field(default=0.0, description="Per forward step (token): the engine's generation loop "
                                     "around the layers (Accelerate: every run; llama.cpp: a run that computes on "
                                     "the GPU).")
    load_module_s: NonNegativeFloat = Field(default=0.0, description="Per parameter-holding module of a unit loaded "
                                            "for one forward (hooks, per-tensor copies and freeing).")
    disk_tensor_s: NonNegativeFloat = Field(default=0.0, description="Per tensor of a unit offloaded to disk, per "
                                            "forward, beyond its pages' map cost: Accelerate opens the safetensors "
                                            "file and maps it anew for each tensor (calibrate measures it).")
    disk_header_entry_s: NonNegativeFloat = Field(default=0.0, description="The same per entry of the file's header "
                                                  "(parsed at every open): shards of SHARD_BYTES assumed.")
    hook_module_s: NonNegativeFloat = Field(default=0.0, description="Per parameter-holding module of a unit "
                                            "offloaded to disk and computed on the CPU, per forward: Accelerate's "
                                            "AlignDevicesHook sets each tensor on the execution device before the "
                                            "forward and back on meta after it (calibrate times it: "
                                            "validate/hook_cost.py). A unit loaded to the GPU pays load_module_s.")
    load_unit_s: NonNegativeFloat = Field(default=0.0, description="Per unit loaded for one forward (materialising "
                                          "the layer and cleaning up after it); AirLLM: per module it streams, its "
                                          "cleanup (sim.run.schedule.airllm_modules; calibrate times it).")
    pin_each_load: bool = Field(default=False, description="Every load is copied into a pinned buffer (pin_memory(): "
                                "a host memcpy; PyTorch's caching host allocator reuses the pinned blocks).")
    cpu_compute_scale: PositiveFloat = Field(default=1.0, description="The engine's CPU kernels against the machine's "
                                             "CPU compute grid (offloadsim's engine, torch): a CPU-computed unit takes "
                                             "this times the grid's time (a roofline, a bound, is not scaled).")
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
                                   "calls G and J, lab/journal/peers.md; with part of the model on the GPU.")
    cpu_cache_share_alone: float = Field(default=1.0, gt=0, le=1, description="cpu_cache_share when every unit is "
                                         "computed on the CPU (llama.cpp's -ngl 0: no GPU in the token's path): "
                                         "on the H200 host, all-CPU runs at 0.63-0.86 of the L3 streamed at its "
                                         "speed in calls U, AH, AM and AQ (SmolLM-135M, a 24-layer Llama-640), where "
                                         "runs with the GPU taking part left it from 0.64 (calls G, H, J, AA, AM: "
                                         "Qwen3-0.6B, Llama-3B); lab/journal/peers.md, thirtieth session.")
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
                                                     "measured linear in B per weight row (calls M and P, B = 2 to "
                                                     "48, three shapes). Absent: such a step pays gpu_row_s per row "
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
                                                    "decode step that warms a graph up (sim.run.schedule."
                                                    "graph_warmup_steps): llama.cpp's CUDA backend runs a graph whose "
                                                    "shapes changed eagerly once, captures it on the next step and "
                                                    "replays it from then on (ggml-cuda.cu, warmup_complete).")
    flash_attention: bool = Field(default=True, description="The engine's GPU has fused attention kernels "
                                  "(llama.cpp: ggml-cuda's flash attention, compiled in by default; a build without "
                                  "them, GGML_CUDA_FA=OFF, turns flash attention off once a layer is on the GPU).")
    flash_attn: Literal["auto", "on", "off"] = Field(default="auto", description="llama.cpp's -fa: 'auto' (its "
                                                     "default) fuses every attention unless one would have to run "
                                                     "on another device than its layer (sim.run.schedule."
                                                     "ggml_flash_attention); 'on' and 'off' force it.")
    gpu_mm_attention_s: NonNegativeFloat = Field(default=0.0, description="Without flash_attention or with -fa off "
                                                 "(flash_attn): per GPU-computed attention on a decode step of one "
                                                 "token, beyond the fused kernel "
                                                 "(the scores and their product with V as matrix multiplies, the "
                                                 "softmax and the copies between: one sequence took 1.26 ms a token "
                                                 "on a 16-layer Llama-1B all on the GPU with the kernels, 1.52-1.59 "
                                                 "without, calls E-J against Z).")
    cpu_mm_attention_s: NonNegativeFloat = Field(default=0.0, description="Per CPU-computed attention on a decode "
                                                 "step of one token when llama.cpp's flash attention is off "
                                                 "(sim.run.schedule.ggml_flash_attention: -fa off, or a build without "
                                                 "ggml-cuda's kernels with an attention on the GPU), beyond the "
                                                 "operators it adds (sim.model.shapes.FLASH_ATTN_SAVED_OPS at cpu_op_s).")
    gpu_compute_scale: PositiveFloat = Field(default=1.0, description="The engine's GPU kernels against the machine's "
                                             "GPU compute grid of its dispatch (offloadsim's engine, torch); with "
                                             "gpu_op_s, for the larger steps only (prefill).")
    gpu_dispatch: Literal["eager", "graph"] = Field(default="eager", description="How its GPU kernels are launched: "
                                                    "one by one (eager) or replayed from captured CUDA graphs.")
    head_last_position: bool = Field(default=True, description="The output head computes the last position of each "
                                     "sequence only (transformers' generate passes logits_to_keep=1, which AirLLM 4's "
                                     "hooks keep; llama.cpp outputs the last token of a batch unless asked for "
                                     "more), not the whole prompt.")
    mmap_reads: bool = Field(default=False, description="Weights on disk are memory-mapped and used in place: a "
                             "page-cache hit costs nothing beyond the copy or compute that touches it.")
    source: str = Field(default="idealised: no measured costs", description="Where the values come from.")

    def host_scaled(self, scale: float) -> "PeerSpec":
        """These costs on a host whose CPU runs the engine's kernels `scale` times as fast: every CPU speed
        (CPU_RATES) times it, the CPU's own costs (CPU_COSTS) over it; the GPU's as they were."""
        update = {p: getattr(self, p) * scale for p in CPU_RATES if getattr(self, p) is not None}
        return self.model_copy(update={**update, **{p: getattr(self, p) / scale for p in CPU_COSTS}})


# the speeds of a peer's own CPU kernels, measured on it (PeerSpec.host_scaled moves them together)
CPU_RATES = ("cpu_bytes_per_s", "cpu_cache_bytes_per_s", "cpu_head_bytes_per_s", "cpu_flops_per_s")
CPU_COSTS = ("cpu_op_s", "cpu_row_s", "cpu_mm_attention_s")  # seconds of the CPU's kernels: over the host's speed


def default_peers() -> dict[str, "PeerSpec"]:
    """The runtime facts read from each engine's source, with zero measured costs."""
    return {"accelerate": PeerSpec(mmap_reads=True, source="Accelerate hooks.py (AlignDevicesHook): blocking pageable "
                                   "copies per module, disk offload through np.memmap (utils/offload.py); costs not "
                                   "measured on this machine"),
            "airllm": PeerSpec(pin_each_load=True, mmap_reads=True,
                               source="airllm 4.0 airllm_base.py (safetensors load_file maps the layer file, "
                               "pin_memory copies it, clean_memory after each layer, as hooks on "
                               "transformers' own forward and generate); costs not measured on this machine"),
            "llamacpp": PeerSpec(gpu_dispatch="graph", source="llama.cpp: -ngl placement (src/llama-model.cpp), CPU "
                                 "compute of the other layers on the mapped file, CUDA graphs for the GPU's share "
                                 "(GGML_CUDA_GRAPHS, on by default); costs not measured on this machine")}


class MachineSpec(Spec):
    name: str = Field(description="Machine name.")
    description: str = Field(default="", description="What this machine is.")
    gpu: GpuSpec
    link: LinkSpec
    storage: StorageSpec
    host_memory: HostMemorySpec
    cpu: CpuSpec
    engine: EngineSpec = Field(default_factory=EngineSpec, description="The engine's own host-side costs.")
    peers: dict[str, PeerSpec] = Field(default_factory=default_peers, description="Peer engines' host-side costs "
                                       "(accelerate, airllm, llamacpp).")
    compute_grids: tuple[ComputeGrid, ...] = Field(default=(), description="Measured compute tables per unit kind "
                                                   "and device (calibrate); units without one use the roofline.")
    sources: dict[str, str] = Field(default_factory=dict, description="Field path -> source of its value.")

    def with_overrides(self, **paths: float | int | str) -> "MachineSpec":
        """Copy with values replaced by dotted path, e.g. {'storage.cold_read_bytes_per_s': 7e9}."""
        data = self.model_dump()
        sources = dict(self.sources)
        for path, value in paths.items():
            node = data
            *head, last = path.split(".")
            for key in head:
                node = node[key]
            if last not in node:
                raise KeyError(path)
            node[last] = value
            sources[path] = "user override"
        data["sources"] = sources
        return MachineSpec.model_validate(data)
