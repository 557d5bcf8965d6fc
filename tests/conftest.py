import pytest

from hwmodels.specs import CpuSpec, GpuSpec, HostMemorySpec, LinkSpec, MachineSpec, StorageSpec


def make_toy_machine() -> MachineSpec:
    """Round-number hardware for hand-worked timelines: disk 1 B/s cold, 4 B/s cached, link 2 B/s pinned,
    1 B/s pageable, unpack 4 B/s total, GPU 1e6 FLOP/s and 10 B/s VRAM, no latencies or overheads."""
    return MachineSpec(
        name="toy",
        gpu=GpuSpec(name="toy-gpu", year=2024, market="consumer", vram_bytes=100, vram_bytes_per_s=10.0,
                    bf16_flops_per_s=1e6, kernel_overhead_s=0.0, pcie_generation=4),
        link=LinkSpec(name="toy-link", generation=4, lanes=16, pinned_h2d_bytes_per_s=2.0, pageable_h2d_bytes_per_s=1.0,
                      latency_s=0.0),
        storage=StorageSpec(name="toy-disk", cold_read_bytes_per_s=1.0, cache_read_bytes_per_s=4.0, write_bytes_per_s=1.0,
                            request_latency_s=0.0, queue_depth=1),
        host_memory=HostMemorySpec(capacity_bytes=1000, bandwidth_bytes_per_s=10.0, memcpy_bytes_per_s=10.0),
        cpu=CpuSpec(name="toy-cpu", cores=2, memory_bytes_per_s=5.0, flops_per_s=1e6, op_overhead_s=0.0,
                    unpack_bytes_per_s_per_thread={"zstd": 2.0}, unpack_threads=2),
    )


TOY = make_toy_machine()


@pytest.fixture
def toy_machine() -> MachineSpec:
    return TOY
