"""A Hugging Face id as MODEL, against a stand-in Hub on localhost (no internet): the shape equals the same files' as a
local folder, only header bytes are ever asked for, the cache serves offline, and refusals are one sentence.

The stand-in serves what huggingface_hub asks for on this path: `GET /api/models/{repo}/revision/{rev}` (the commit
and the files with their sizes), `HEAD` and `GET /{repo}/resolve/{commit}/{file}` with `X-Repo-Commit` and `ETag`,
and `Range: bytes=a-b` requests answered 206."""
from __future__ import annotations

import hashlib
import json
import os
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import numpy as np
import pytest

from hwmodels.units import InputError
from offloadsim.cli import main
from sim.model.formats import parse_format
from sim.model.from_hub import is_hub_id, parse_hub_id
from sim.model.resolve import load_model

COMMIT = "0123456789abcdef0123456789abcdef01234567"
CONFIG = {"model_type": "llama", "hidden_size": 8, "intermediate_size": 16, "num_hidden_layers": 2,
          "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 4, "vocab_size": 32,
          "tie_word_embeddings": False}
# Hand-worked bytes: the embedding 32 x 8 F16 = 512; a layer: q 8x8, k 4x8, v 4x8, o 8x8, gate 16x8, up 16x8,
# down 8x16 = 576 F16 elements = 1152 bytes, + two F32 norms of 8 = 64 -> 1216; the head: 32 x 8 F16 + an F32 norm
# of 8 = 544.
UNIT_BYTES = {"model.embed_tokens": 512, "model.layers.0": 1216, "model.layers.1": 1216, "lm_head": 544}


def _layer(i: int, rng) -> dict:
    p = f"model.layers.{i}."
    shapes = {"self_attn.q_proj.weight": (8, 8), "self_attn.k_proj.weight": (4, 8), "self_attn.v_proj.weight": (4, 8),
              "self_attn.o_proj.weight": (8, 8), "mlp.gate_proj.weight": (16, 8), "mlp.up_proj.weight": (16, 8),
              "mlp.down_proj.weight": (8, 16)}
    out = {p + k: rng.standard_normal(s).astype(np.float16) for k, s in shapes.items()}
    out.update({p + n: np.ones(8, np.float32) for n in ("input_layernorm.weight", "post_attention_layernorm.weight")})
    return out


def write_checkpoint(folder, sharded: bool) -> None:
    """The toy model as safetensors: two shards and an index, or one model.safetensors."""
    from safetensors.numpy import save_file
    rng = np.random.default_rng(0)
    first = {"model.embed_tokens.weight": rng.standard_normal((32, 8)).astype(np.float16), **_layer(0, rng)}
    second = {**_layer(1, rng), "model.norm.weight": np.ones(8, np.float32),
              "lm_head.weight": rng.standard_normal((32, 8)).astype(np.float16)}
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps(CONFIG))
    if not sharded:
        save_file({**first, **second}, str(folder / "model.safetensors"), metadata={"format": "pt"})
        return
    names = ["model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"]
    for name, tensors in zip(names, (first, second)):
        save_file(tensors, str(folder / name), metadata={"format": "pt"})
    weight_map = {k: n for n, t in zip(names, (first, second)) for k in t}
    (folder / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))


class StandInHub:
    """A thread serving repos {id: folder} as the Hub does; `seen` logs (method, path, Range header)."""

    def __init__(self, repos: dict, refuse: tuple[int, str] | None = None):
        self.repos, self.refuse, self.seen = repos, refuse, []
        hub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_HEAD(self):
                hub.answer(self, body=False)

            def do_GET(self):
                hub.answer(self, body=True)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join()

    def answer(self, h: BaseHTTPRequestHandler, body: bool) -> None:
        path = h.path.split("?")[0]
        self.seen.append((h.command, path, h.headers.get("Range")))
        api = re.match(r"^/api/models/([^/]+/[^/]+)/revision/(.+)$", path)
        res = re.match(r"^/([^/]+/[^/]+)/resolve/([^/]+)/(.+)$", path)
        repo = (api or res).group(1) if api or res else None
        if self.refuse and repo:
            return self.send(h, self.refuse[0], b'{"error": "refused"}', {"X-Error-Code": self.refuse[1]}, body)
        if repo not in self.repos:
            return self.send(h, 404, b'{"error": "Repository not found"}', {"X-Error-Code": "RepoNotFound"}, body)
        folder = self.repos[repo]
        if api:
            siblings = [{"rfilename": f.name, "size": f.stat().st_size} for f in sorted(folder.iterdir())]
            info = {"id": repo, "sha": COMMIT, "siblings": siblings}
            return self.send(h, 200, json.dumps(info).encode(), {"Content-Type": "application/json"}, body)
        file = folder / res.group(3)
        if not file.is_file():
            return self.send(h, 404, b'{"error": "Entry not found"}', {"X-Error-Code": "EntryNotFound"}, body)
        data = file.read_bytes()
        extra = {"X-Repo-Commit": COMMIT, "ETag": f'"{hashlib.sha256(data).hexdigest()}"'}
        rng = re.match(r"^bytes=(\d+)-(\d+)$", h.headers.get("Range") or "")
        if rng:
            a, b = int(rng.group(1)), min(int(rng.group(2)), len(data) - 1)
            extra["Content-Range"] = f"bytes {a}-{b}/{len(data)}"
            return self.send(h, 206, data[a:b + 1], extra, body)
        return self.send(h, 200, data, extra, body)

    @staticmethod
    def send(h, status: int, data: bytes, headers: dict, body: bool) -> None:
        h.send_response(status)
        for k, v in {**headers, "Content-Length": str(len(data))}.items():
            h.send_header(k, v)
        h.end_headers()
        if body:
            h.wfile.write(data)


