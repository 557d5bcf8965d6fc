"""Hardware presets: every numeric value has a source, every file a source cites is in the repository; units parse
at the edges; the gap table."""
import re
from pathlib import Path

import pytest
from pydantic import ValidationError

from hwmodels import get_machine, list_machines, machine_sources, parse_bandwidth, parse_bytes, parse_link
from hwmodels.presets import get_part, part_names
from hwmodels.specs import StorageSpec, pcie_theoretical_bytes_per_s
from hwmodels.units import InputError
from offloadsim.hwreport import gap_rows, machine_detail

ROOT = Path(__file__).resolve().parent.parent
CITED_FILE = re.compile(r"[\w./{},-]+\.(?:json|jsonl|md|py|toml|csv|log|txt|png|svg)\b")


def test_units_parse_si_and_binary():
    assert parse_bytes("4GiB") == 4 * 2**30
    assert parse_bytes("24GB") == 24_000_000_000
    assert parse_bandwidth("2.3GB/s") == pytest.approx(2.3e9)
    assert parse_link("pcie4x16") == (4, 16)
    assert parse_link("pcie5") == (5, 16)


@pytest.mark.parametrize("fn, text, match", [
    (parse_bytes, "four gigs", "cannot read 'four gigs' as a size"),
    (parse_bandwidth, "0GB/s", "must be positive"),
    (parse_bandwidth, "-1GB/s", "cannot read|must be positive"),
    (parse_link, "pcie9", "cannot read 'pcie9'"),
])
def test_units_reject_bad_input(fn, text, match):
    with pytest.raises(InputError, match=match):
        fn(text)


def test_spec_rejects_zero_bandwidth():
    with pytest.raises(ValidationError):
        StorageSpec(name="x", cold_read_bytes_per_s=0, cache_read_bytes_per_s=1, write_bytes_per_s=1,
                    request_latency_s=0, queue_depth=1)


def test_required_machines_exist():
    assert {"rtx3080-laptop", "xeon-4090", "desktop-4090", "t4-cloud", "h200-testbox"} <= set(list_machines())


@pytest.mark.parametrize("name", list_machines())
def test_every_numeric_machine_value_has_a_source(name):
    m = get_machine(name)
    sources = machine_sources(name)
    for part in ("gpu", "link", "storage", "host_memory", "cpu"):
        for field, value in getattr(m, part).model_dump().items():
            if isinstance(value, (int, float, dict)) and not isinstance(value, bool) and value is not None:
                assert sources.get(f"{part}.{field}"), f"{name}: {part}.{field} has no source"


@pytest.mark.parametrize("kind", ["gpu", "link", "storage", "host_memory", "cpu"])
def test_every_part_preset_value_has_a_source(kind):
    for name in part_names(kind):
        spec, sources = get_part(kind, name)
        for field, value in spec.model_dump().items():
            if isinstance(value, (int, float, dict)) and not isinstance(value, bool) and value is not None:
                assert sources.get(f"{kind}.{field}"), f"{kind} {name}: {field} has no source"


def cited_files(text: str) -> list[str]:
    """The file paths a source cites, a `{a,b}` group expanded: 'x (lab/d/m-{k,l}.json)' -> lab/d/m-k.json, m-l.json."""
    out = []
    for path in CITED_FILE.findall(text):
        group = re.fullmatch(r"(.*)\{([^}]*)\}(.*)", path)
        out += [group[1] + alt + group[3] for alt in group[2].split(",")] if group else [path]
    return out


def test_cited_files_are_found_in_a_source():
    assert cited_files("[M] fitted (lab/data/m/matrix-{k,l}.json, batch 1) and tests/test_x.py; 2.3GB/s; NVIDIA/nccl") \
        == ["lab/data/m/matrix-k.json", "lab/data/m/matrix-l.json", "tests/test_x.py"]
    assert cited_files("[M] nproc = 16, h200-probe.json") == ["h200-probe.json"]  # a bare name: not at the root


@pytest.mark.parametrize("name", list_machines())
def test_every_file_hw_show_cites_is_in_the_repository(name):
    detail = machine_detail(name)
    texts = [detail["description"]] + [v["source"] for v in detail["values"]]
    cited = {f for text in texts for f in cited_files(text)}
    assert [f for f in sorted(cited) if not (ROOT / f).is_file()] == []


