"""A peer engine's costs on a machine without its own table: derived from the machine's parts and the reference
machine's fitted table (sim/engines/<engine>/derived.py); a machine's own table wins."""
import pytest

from hwmodels import get_machine
from sim.engines import costs_of, with_costs

H200_STREAM = 92.37e9  # [h200-testbox.peers.llamacpp] cpu_bytes_per_s
H200_CPU_FLOPS = 1.5e12  # h200-testbox-cpu flops_per_s
H200_GPU = 4270e9  # h200-testbox gpu.vram_bytes_per_s


def test_own_table_wins_on_the_machine_it_was_fitted_on():
    c = costs_of(get_machine("h200-testbox"), "llamacpp")
    assert (c.cpu_bytes_per_s, c.gpu_row_s, c.cpu_flops_per_s) == (92.37e9, 2.48e-10, 0.7379e12)


def test_dual_socket_xeon_streams_one_numa_nodes_bandwidth():
    """xeon-4090: 64 cores at 72 TFLOP/s would stream 92.37 GB/s x 72/1.5 = 4.4 TB/s; one of its two NUMA nodes
    gives llama.cpp 400 GB/s / 2 = 200 GB/s, the lesser. The cache and head speeds keep their ratio to it; a GPU
    row costs 2.48e-10 s x 4270 / 1008 on the RTX 4090."""
    m = get_machine("xeon-4090")
    c = costs_of(m, "llamacpp")
    assert c.cpu_bytes_per_s == pytest.approx(200e9)
    assert c.cpu_cache_bytes_per_s == pytest.approx(222.11e9 * 200e9 / H200_STREAM)
    assert c.cpu_row_s == pytest.approx(1.269e-8 * H200_STREAM / 200e9)
    assert c.gpu_row_s == pytest.approx(2.48e-10 * H200_GPU / 1008e9)
    assert (c.step_s, c.gpu_op_s) == (1.657e-4, 1.213e-6)  # the engine's loop and launches as fitted


def test_slow_cores_bound_the_stream_below_the_memory():
    """desktop-4090 with a CPU of 0.3 TFLOP/s: its cores stream 92.37 GB/s x 0.3 / 1.5 = 18.474 GB/s, under its 55
    GB/s of memory; its multiply rate 0.7379 TFLOP/s x 0.2."""
    m = get_machine("desktop-4090")
    slow = m.model_copy(update={"cpu": m.cpu.model_copy(update={"flops_per_s": 0.3e12}), "peers": {}})
    c = costs_of(slow, "llamacpp")
    assert c.cpu_bytes_per_s == pytest.approx(18.474e9)
    assert c.cpu_flops_per_s == pytest.approx(0.7379e12 * 0.2)


def test_host_costs_of_the_python_engines_carry_over_unchanged():
    m = get_machine("rtx3080-laptop")
    assert costs_of(m, "accelerate").step_s == 4.10e-3
    assert costs_of(m, "airllm").load_unit_s == 0.1952
    assert costs_of(with_costs(m, "airllm", {"load_unit_s": 0.01}), "airllm").load_unit_s == 0.01
