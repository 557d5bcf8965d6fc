"""Machine flags compose a machine from component presets; every value keeps its source."""
import json

import pytest

from hwmodels.presets import get_machine, get_part, part_names
from hwmodels.units import GiB
from offloadsim.cli import build_parser, main
from offloadsim.detect import gpu_preset_for
from offloadsim.machine_flags import compose


def _args(argv):
    return build_parser().parse_args(argv)


def test_gpu_flag_without_machine_composes_on_the_desktop_base_with_the_gpus_link():
    args = _args(["plan", "qwen3-14b", "--gpu", "rtx4070", "--ram", "64GiB", "--storage", "nvme-gen4"])
    m = args.machine.resolve()
    assert m.gpu.name == "GeForce RTX 4070" and m.gpu.vram_bytes == 12 * 10**9
    assert m.host_memory.capacity_bytes == 64 * GiB and m.sources["host_memory.capacity_bytes"] == "user"
    assert m.storage.cold_read_bytes_per_s == 7450e6
    assert m.link.name == "pcie4x16" and m.cpu == get_machine("desktop-4090").cpu
    assert m.sources["machine.base"].startswith("desktop-4090")
    assert args.ram_budget is None  # --ram is the installed RAM, the budget its default


def test_ram_is_always_the_installed_ram_and_ram_budget_the_budget():
    args = _args(["plan", "qwen3-14b", "--machine", "desktop-4090", "--ram", "32GiB", "--ram-budget", "20GiB"])
    m = args.machine.resolve()
    assert m.host_memory.capacity_bytes == 32 * GiB and args.ram_budget == "20GiB"
    from offloadsim.limits import budgets
    assert budgets(args, m).ram_bytes == 20 * GiB


def test_a_gpu_described_by_flags():
    """An RTX 4060 Ti 16 GB on PCIe 4.0 x8: the 4070 preset's compute, the given size, bandwidth and link."""
    m = _args(["plan", "qwen3-14b", "--gpu", "rtx4070", "--gpu-name", "RTX 4060 Ti 16GB", "--gpu-vram", "16GiB",
               "--gpu-bandwidth", "288GB/s", "--link", "pcie4x8"]).machine.resolve()
    assert (m.gpu.name, m.gpu.vram_bytes, m.gpu.vram_bytes_per_s) == ("RTX 4060 Ti 16GB", 16 * GiB, 288e9)
    assert m.link.lanes == 8 and m.sources["gpu.vram_bytes"] == "user"


@pytest.mark.parametrize("flags, says", [(["--ram-budget", "0"], "ram-budget: '0' is less than 64 KiB"),
                                         (["--vram", "1B"], "vram: '1B' is less than 64 KiB"),
                                         (["--vram", "1EiB"], "vram: '1EiB' is more than 1 PiB"),
                                         (["--gpu", "rtx4070", "--vram", "16GiB"], "--gpu-vram 16GiB")])
def test_budgets_out_of_range_are_one_sentence_with_the_fix(flags, says, capsys):
    assert main(["plan", "qwen3-14b", *flags, "--engine", "llamacpp"]) == 2
    err = capsys.readouterr().err
    assert says in err and err.count("\n") == 1


def test_flags_override_parts_of_the_named_machine_in_any_order():
    a = _args(["info", "qwen3-14b", "--storage", "sata", "--machine", "h200-testbox"]).machine.resolve()
    b = _args(["info", "qwen3-14b", "--machine", "h200-testbox", "--storage", "sata"]).machine.resolve()
    assert a == b
    base = get_machine("h200-testbox")
    assert a.storage == get_part("storage", "sata")[0] and a.gpu == base.gpu and a.link == base.link
    assert a.sources["storage.cold_read_bytes_per_s"] == get_part("storage", "sata")[1]["storage.cold_read_bytes_per_s"]
    assert a.sources["gpu.vram_bytes"] == "[M] nvidia-smi memory.total, lab/data/reference/h200-probe.json"


def test_link_lanes_scale_the_x16_preset():
    m = compose("desktop-4090", {"link": "pcie4x8"})
    x16 = get_part("link", "pcie4x16")[0]
    assert m.link.lanes == 8 and m.link.pinned_h2d_bytes_per_s == pytest.approx(x16.pinned_h2d_bytes_per_s / 2)
    assert m.link.pageable_h2d_bytes_per_s == pytest.approx(min(x16.pageable_h2d_bytes_per_s, 25.1e9 / 2))
    assert "8/16" in m.sources["link.pinned_h2d_bytes_per_s"]