@pytest.fixture
def hub(tmp_path, monkeypatch):
    """The stand-in serving toy/sharded and toy/single, with HF_ENDPOINT and a fresh HF_HUB_CACHE pointing at it."""
    write_checkpoint(tmp_path / "sharded", sharded=True)
    write_checkpoint(tmp_path / "single", sharded=False)
    server = StandInHub({"toy/sharded": tmp_path / "sharded", "toy/single": tmp_path / "single"})
    monkeypatch.chdir(tmp_path)  # toy/... is no path here
    monkeypatch.setenv("HF_ENDPOINT", server.url)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf-cache"))
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.setattr(pytest.importorskip("huggingface_hub.constants"), "HF_HUB_DISABLE_TELEMETRY", True)
    yield server
    server.stop()


def _header_len(file) -> int:
    return int.from_bytes(file.read_bytes()[:8], "little")


@pytest.mark.parametrize("repo", ["toy/sharded", "toy/single"])
def test_a_hub_id_has_the_shape_of_the_same_files_as_a_folder(hub, tmp_path, repo):
    folder = tmp_path / repo.split("/")[1]
    from_hub, from_folder = load_model(repo), load_model(str(folder))
    assert from_hub.name == repo
    assert from_hub.units == from_folder.units
    assert {u.name: u.nbytes for u in from_hub.units} == UNIT_BYTES


def test_only_header_bytes_of_safetensors_files_are_asked_for(hub, tmp_path):
    load_model("toy/sharded")
    reads = [(p.rsplit("/", 1)[1], r) for m, p, r in hub.seen if p.endswith(".safetensors") and m == "GET"]
    assert sorted(f for f, _ in reads) == ["model-00001-of-00002.safetensors"] * 2 + \
        ["model-00002-of-00002.safetensors"] * 2  # the 8-byte length, then the header: two ranges each
    for name, rng in reads:
        a, b = map(int, rng.removeprefix("bytes=").split("-"))
        assert b < 8 + _header_len(tmp_path / "sharded" / name)
        assert (a, b) in ((0, 7), (8, 7 + _header_len(tmp_path / "sharded" / name)))
    assert not any(p.endswith(".safetensors") and m == "HEAD" for m, p, _ in hub.seen)
    assert all(re.match(r"^/api/models/toy/sharded/revision/main$|^/toy/sharded/resolve/", p) for _, p, _ in hub.seen)


def test_offline_the_second_resolve_uses_the_cache(hub, monkeypatch, tmp_path):
    first = load_model("toy/sharded")
    assert len(list((tmp_path / "hf-cache" / "offloadsim-headers").glob("toy--sharded--*.json"))) == 1
    assert list((tmp_path / "hf-cache").glob("models--toy--sharded/snapshots/*/config.json"))
    hub.stop()
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert load_model("toy/sharded").units == first.units
    monkeypatch.delenv("HF_HUB_OFFLINE")  # the Hub unreachable: the cache again
    assert load_model("toy/sharded").units == first.units


def test_the_second_resolve_online_reads_no_header_again(hub):
    load_model("toy/single")
    before = len([1 for _, p, _ in hub.seen if p.endswith(".safetensors")])
    load_model("toy/single")
    assert len([1 for _, p, _ in hub.seen if p.endswith(".safetensors")]) == before == 2


def test_unreachable_without_a_cache_is_one_sentence(hub):
    hub.stop()
    with pytest.raises(InputError, match=r"^model: cannot reach the Hugging Face Hub for 'toy/sharded' \(.*\) and it "
                                         r"is not in the cache; connect, set HF_ENDPOINT, or give a config.json path\.$"):
        load_model("toy/sharded")


