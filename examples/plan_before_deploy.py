"""Plan before you deploy: plan Qwen3-14B for a 4 GiB GPU on the laptop, export the Accelerate device map and the
llama.cpp arguments, then run the same kind of plan for real on a tiny random Qwen3 checkpoint with this machine's CPU
as the device (tokens and logits bit-identical to the all-resident run). Writes plan_before_deploy.png.

The first half needs only `pip install -e .`; the second runs offloadsim's PyTorch engine and needs the validate
extra (`pip install -e '.[validate]'`: torch, transformers, zstandard); without it the example says so and stops
after the first half.

The predicted and measured times of the second half are NOT a test of the prediction: the prediction is for the
rtx3080-laptop's GPU and PCIe link, while the run uses this CPU as its device (copies are host copies, layers run
on CPU cores, and a tiny model's time is Python overhead). What the second half checks is the workflow and that
streaming changes no token. To test a prediction, run `offloadsim validate` on a GPU with a profile of that machine
(`offloadsim calibrate`), as docs/guide.md describes."""
import importlib.util
import json
import sys
import tempfile
from pathlib import Path

from _common import figure, result
from hwmodels import get_machine
from hwmodels.units import GiB
from planner import plan_with_report
from planner.export import export_plan
from sim.model.resolve import load_model
from sim.plan import Budgets, Workload

machine, model = get_machine("rtx3080-laptop"), load_model("qwen3-14b")
w = Workload(prompt_tokens=128, new_tokens=8)
budgets = Budgets.of(machine, vram=4 * GiB)
rep = plan_with_report(model, machine, w, budgets, time_budget_s=1.0)
plan = rep.plan
acc = export_plan("accelerate", model, plan, w, machine, budgets)
llama = export_plan("llamacpp", model, plan, w, machine, budgets)
print(f"Qwen3-14B at 4 GiB on rtx3080-laptop: {rep.summary['time_per_token_s']:.3f} s/token predicted")
print("accelerate max_memory:", json.dumps(acc["max_memory"]), f"({sum(1 for v in acc['device_map'].values() if v == 0)} modules on GPU 0)")
print("llama.cpp:", llama["command"])
for note in acc["notes"] + llama["notes"]:
    print("note:", note)

missing = [m for m in ("torch", "transformers", "zstandard") if importlib.util.find_spec(m) is None]
if missing:
    print(f"stopping before the engine run: it needs {', '.join(missing)} (pip install -e '.[validate]').")
    result(time_per_token_s=rep.summary["time_per_token_s"], max_memory=acc["max_memory"], llamacpp_args=llama["args"],
           exact=None)
    sys.exit(0)

# the same plan shape, run for real on a tiny checkpoint with the CPU as the device
from validate.checkpoint import make_checkpoint, make_config  # noqa: E402
from validate.engine import Engine  # noqa: E402
from validate.report import reference_run, validate_plan  # noqa: E402
from validate.store import build_store  # noqa: E402

with tempfile.TemporaryDirectory() as tmp:
    ckpt = make_checkpoint(make_config("qwen3-14b", num_hidden_layers=6, hidden_size=256, intermediate_size=768,
                                       num_attention_heads=4, num_key_value_heads=2, vocab_size=2048), Path(tmp) / "ckpt")
    tiny = load_model(str(ckpt))
    store = Path(tmp) / "store"
    build_store(ckpt, tiny, store, threads=2)
    tw = Workload(prompt_tokens=16, new_tokens=6)
    from sim.costs.memory import min_vram_bytes  # noqa: E402
    # as at 4 GiB for the real model: room for a few resident layers above the minimum
    tb = Budgets(vram_bytes=min_vram_bytes(tiny, tw) + tiny.total_bytes // 4, ram_bytes=4 * tiny.total_bytes,
                 pinned_bytes=2 * tiny.total_bytes)
    tiny_rep = plan_with_report(tiny, machine, tw, tb, time_budget_s=0.5, allow_cpu=False)
    cfg = json.loads((ckpt / "config.json").read_text())
    ref = reference_run(store, cfg, tiny, machine, tw, "cpu")
    vrep, run, pred = validate_plan(Engine(store, cfg, tiny, tiny_rep.plan, machine, "cpu"), tiny, machine,
                                    tiny_rep.plan, tw, tb, cold=True, reference=ref)
    from validate.report import overlay_gantt  # noqa: E402
    overlay_gantt(pred, run.events, figure("plan_before_deploy.png"),
                  "tiny Qwen3: predicted for the laptop's GPU (top) vs run on this CPU (bottom): not the same machine")
ex = vrep["exactness"]
print(f"tiny checkpoint, this CPU as the device: tokens identical {ex['tokens_identical']}, logits bit-identical "
      f"{ex['logits_bit_identical']}")
print(f"times (not comparable: predicted for rtx3080-laptop's GPU, measured with this CPU as the device): predicted "
      f"{vrep['predicted']['time_per_token_s'] * 1e3:.2f} ms/token, measured "
      f"{vrep['measured']['time_per_token_s'] * 1e3:.2f} ms/token")
result(time_per_token_s=rep.summary["time_per_token_s"], max_memory=acc["max_memory"], llamacpp_args=llama["args"],
       exact=ex["logits_bit_identical"])
