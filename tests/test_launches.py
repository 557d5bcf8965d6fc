"""The launch counts of sim/model/shapes.py LAUNCHES, counted: the aten ops that launch a kernel in transformers' eager
forward of one decode step, attributed to each module by forward hooks (a small random Llama and Qwen3 on the CPU;
the same ops launch one kernel each on a GPU)."""
import pytest

from sim.model.families import shape_from_config
from sim.model.resolve import preset_config
from sim.model.shapes import LAUNCHES, QK_NORM_LAUNCHES

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402

NO_KERNEL = {"aten::view", "aten::_unsafe_view", "aten::t", "aten::transpose", "aten::expand", "aten::slice",
             "aten::unsqueeze", "aten::reshape", "aten::permute", "aten::select", "aten::detach", "aten::alias",
             "aten::as_strided", "aten::squeeze", "aten::split", "aten::empty", "aten::_reshape_alias",
             "aten::lift_fresh"}  # metadata-only ops


class _Count(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.module, self.counts = None, {}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if self.module is not None and func._schema.name not in NO_KERNEL:
            self.counts[self.module] = self.counts.get(self.module, 0) + 1
        return func(*args, **(kwargs or {}))


SMALL = dict(num_hidden_layers=2, hidden_size=256, intermediate_size=512, num_attention_heads=4, num_key_value_heads=2,
             head_dim=64, vocab_size=1000)


def _decode_launches(preset: str, modules: list[str]) -> dict[str, int]:
    cfg = dict(preset_config(preset), **SMALL)
    cfg.pop("rope_scaling", None)
    conf = transformers.AutoConfig.for_model(**{k: v for k, v in cfg.items() if not k.startswith("_")})
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(conf).eval()
    named = dict(model.named_modules())
    counter = _Count()
    for name in modules:  # top-level modules only (no nesting), so one module is counted at a time
        named[name].register_forward_pre_hook(lambda m, a, name=name: setattr(counter, "module", name))
        named[name].register_forward_hook(lambda m, a, o: setattr(counter, "module", None))
    with torch.no_grad():
        out = model(torch.randint(0, 1000, (1, 8)), use_cache=True)
        with counter:
            model(out.logits[:, -1:].argmax(-1), past_key_values=out.past_key_values, use_cache=True)
    return counter.counts, shape_from_config(cfg)


def test_llama_launches_counted():
    counts, shape = _decode_launches("llama-3.1-8b", ["model.embed_tokens", "model.layers.1", "model.norm", "lm_head"])
    assert counts["model.layers.1"] == LAUNCHES["decoder"] == shape.unit("model.layers.1").launches
    assert counts["model.embed_tokens"] == LAUNCHES["embedding"]
    assert counts["model.norm"] == LAUNCHES["norm"]
    assert counts["model.norm"] + counts["lm_head"] == LAUNCHES["lm_head"] == shape.unit("lm_head").launches


def test_qwen3_qk_norms_add_their_launches():
    counts, shape = _decode_launches("qwen3-14b", ["model.layers.1"])
    assert counts["model.layers.1"] == LAUNCHES["decoder"] + QK_NORM_LAUNCHES == shape.unit("model.layers.1").launches
