"""offloadsim's own engine as a text generator (`offloadsim run`): a checkpoint, its own tokenizer and chat template,
a plan's placements, greedy or sampled decoding, tokens streamed as they are made, and the measured speed beside the
plan's prediction for the same request.

    from validate.runner import Runner
    runner = Runner.load("ckpt", "plan.json", machine="rtx3080-laptop")
    out = runner.generate("The capital of France is", max_new_tokens=32, stream=sys.stdout)
    print(out.time_per_token_s, out.predicted["time_per_token_s"])
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

import torch

from hwmodels.presets import load_machine
from hwmodels.specs import MachineSpec
from hwmodels.units import InputError
from sim.model.resolve import load_model
from sim.model.shapes import ModelShape
from sim.plan import Budgets, Plan, Workload
from sim.run.simulate import simulate
from validate.decoding import Decoding, Sampler
from validate.sampling import Sampling
from validate.engine import Engine
from validate.store import build_store, check_store


@dataclass
class Generation:
    """What one `generate` returns: the text and token ids made (a stop token excluded), the measured times and the
    plan's prediction for the same request (prompt length and tokens made)."""
    text: str
    token_ids: list[int]
    prompt_tokens: int
    ttft_s: float
    time_per_token_s: float
    predicted: dict = field(default_factory=dict)
    stopped: bool = False  # ended on a stop token before max_new_tokens

    def to_dict(self) -> dict:
        return {"text": self.text, "token_ids": self.token_ids, "prompt_tokens": self.prompt_tokens,
                "new_tokens": len(self.token_ids), "stopped_on_eos": self.stopped,
                "measured": {"ttft_s": self.ttft_s, "time_per_token_s": self.time_per_token_s},
                "predicted": self.predicted}


def load_tokenizer(checkpoint: Path):
    """The checkpoint's own tokenizer (transformers AutoTokenizer, local files only)."""
    from transformers import AutoTokenizer
    if not any((checkpoint / f).exists() for f in ("tokenizer.json", "tokenizer_config.json", "tokenizer.model")):
        raise InputError(f"checkpoint: {str(checkpoint)!r} has no tokenizer (tokenizer.json or tokenizer_config.json); "
                         "copy the model's tokenizer files into the folder.")
    return AutoTokenizer.from_pretrained(checkpoint, local_files_only=True)


def read_plan(plan: str | Path, shape: ModelShape, checkpoint: Path) -> Plan:
    """A plan file made for this checkpoint's units (InputError naming the fix otherwise)."""
    path = Path(plan)
    if not path.is_file():
        raise InputError(f"plan: {str(plan)!r} does not exist; make one with 'offloadsim plan {checkpoint} --machine "
                         "M --out plan.json'.")
    p = Plan.load(path)
    if [x.unit for x in p.placements] != [u.name for u in shape.units]:
        raise InputError(f"plan: {str(plan)!r} was made for model {p.model!r}, not this checkpoint; make it with "
                         f"'offloadsim plan {checkpoint} --machine M --out plan.json'.")
    if not p.feasible:
        raise InputError(f"plan: {str(plan)!r} is infeasible ({p.reason}); make a feasible one.")
    return p


