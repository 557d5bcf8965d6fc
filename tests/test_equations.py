"""Eq. (1), eq. (2) and the roofline on hand-worked numbers."""
import pytest

from sim.costs.equations import Codec, compression_pays, roofline_s, t_prep


def test_t_prep_by_tier(toy_machine):
    codec = Codec(ratio=0.5, unpack_bytes_per_s=4.0)
    assert t_prep(8, "vram", toy_machine).total_s == 0
    assert t_prep(8, "ram_pinned", toy_machine).total_s == 4.0          # 8 B / 2 B/s
    assert t_prep(8, "ram_pageable", toy_machine).total_s == 8.0        # 8 B / 1 B/s
    assert t_prep(8, "ram_compressed", toy_machine, codec=codec).total_s == 2.0 + 4.0
    assert t_prep(8, "disk_raw", toy_machine).total_s == 8.0 + 4.0      # cold read 1 B/s + copy
    assert t_prep(8, "disk_raw", toy_machine, warm=True).total_s == 2.0 + 4.0
    p = t_prep(8, "disk_compressed", toy_machine, codec=codec)
    assert (p.read_s, p.unpack_s, p.copy_s) == (4.0, 2.0, 4.0)


def test_compression_pays_both_ways():
    # saves (10-7)/1 = 3 s of reading
    assert compression_pays(10, 7, 1.0, unpack_s=2.9)
    assert not compression_pays(10, 7, 1.0, unpack_s=3.1)


def test_compression_pays_matches_t_prep(toy_machine):
    fast = Codec(ratio=0.5, unpack_bytes_per_s=8.0)
    raw = t_prep(8, "disk_raw", toy_machine).total_s
    cmp_ = t_prep(8, "disk_compressed", toy_machine, codec=fast).total_s
    assert compression_pays(8, 4, 1.0, 8 / 8.0) == (cmp_ < raw)


def test_roofline():
    assert roofline_s(1e12, 1e9, 1e12, 1e9, 0.5) == pytest.approx(1.5)
    assert roofline_s(2e12, 1e9, 1e12, 1e9) == pytest.approx(2.0)


def test_laptop_qwen_layer_read_and_copy():
    from hwmodels import get_machine
    from sim.model.resolve import load_model
    m, q = get_machine("rtx3080-laptop"), load_model("qwen3-14b")
    p = t_prep(q.unit("model.layers.0").nbytes, "disk_raw", m)
    assert p.read_s == pytest.approx(0.29, abs=0.01)
    assert 0.02 <= p.copy_s <= 0.03
