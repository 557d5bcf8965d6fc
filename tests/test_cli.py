"""The CLI: JSON keys, tables, and one-sentence errors with exit code 2 for bad input."""
import json

import pytest

from offloadsim.cli import main


def run(capsys, *argv):
    rc = main(list(argv))
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_info_json_keys(capsys):
    rc, out, _ = run(capsys, "info", "qwen3-14b", "--machine", "rtx3080-laptop", "--json")
    data = json.loads(out)
    assert rc == 0 and data["total_bytes"] == 29_536_614_400
    layer = data["layers"][1]
    assert {"name", "kind", "nbytes", "t_prep_s"} <= set(layer)
    assert set(layer["t_prep_s"]) == {"vram", "ram_pinned", "ram_pageable", "ram_compressed", "disk_raw", "disk_compressed"}
    assert 12.5 < data["total_read_cold_s"] < 13.5
    assert data["total_copy_theoretical_s"] < 1.0


def test_info_text(capsys):
    rc, out, _ = run(capsys, "info", "mixtral-8x7b", "--machine", "desktop-4090")
    assert rc == 0 and "experts.0 (x8)" in out and "TOTAL" in out


def test_gap_and_hw(capsys):
    assert run(capsys, "gap")[0] == 0
    rc, out, _ = run(capsys, "hw", "show", "h200-testbox")
    assert rc == 0 and "h200-probe.json" in out


@pytest.mark.parametrize("argv, match", [
    (["info", "qwen3-15b"], "did you mean qwen3-14b"),
    (["info", "qwen3-14b", "--machine", "laptop"], "machine: unknown name 'laptop'"),
    (["info", "qwen3-14b", "--unpack-speed", "0GB/s"], "unpack-speed: '0GB/s' must be positive"),
    (["info", "qwen3-14b", "--unpack-speed", "fast"], "cannot read 'fast'"),
    (["info", "qwen3-14b", "--dtype", "fp5x"], "dtype: unknown weight format"),
    (["hw", "show", "nope"], "unknown name 'nope'"),
])
def test_bad_input_one_sentence(capsys, argv, match):
    rc, _, err = run(capsys, *argv)
    assert rc == 2 and match in err and "Traceback" not in err
    assert err.count("\n") == 1


def test_bad_config_and_folder(capsys, tmp_path):
    (tmp_path / "config.json").write_text('{"model_type": "bert"}')  # an encoder
    rc, _, err = run(capsys, "info", str(tmp_path / "config.json"))
    assert rc == 2 and "not supported" in err and err.count("\n") == 1
    (tmp_path / "config.json").write_text('{"model_type": "no-such-model"}')
    rc, _, err = run(capsys, "info", str(tmp_path / "config.json"))
    assert rc == 2 and "not supported" in err and err.count("\n") == 1
    folder = tmp_path / "ckpt"
    folder.mkdir()
    (folder / "config.json").write_text('{"model_type": "llama", "hidden_size": 64, "num_hidden_layers": 1, '
                                        '"intermediate_size": 128, "num_attention_heads": 4, "vocab_size": 10}')
    rc, _, err = run(capsys, "info", str(folder))
    assert rc == 2 and "no *.safetensors" in err