class Runner:
    """A checkpoint's weights placed as a plan says, ready to generate; `load` builds the layer store once."""

    def __init__(self, checkpoint: Path, shape: ModelShape, plan: Plan, machine: MachineSpec, engine: Engine,
                 tokenizer):
        self.checkpoint, self.shape, self.plan, self.machine = checkpoint, shape, plan, machine
        self.engine, self.tokenizer = engine, tokenizer

    @classmethod
    def load(cls, checkpoint: str | Path, plan: str | Path, machine: str | MachineSpec | None = None,
             device: str | None = None, store: str | Path | None = None) -> "Runner":
        """`machine`: what the prediction is made for (a preset, a profile JSON); default the plan's machine."""
        ckpt = Path(checkpoint)
        if not (ckpt / "config.json").is_file():
            raise InputError(f"checkpoint: {str(checkpoint)!r} is not a Hugging Face checkpoint folder (no config.json); "
                             "give the folder holding config.json and the safetensors.")
        shape = load_model(str(ckpt))
        the_plan = read_plan(plan, shape, ckpt)
        spec = machine if isinstance(machine, MachineSpec) else _machine(machine, the_plan)
        tokenizer = load_tokenizer(ckpt)
        folder = Path(store) if store is not None else ckpt / ".offloadsim-store"
        if (folder / "store.json").exists():
            check_store(folder, shape)
        else:
            build_store(ckpt, shape, folder)
        config = json.loads((ckpt / "config.json").read_text())
        engine = Engine(folder, config, shape, the_plan, spec, device)
        return cls(ckpt, shape, the_plan, spec, engine, tokenizer)

    def encode(self, prompt: str, chat: bool = False) -> list[int]:
        """The prompt's token ids; `chat` wraps it as one user message in the checkpoint's chat template."""
        if not prompt or not prompt.strip():
            raise InputError("prompt: it is empty; give the text to continue with --prompt TEXT.")
        tok = self.tokenizer
        if chat:
            if not getattr(tok, "chat_template", None):
                raise InputError(f"chat: the tokenizer of {self.checkpoint.name!r} has no chat template; leave --chat "
                                 "out to continue the prompt as plain text.")
            text = tok.apply_chat_template([{"role": "user", "content": prompt}], tokenize=False,
                                           add_generation_prompt=True)
            return list(tok(text, add_special_tokens=False)["input_ids"])
        return list(tok(prompt)["input_ids"])

    def stop_ids(self) -> frozenset[int]:
        """The end-of-sequence ids of the checkpoint's generation config and its tokenizer."""
        from transformers import GenerationConfig
        ids = set()
        try:
            eos = GenerationConfig.from_pretrained(self.checkpoint, local_files_only=True).eos_token_id
        except OSError:
            eos = None
        for x in ([eos] if isinstance(eos, int) else list(eos or [])) + [self.tokenizer.eos_token_id]:
            if x is not None and 0 <= x < self.shape.vocab:
                ids.add(int(x))
        return frozenset(ids)

    def generate(self, prompt: str, max_new_tokens: int = 64, sampling: Sampling = Sampling(), chat: bool = False,
                 stream: TextIO | None = None, cold: bool = False, ignore_eos: bool = False) -> Generation:
        """Generate up to `max_new_tokens` after `prompt`, writing the text to `stream` as it is made; ends early
        on an end-of-sequence token unless `ignore_eos`. Raises InputError on an empty prompt or bad sampling
        values."""
        sampling.check()
        ids = self.encode(prompt, chat)
        w = Workload(batch=1, prompt_tokens=len(ids), new_tokens=max_new_tokens, warm=not cold)
        streamer = text_streamer(self.tokenizer, stream) if stream is not None else None
        head = self.engine.devices[self.engine.gpu_of[self.engine.shape.units[-1].name]]  # where the logits are
        sampler = Sampler(sampling.temperature, sampling.top_p, sampling.seed, head) if sampling.temperature > 0 else None
        stops = frozenset() if ignore_eos else self.stop_ids()
        decoding = Decoding(sampler, (lambda step, t: streamer.put(torch.tensor([t]))) if streamer else None, stops)
        run = self.engine.run(w, torch.tensor([ids]), cold=cold, decoding=decoding)
        if streamer is not None:
            streamer.end()
        made = decoding.handed
        stopped = bool(made) and made[-1] in stops
        tokens = made[:-1] if stopped else made
        text = self.tokenizer.decode(tokens, skip_special_tokens=True)
        steps = int(run.tokens.shape[1])  # the steps computed and timed (a few may follow a stop token)
        return Generation(text, tokens, len(ids), run.ttft_s, run.time_per_token_s,
                          self.predict(len(ids), steps, cold), stopped)

    def predict(self, prompt_tokens: int, new_tokens: int, cold: bool = False) -> dict:
        """The simulator's first token and time per token for this plan and request, on the runner's machine
        (budgets: the machine's defaults)."""
        w = Workload(batch=1, prompt_tokens=prompt_tokens, new_tokens=new_tokens, warm=not cold)
        s = simulate(self.shape, self.machine, self.plan, w, Budgets.of(self.machine)).summary
        return {"ttft_s": s["ttft_s"], "time_per_token_s": s["time_per_token_s"], "machine": self.machine.name}


def _machine(name: str | None, plan: Plan) -> MachineSpec:
    """The machine named, else the plan's own when it is a preset or a profile file here."""
    if name is not None:
        return load_machine(name)
    try:
        return load_machine(plan.machine)
    except InputError:
        raise InputError(f"machine: the plan was made for {plan.machine!r}, which is no preset or profile file here; "
                         "give --machine PRESET or PROFILE.json for the prediction.") from None


def text_streamer(tokenizer, out: TextIO):
    """transformers' TextStreamer (incremental decoding at word boundaries) writing to `out`."""
    from transformers import TextStreamer

    class Streamer(TextStreamer):
        def on_finalized_text(self, text: str, stream_end: bool = False) -> None:
            out.write(text + ("\n" if stream_end else ""))
            out.flush()

    return Streamer(tokenizer, skip_special_tokens=True)