def test_offline_without_a_cache_says_so(hub, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(InputError, match=r"HF_HUB_OFFLINE is set.*unset HF_HUB_OFFLINE"):
        load_model("toy/sharded")
    assert hub.seen == []


@pytest.mark.parametrize("refuse, says", [((401, "RepoNotFound"), "refused 'toy/sharded' (401)"),
                                          ((403, "GatedRepo"), "'toy/sharded' is a gated repo")])
def test_a_private_or_gated_repo_asks_for_a_login(hub, refuse, says):
    hub.refuse = refuse
    with pytest.raises(InputError) as err:
        load_model("toy/sharded")
    assert says in str(err.value) and "huggingface-cli login' or set HF_TOKEN" in str(err.value)
    assert "\n" not in str(err.value)


def test_unknown_repo_and_revision_are_one_sentence(hub):
    with pytest.raises(InputError, match="'toy/nothing' is neither an existing path nor a model on the Hugging Face"):
        load_model("toy/nothing")


@pytest.mark.parametrize("spec", ["a/b/c", "a//b", "/a", "a/", "owner/name@", "o/n@x..y", "a/" + "b" * 10_000,
                                  "-a/b", "a/b.git", "a--b/c"])
def test_bad_ids_are_refused_before_any_network(hub, spec):
    with pytest.raises(InputError) as err:
        load_model(spec)
    assert "\n" not in str(err.value) and len(str(err.value)) < 400
    assert hub.seen == []


def test_an_existing_path_wins_over_an_id(hub, tmp_path):
    write_checkpoint(tmp_path / "toy" / "local", sharded=False)
    assert not is_hub_id("toy/local") and is_hub_id("toy/sharded") and not is_hub_id("toy/config.json")
    assert load_model("toy/local").name == "local"
    assert hub.seen == []
    assert parse_hub_id("Qwen/Qwen3-14B@refs/pr/1") == ("Qwen/Qwen3-14B", "refs/pr/1")
    assert parse_hub_id("Qwen/Qwen3-14B") == ("Qwen/Qwen3-14B", "main")


def test_a_repo_without_safetensors_files_is_planned_from_its_config(hub, tmp_path):
    (tmp_path / "bare").mkdir()
    (tmp_path / "bare" / "config.json").write_text(json.dumps(CONFIG))
    hub.repos["toy/bare"] = tmp_path / "bare"
    shape = load_model("toy/bare", parse_format("int8"))
    assert shape.units == load_model(str(tmp_path / "bare" / "config.json"), parse_format("int8")).units
    assert not any(p.endswith(".safetensors") for _, p, _ in hub.seen)


def test_dtype_is_refused_for_a_hub_checkpoint(hub):
    with pytest.raises(InputError, match="^dtype: .*drop --dtype"):
        load_model("toy/single", parse_format("bf16"))


def test_plan_takes_a_hub_id(hub, capsys):
    assert main(["plan", "toy/single", "--gpu", "rtx4070", "--ram", "64GiB", "--storage", "nvme-gen4", "--vram",
                 "10GiB", "--new-tokens", "2", "--time-budget", "1"]) == 0
    assert "toy/single" in capsys.readouterr().out


def test_the_header_cache_stays_within_its_bound(tmp_path, monkeypatch):
    from sim.model import from_hub
    monkeypatch.setattr(from_hub, "MAX_CACHE_BYTES", 250)
    folder = tmp_path / "headers"
    for i in range(5):
        entry = {"repo": f"o/m{i}", "revision": "main", "commit": "c" * 40, "files": {}}  # 96 bytes as JSON
        from_hub._write_cache(folder / f"e{i}.json", entry)
        assert from_hub._read_cache(folder / f"e{i}.json", f"o/m{i}", "main") == entry
        os.utime(folder / f"e{i}.json", (1000 + i, 1000 + i))  # written in this order, whatever the clock's grain
    assert sorted(p.name for p in folder.iterdir()) == ["e3.json", "e4.json"]  # 2 x 96 <= 250 < 3 x 96


def test_calibrate_takes_a_hub_id_as_plan_does(hub, monkeypatch):
    """calibrate --model reads the config of a Hugging Face id (no weights) and times a layer of that shape."""
    import offloadsim.commands_validate as cv
    import validate.calibrate
    seen = {}

    def fake_calibrate(base, folder, cfg, quick, peers):
        seen["cfg"] = cfg
        raise SystemExit(0)
    monkeypatch.setattr(validate.calibrate, "calibrate", fake_calibrate)
    monkeypatch.setattr(cv, "need_torch", lambda what: None)
    with pytest.raises(SystemExit):
        main(["calibrate", "--model", "toy/single", "--out", str(hub.repos["toy/single"].parent / "p.json")])
    assert seen["cfg"]["hidden_size"] == CONFIG["hidden_size"]