def test_laptop_gpu_with_fewer_lanes_gets_its_own_link_on_the_laptop_base():
    m = compose("rtx3080-laptop", {"gpu": "rtx4060-laptop"}, base_named=False)
    assert m.link.name == "pcie4x8" and m.link.pinned_h2d_bytes_per_s == pytest.approx(25.1e9 / 2)


def test_storage_speed_is_sourced_user():
    m = compose("desktop-4090", {"storage": "3.5GB/s"})
    assert m.storage.cold_read_bytes_per_s == 3.5e9 and m.sources["storage.cold_read_bytes_per_s"] == "user"


@pytest.mark.parametrize("argv", [["--gpu", "rtx9999"], ["--storage", "floppy"], ["--link", "pcie9x16"],
                                  ["--ram", "lots"], ["--cpu", "z80"]])
def test_bad_flag_is_one_sentence(argv, capsys):
    assert main(["info", "qwen3-14b", *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("offloadsim: error:") and "Traceback" not in err and len(err.splitlines()) == 1


def test_every_added_part_value_has_a_source():
    for kind in ("gpu", "cpu", "storage", "host_memory"):
        for name in part_names(kind):
            spec, sources = get_part(kind, name)
            for field, value in spec.model_dump().items():
                if isinstance(value, (int, float)) and not isinstance(value, bool) and value is not None:
                    assert sources.get(f"{kind}.{field}"), f"{kind} {name}: {field} has no source"


def test_hw_show_composed_lists_sources(capsys):
    assert main(["hw", "show", "--gpu", "rtx4070", "--ram", "64GiB", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    by = {v["field"]: v for v in d["values"]}
    assert by["host_memory.capacity_bytes"]["value"] == 64 * GiB and by["host_memory.capacity_bytes"]["source"] == "user"
    assert "desktop-4090" in d["base"]


def test_plan_runs_on_a_composed_machine(capsys):
    assert main(["plan", "qwen3-14b", "--gpu", "rtx4070", "--ram", "64GiB", "--storage", "nvme-gen4", "--vram",
                 "10GiB", "--new-tokens", "2", "--time-budget", "1", "--json"]) == 0


def test_gpu_names_match_presets():
    assert gpu_preset_for("NVIDIA H200") == "h200"
    assert gpu_preset_for("NVIDIA GeForce RTX 4060 Laptop GPU") == "rtx4060-laptop"
    assert gpu_preset_for("NVIDIA A100-SXM4-80GB") == "a100-80gb"
    assert gpu_preset_for("Some Unknown Accelerator") is None


def test_hw_detect_writes_a_profile_that_loads(tmp_path, capsys):
    out = tmp_path / "me.json"
    assert main(["hw", "detect", "--out", str(out), "--disk-path", str(tmp_path), "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert any("RAM" in n for n in d["notes"])
    by = {v["field"]: v for v in d["values"]}
    assert by["host_memory.capacity_bytes"]["source"].startswith("[M]")
    assert main(["info", "qwen3-14b", "--machine", str(out), "--json"]) == 0


def test_hw_detect_honours_part_flags_and_its_json_loads_as_machine(tmp_path, capsys, monkeypatch):
    """Flags replace what detect finds (the disk probe skipped: its speeds are not what this pins); the JSON it
    prints loads back as --machine FILE with the same values."""
    import offloadsim.detect as detect
    monkeypatch.setattr(detect, "disk_speeds", lambda folder: None)
    assert main(["hw", "detect", "--gpu", "rtx4070", "--gpu-vram", "16GiB", "--link", "pcie4x8", "--ram", "64GiB",
                 "--json"]) == 0
    text = capsys.readouterr().out
    (tmp_path / "detect.json").write_text(text)
    m = json.loads(text)["machine"]
    assert (m["gpu"]["vram_bytes"], m["link"]["lanes"], m["host_memory"]["capacity_bytes"]) == (16 * GiB, 8, 64 * GiB)
    from hwmodels.presets import load_machine
    assert load_machine(str(tmp_path / "detect.json")).model_dump(mode="json") == m


@pytest.mark.parametrize("argv", [["desktop-4090"], ["--gpu", "rtx4070", "--ram", "64GiB", "--link", "pcie4x8"]])
def test_hw_show_json_loads_back_as_the_same_machine(argv, tmp_path, capsys):
    from hwmodels.presets import load_machine
    assert main(["hw", "show", *argv, "--json"]) == 0
    (tmp_path / "m.json").write_text(capsys.readouterr().out)
    assert main(["hw", "show", "--machine", str(tmp_path / "m.json"), "--json"]) == 0
    again = json.loads(capsys.readouterr().out)["machine"]
    assert load_machine(str(tmp_path / "m.json")).model_dump(mode="json") == again
