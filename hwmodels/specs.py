"""Frozen hardware specs. SI units inside, the unit in every field name.

Each spec checks its own invariants (positive bandwidths, sane counts) when built;
pydantic raises ValidationError, which the CLI turns into one sentence.
"""
from __future__ import annotations

from pydantic import (BaseModel, ConfigDict, Field, NonNegativeFloat, NonNegativeInt, PositiveFloat, PositiveInt,
                      model_serializer, model_validator)

from hwmodels.names import Name
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
    name: Name = Field(description="Device name.")
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
    name: Name = Field(description="Link name, e.g. pcie4x16.")
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
    name: Name = Field(description="GPU name.")
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
    host_link: str | None = Field(default=None, description="The CPU-GPU link when it is not the card's PCIe "
                                  "(GH200: 'NVLink-C2C'); None: PCIe.")
    host_link_peak_bytes_per_s: PositiveFloat | None = Field(
        default=None, description="The datasheet peak per direction of host_link; set with it.")

    @model_validator(mode="after")
    def _host_link_with_its_peak(self):
        if (self.host_link is None) != (self.host_link_peak_bytes_per_s is None):
            raise ValueError("host_link and host_link_peak_bytes_per_s are given together or not at all")
        return self


class CpuSpec(Spec):
    name: Name = Field(description="CPU (or CPUs) name.")
    cores: PositiveInt = Field(description="Physical cores used for compute and unpacking.")
    memory_bytes_per_s: PositiveFloat = Field(description="RAM bandwidth the CPU achieves in matrix-vector work.")
    flops_per_s: PositiveFloat = Field(description="Achievable BF16 FLOP/s for matrix work (all cores).")
    op_overhead_s: NonNegativeFloat = Field(default=20e-6, description="Overhead per operator on the CPU.")
    numa_nodes: PositiveInt = Field(default=1, description="NUMA nodes (sockets) the cores and memory are split over; "
                                    "memory_bytes_per_s is all of them together.")
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


class GpuAttach(Spec):
    """One GPU of a machine with several: the card, its own link to the host, and the shared paths that link uses."""
    gpu: GpuSpec
    link: LinkSpec
    shares: tuple[str, ...] = Field(default=(), description="Names of the shared uplinks this GPU's link runs through "
                                    "(a PCIe switch's uplink, a root port split x8/x8, a CPU socket's link to the "
                                    "host memory); each is a key of Topology.shared_bytes_per_s.")


class Topology(Spec):
    """The GPUs of a machine with more than one and how they reach the host and each other. GPU 0 is the machine's
    `gpu` and `link`. Host memory (HostMemorySpec.bandwidth_bytes_per_s) is shared by every link."""
    gpus: tuple[GpuAttach, ...] = Field(min_length=2, description="Every GPU, in device order.")
    shared_bytes_per_s: dict[str, PositiveFloat] = Field(default_factory=dict, description="Per-direction bandwidth "
                                                         "of each shared uplink, by name.")
    p2p_bytes_per_s: PositiveFloat | None = Field(default=None, description="GPU-to-GPU copy speed (peer-to-peer); "
                                                  "None: no peer-to-peer, a copy goes through host memory.")
    p2p_latency_s: NonNegativeFloat = Field(default=10e-6, description="Fixed cost of one GPU-to-GPU copy.")

    @model_validator(mode="after")
    def _named_shares(self) -> "Topology":
        for i, a in enumerate(self.gpus):
            for name in a.shares:
                if name not in self.shared_bytes_per_s:
                    raise ValueError(f"GPU {i} runs through shared uplink {name!r}, which has no bandwidth in "
                                     f"shared_bytes_per_s; add it")
        return self


PEER_ENGINES = ("accelerate", "airllm", "llamacpp")


# one value of an engine's costs as a profile or preset holds it: each engine's package validates its own typed
# model from these (sim.engines), so hardware specs need not know the engines
PeerValue = float | int | bool | str | None


class MachineSpec(Spec):
    name: Name = Field(description="Machine name.")
    description: str = Field(default="", description="What this machine is.")
    gpu: GpuSpec
    link: LinkSpec
    storage: StorageSpec
    host_memory: HostMemorySpec
    cpu: CpuSpec
    engine: EngineSpec = Field(default_factory=EngineSpec, description="The engine's own host-side costs.")
    peers: dict[str, dict[str, PeerValue]] = Field(
        default_factory=dict, description="Each engine's measured host-side costs by engine name, its raw values "
        "(field -> value); the engine's package validates them (sim.engines.costs_of). Absent: its defaults.")
    compute_grids: tuple[ComputeGrid, ...] = Field(default=(), description="Measured compute tables per unit kind "
                                                   "and device (calibrate); units without one use the roofline.")
    topology: Topology | None = Field(default=None, description="The GPUs of a machine with several (hwmodels.topology); "
                                      "None: one GPU, `gpu` over `link`.")
    sources: dict[str, str] = Field(default_factory=dict, description="Field path -> source of its value.")

    @model_serializer(mode="wrap")
    def _one_gpu_as_before(self, handler):
        """A machine with one GPU writes no topology key: its JSON is what it was before machines had several."""
        data = handler(self)
        if isinstance(data, dict) and data.get("topology") is None:
            data.pop("topology", None)
        return data

    @property
    def gpu_count(self) -> int:
        return len(self.topology.gpus) if self.topology else 1

    def with_overrides(self, **paths: float | int | str) -> "MachineSpec":
        """Copy with values replaced by dotted path, e.g. {'storage.cold_read_bytes_per_s': 7e9}."""
        data = self.model_dump()
        sources = dict(self.sources)
        for path, value in paths.items():
            node = data
            *head, last = path.split(".")
            for key in head:
                node = node.setdefault(key, {}) if head[0] == "peers" else node[key]
            if last not in node and head[:1] != ["peers"]:  # an engine's costs are checked by its package
                raise KeyError(path)
            node[last] = value
            sources[path] = "user override"
        data["sources"] = sources
        return MachineSpec.model_validate(data)
