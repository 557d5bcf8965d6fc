"""whatif and pareto from the command line: grids, ranking, figures, bad input."""
import json

import pytest

from hwmodels.units import InputError
from offloadsim.cli import main
from planner.whatif import parse_vary


def test_whatif_grid_and_ranking(capsys, tmp_path):
    rc = main(["whatif", "qwen3-14b", "--machine", "rtx3080-laptop", "--vary", "link=pcie4,pcie3,pcie5",
               "--vary", "vram=4GiB,6GiB", "--json", "--workers", "1", "--plot", str(tmp_path / "w.png")])
    data = json.loads(capsys.readouterr().out)
    assert rc == 0 and len(data["rows"]) == 6
    ups = {u["change"]: u["speedup"] for u in data["upgrades"]}
    assert set(ups) == {"link=pcie3", "link=pcie5", "vram=6GiB"}  # both VRAM values fit the 7.45 GiB GPU
    assert ups["vram=6GiB"] >= 1.0 and ups["link=pcie3"] <= 1.0 + 1e-9  # more VRAM never slower, a slower link never faster
    assert list(ups.values()) == sorted(ups.values(), reverse=True)
    assert (tmp_path / "w.png").stat().st_size > 1000


def test_whatif_text_names_why_a_row_is_infeasible(capsys):
    """rtx3080-laptop's GPU holds 8 GiB: a 12 GiB budget row says so, as its JSON row's reason does."""
    rc = main(["whatif", "llama-3.1-8b", "--machine", "rtx3080-laptop", "--vary", "vram=4GiB,12GiB", "--new-tokens",
               "2", "--workers", "1"])
    text = capsys.readouterr().out
    row = next(line for line in text.splitlines() if line.strip().startswith("12GiB"))
    assert rc == 0 and "infeasible: " in row and "vram" in row.split("infeasible: ")[1]


def test_whatif_bad_vary(capsys):
    rc = main(["whatif", "qwen3-14b", "--vary", "disk=fast"])
    assert rc == 2 and "vary: 'disk=fast'" in capsys.readouterr().err
    rc = main(["whatif", "qwen3-14b", "--vary", "storage=floppy"])
    assert rc == 2 and "unknown name 'floppy'" in capsys.readouterr().err


def test_parse_vary_refuses_an_empty_value_list():
    with pytest.raises(InputError, match=r"vary: 'storage=,' names no value for storage; .* e\.g\. storage=sata"):
        parse_vary(["storage=,"])


def test_pareto(capsys, tmp_path):
    rc = main(["pareto", "qwen3-14b", "--machine", "rtx3080-laptop", "--points", "2", "--new-tokens", "3",
               "--chart", str(tmp_path / "p.png"), "--json"])
    data = json.loads(capsys.readouterr().out)
    assert rc == 0 and len(data["by_vram"]) == 2 and (tmp_path / "p.png").exists()
    for row in data["by_vram"]:
        others = [v for k, v in row.items() if k not in ("vram_bytes", "planner") and v]
        assert row["planner"] <= min(others) * (1 + 1e-6)


def test_pareto_writes_no_file_unless_asked_and_shows_progress(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    rc = main(["pareto", "llama-3.1-8b", "--machine", "rtx3080-laptop", "--points", "2", "--new-tokens", "2"])
    out, err = capsys.readouterr()
    assert rc == 0 and list(tmp_path.iterdir()) == []
    assert "--chart FILE.png" in out and "pareto (budgets planned)" in err and "4/4" in err  # 2 VRAM + 2 RAM budgets


def test_sweep_arguments_refused_with_one_sentence(capsys):
    for argv, match in ((["whatif", "qwen3-14b"], "vary: nothing to vary"),
                        (["whatif", "qwen3-14b", "--vary", "link=pcie4", "--workers", "0"], "workers: 0 must be at least 1"),
                        (["pareto", "qwen3-14b", "--points", "1"], "points: 1 budgets cannot draw a curve")):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert match in err and "Traceback" not in err


def test_whatif_link_lanes_change_the_copy_speed():
    """Modelling bug 4: pcie4x1 was planned as pcie4x16. A x1 link has 1/16 of the x16 preset's pinned speed."""
    from hwmodels.presets import load_machine
    from planner.whatif import variant
    m = load_machine("rtx3080-laptop")
    x16, _ = variant(m, {"link": "pcie4x16"})
    x1, _ = variant(m, {"link": "pcie4x1"})
    assert x1.link.pinned_h2d_bytes_per_s == x16.link.pinned_h2d_bytes_per_s / 16
    assert x1.link.pageable_h2d_bytes_per_s <= x1.link.pinned_h2d_bytes_per_s
    assert x1.link.lanes == 1 and x16.link.lanes == 16


def test_whatif_rows_are_monotone_in_vram_ram_and_link():
    """A combination with more VRAM or a faster link (the rest equal) that the quick planner scored slower takes its
    smaller neighbour's plan and time; the chain carries through. Hand-built rows: 4 GiB 1.5 s, 6 GiB 2.0 s (the quick
    planner's miss), 8 GiB 1.8 s; a VRAM beyond the GPU stays infeasible."""
    from hwmodels.presets import load_machine
    from planner.whatif import monotone
    m = load_machine("rtx3080-laptop")

    def row(v, link, t):
        return {"combo": {"vram": v, "link": link}, "feasible": True, "policy": f"p{v}{link}", "ttft_s": t,
                "time_per_token_s": t, "tokens_per_s": 1 / t, "bottleneck": "copy"}
    rows = [row("6GiB", "pcie4", 2.0), row("4GiB", "pcie4", 1.5), row("8GiB", "pcie4", 1.8),
            row("4GiB", "pcie5", 1.6), row("6GiB", "pcie5", 1.2), row("8GiB", "pcie5", 1.3),
            {"combo": {"vram": "16GiB", "link": "pcie4"}, "feasible": False, "reason": "vram beyond the GPU"},
            {"combo": {"vram": "16GiB", "link": "pcie5"}, "feasible": False, "reason": "vram beyond the GPU"}]
    vary = {"vram": ["6GiB", "4GiB", "8GiB", "16GiB"], "link": ["pcie4", "pcie5"]}
    monotone(rows, ["vram", "link"], vary, m)
    t = {(r["combo"]["vram"], r["combo"]["link"]): r.get("time_per_token_s") for r in rows}
    assert t[("6GiB", "pcie4")] == 1.5 and t[("8GiB", "pcie4")] == 1.5             # from 4 GiB, through 6 GiB
    assert rows[0]["plan_from"] == {"vram": "4GiB", "link": "pcie4"} == rows[2]["plan_from"]
    assert t[("4GiB", "pcie5")] == 1.5                                               # the faster link: at most pcie4's
    assert t[("6GiB", "pcie5")] == 1.2 and t[("8GiB", "pcie5")] == 1.2
    assert t[("16GiB", "pcie4")] is None and not rows[6]["feasible"]