@pytest.mark.parametrize("kind", ["gpu", "link", "storage", "host_memory", "cpu"])
def test_every_file_a_part_preset_cites_is_in_the_repository(kind):
    cited = {f for name in part_names(kind) for text in get_part(kind, name)[1].values() for f in cited_files(text)}
    assert [f for f in sorted(cited) if not (ROOT / f).is_file()] == []


def test_required_gpus_and_storage_present():
    gpus = set(part_names("gpu"))
    assert {"t4", "v100", "rtx3080-laptop", "rtx3090", "rtx4090", "rtx5090", "a100-40gb", "a100-80gb", "h100-sxm",
            "h100-pcie", "h200", "b200", "l4", "a10", "p100", "gtx1080"} <= gpus
    assert {"sata", "nvme-gen3", "nvme-gen4", "nvme-gen5", "raid0-4x-gen4"} <= set(part_names("storage"))
    assert {"pcie3x16", "pcie4x16", "pcie5x16", "pcie6x16"} <= set(part_names("link"))


def test_pcie_theoretical_rates():
    assert pcie_theoretical_bytes_per_s(3, 16) == pytest.approx(15.75e9, rel=1e-3)
    assert pcie_theoretical_bytes_per_s(4, 16) == pytest.approx(31.5e9, rel=1e-3)
    assert pcie_theoretical_bytes_per_s(5, 16) == pytest.approx(63.0e9, rel=1e-3)


# The ratio table of lab/data/reference/hardware-facts.md: GPU -> (x theoretical, x measured)
FACTS = {"gtx1080": (20, 26), "p100": (46, 60), "rtx3090": (30, 37), "a100-80gb": (65, 81), "rtx4090": (32, 42),
         "h100-sxm": (53, 60), "h200": (76, 86), "rtx5090": (28, 32), "b200": (127, None)}


def test_gap_reproduces_hardware_facts_table():
    rows = {r["gpu"]: r for r in gap_rows()}
    for gpu, (theor, meas) in FACTS.items():
        assert abs(rows[gpu]["ratio_datasheet"] - theor) <= 1.0, gpu
        if meas is None:
            assert rows[gpu]["ratio_measured"] is None
        else:
            assert abs(rows[gpu]["ratio_measured"] - meas) <= 1.5, gpu


def test_gap_uses_each_cards_own_lanes_and_keeps_datasheet_apart_from_measured():
    """An x8 card's datasheet link is half an x16's: RTX 4060 Laptop, PCIe 4.0 x8 = 8 x 16 GT/s x 128/130 / 8 bits
    = 15.75 GB/s, 256 / 15.75 = 16.3x. GH200's host link is NVLink-C2C, a datasheet peak (450 GB/s per direction,
    4000 / 450 = 8.9x) in the datasheet column; its measured column stays empty. Every measured figure has a source
    marked [M]."""
    rows = {r["gpu"]: r for r in gap_rows()}
    lap = rows["rtx4060-laptop"]
    assert lap["link"] == "PCIe 4.0 x8" and lap["link_datasheet_bytes_per_s"] == pytest.approx(15.754e9, rel=1e-3)
    assert lap["ratio_datasheet"] == pytest.approx(16.25, abs=0.01)
    gh = rows["gh200"]
    assert gh["link"] == "NVLink-C2C" and gh["link_datasheet_bytes_per_s"] == 450e9
    assert gh["ratio_datasheet"] == pytest.approx(8.89, abs=0.01) and gh["measured_h2d_bytes_per_s"] is None
    assert gh["ratio_measured"] is None and "[D]" in gh["link_datasheet_source"]
    assert all(r["measured_source"].startswith("[M]") for r in rows.values() if r["measured_h2d_bytes_per_s"])


def test_unknown_machine_suggests():
    with pytest.raises(InputError, match="did you mean.*rtx3080-laptop"):
        get_machine("rtx3080-laptp")


def test_override_keeps_source_trail():
    m = get_machine("desktop-4090").with_overrides(**{"storage.cold_read_bytes_per_s": 14.5e9})
    assert m.storage.cold_read_bytes_per_s == 14.5e9
    assert m.sources["storage.cold_read_bytes_per_s"] == "user override"
