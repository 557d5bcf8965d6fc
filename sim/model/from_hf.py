"""Units from transformers' own model of a config: the model is built on the meta device (no memory, no
hub) and its parameters and persistent buffers are grouped into units, so a family without a hand table
(sim/model/families.py) can still be planned when transformers is installed.

Grouping: the input embeddings (token and position); each entry of the decoder ModuleList as a `decoder` unit, or, when it holds routed
experts (a module named `experts` whose weights have one slice per expert, or numbered children), an `attention` unit
(everything else in the block, router included), one `expert` unit per expert and a `shared-expert` unit for a
module named `shared_expert(s)`; everything else (final norm, output head) as the `lm_head` unit. Weights with two
or more dimensions are matrix parameters (quantizable), the rest small parameters. Attention FLOPs and KV bytes per
token come from the config's heads (grouped-query attention), as in the hand tables.
"""
from __future__ import annotations

import re
from collections import defaultdict

from hwmodels.units import InputError
from sim.model.formats import WeightFormat
from sim.model.shapes import ModelShape, UnitShape, make_unit

EXPERT_COUNT_KEYS = ("num_local_experts", "num_experts", "n_routed_experts")
SHARED_RE = re.compile(r"^(.*?shared_experts?)\.")


def check_known(model_type: str, source: str, tables: list[str]) -> None:
    """Refuse, in one sentence, a model_type that neither a table nor transformers' causal LMs cover."""
    try:
        import torch  # noqa: F401  (the model is built on torch's meta device)
        from transformers.models.auto.modeling_auto import (MODEL_FOR_CAUSAL_LM_MAPPING_NAMES,
                                                            MODEL_FOR_MASKED_LM_MAPPING_NAMES)
    except ImportError:
        raise InputError(f"{source}: model_type {model_type[:40]!r} has no built-in table (supported: "
                         f"{', '.join(tables)}); install transformers and torch (pip install 'offloadsim[validate]') "
                         "to read other families' layout from transformers.") from None
    if model_type in MODEL_FOR_MASKED_LM_MAPPING_NAMES:  # BERT-like: a decoder head on an encoder
        raise InputError(f"{source}: model_type {model_type[:40]!r} is not supported: it is an encoder (masked) language "
                         f"model; offloadsim plans decoder-only models: {', '.join(tables)} or any causal LM of "
                         "transformers.")
    if model_type not in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES:
        raise InputError(f"{source}: model_type {model_type[:40]!r} is not supported: it is not a causal language model "
                         f"that transformers knows; supported: {', '.join(tables)} or any causal LM of transformers.")


def _meta_model(cfg: dict, source: str, sized=None):
    """transformers' config of `cfg`, checked by `sized(conf)` before the model is built on the meta device."""
    import torch
    import transformers
    try:
        conf = transformers.AutoConfig.for_model(**{k: v for k, v in cfg.items() if not k.startswith("_")})
    except Exception as exc:  # transformers' own validation: any refusal is the config's
        raise InputError(f"{source}: transformers cannot read model_type {cfg.get('model_type')!r} from this config "
                         f"({type(exc).__name__}: {' '.join(str(exc).split())[:100]}); check the config.") from None
    if sized is not None:
        sized(conf)
    try:
        with torch.device("meta"):
            return transformers.AutoModelForCausalLM.from_config(conf)
    except Exception as exc:
        raise InputError(f"{source}: transformers cannot build model_type {cfg.get('model_type')!r} from this config "
                         f"({type(exc).__name__}: {' '.join(str(exc).split())[:100]}); check the config or give a "
                         "supported model.") from None


def _tensors(model) -> dict[str, tuple[int, ...]]:
    """Name -> shape of what a checkpoint stores: parameters (a tied weight once) and persistent buffers."""
    params = {n: tuple(p.shape) for n, p in model.named_parameters()}
    all_params = {n for n, _ in model.named_parameters(remove_duplicate=False)}
    buffers = {n: tuple(t.shape) for n, t in model.state_dict().items() if n not in all_params}
    return {**params, **buffers}


def _numel(shape: tuple[int, ...]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def _layers_prefix(model, n_layers: int) -> str:
    import torch
    for name, mod in model.named_modules():
        if isinstance(mod, torch.nn.ModuleList) and len(mod) == n_layers:
            return name
    raise InputError(f"transformers' {type(model).__name__} has no list of {n_layers} decoder layers; this family "
                     "needs a table in sim/model/families.py.")


SIZE_FIELDS = ("num_hidden_layers", "hidden_size", "num_attention_heads", "vocab_size")
MAX_UNITS = 50_000


def _check_sized(cfg: dict, conf, source: str) -> None:
    """The sizes must be in the config itself (transformers' defaults are not a model), within the unit limit."""
    t = cfg["model_type"]
    aliases = dict(getattr(conf, "attribute_map", {}))  # transformers name -> this family's alias
    for f in SIZE_FIELDS:
        if f not in cfg and aliases.get(f) not in cfg:
            alias = f" (or {aliases[f]!r})" if f in aliases else ""
            raise InputError(f"{source}: field {f!r}{alias} is missing for model_type {t!r}; add it as in the "
                             "model's original config.json.")
    n_exp = next((int(getattr(conf, k)) for k in EXPERT_COUNT_KEYS if getattr(conf, k, None)), 0)
    if int(conf.num_hidden_layers) * (n_exp + 2) > MAX_UNITS:
        raise InputError(f"{source}: field 'num_hidden_layers' is {conf.num_hidden_layers} with {n_exp} experts "
                         f"each, more than {MAX_UNITS:,} units; check the config.")


def _group(tensors: dict, prefix: str, embed: str) -> tuple[dict[int, dict[str, tuple]], dict, dict]:
    """Tensor shapes by decoder block (names relative to the block), the embeddings', and the rest (the head's)."""
    layer_re = re.compile(rf"^{re.escape(prefix)}\.(\d+)\.(.*)$")
    blocks: dict[int, dict[str, tuple]] = defaultdict(dict)
    emb: dict[str, tuple] = {}
    head: dict[str, tuple] = {}
    for name, shape in tensors.items():
        m = layer_re.match(name)
        if m:
            blocks[int(m.group(1))][m.group(2)] = shape
        elif name.startswith(embed + ".") or "embed" in name.rsplit(".", 1)[0]:  # token (and position) embeddings
            emb[name] = shape
        else:
            head[name] = shape
    return blocks, emb, head


def shape_from_transformers(cfg: dict, fmt: WeightFormat, source: str) -> ModelShape:
    """The ModelShape of `cfg` read from transformers' model (see the module doc). The sizes must be in the config
    (under transformers' names or their aliases, e.g. GPT-2's n_layer): transformers' defaults are not a model."""
    t = cfg["model_type"]
    model = _meta_model(cfg, source, lambda conf: _check_sized(cfg, conf, source))
    conf = model.config
    n_layers, h, vocab = int(conf.num_hidden_layers), int(conf.hidden_size), int(conf.vocab_size)
    n_exp = next((int(getattr(conf, k)) for k in EXPERT_COUNT_KEYS if getattr(conf, k, None)), 0)
    n_h = int(conf.num_attention_heads)
    n_kv = int(getattr(conf, "num_key_value_heads", None) or n_h)
    d = int(getattr(conf, "head_dim", None) or h // n_h)
    attn_flops, kv_bytes = 4 * n_h * d, 2 * n_kv * d * 2  # 16-bit KV cache, as the tables
    prefix = _layers_prefix(model, n_layers)
    embed = next(n for n, m in model.named_modules() if m is model.get_input_embeddings())
    tied = bool(getattr(model.config, "tie_word_embeddings", False))
    blocks, emb, head = _group(_tensors(model), prefix, embed)

    def split(ts: dict) -> dict:
        mats = [_numel(s) for s in ts.values() if len(s) >= 2]
        return dict(matrix_params=sum(mats), max_tensor_params=max(mats, default=0),
                    small_params=sum(_numel(s) for s in ts.values() if len(s) < 2))

    units: list[UnitShape] = []
    units.append(make_unit(fmt, name=embed, kind="embedding", block=-1, modules=(embed,), **split(emb), flop_params=0,
                           hidden=h))
    for i in range(n_layers):
        units += _block_units(fmt, f"{prefix}.{i}", i, blocks[i], n_exp, h, attn_flops, kv_bytes, split)
    sizes = split(head)
    head_modules = tuple(sorted({n.rsplit(".", 1)[0] for n in head}))
    lm = make_unit(fmt, name="lm_head", kind="lm_head", block=n_layers, modules=head_modules,
                   **dict(sizes, matrix_params=sizes["matrix_params"] or vocab * h,
                          max_tensor_params=sizes["max_tensor_params"] or vocab * h), hidden=h)
    if tied:  # the head reuses the embedding matrix: its bytes must still reach the GPU, its params count once
        lm = lm.model_copy(update={"matrix_params": 0, "tied_nbytes": fmt.matrix_nbytes(vocab * h)})
    units.append(lm)
    return ModelShape(name=cfg.get("_name_or_path") or t, family=t, weight_format=fmt, n_blocks=n_layers, hidden=h,
                      vocab=vocab, n_routed_experts=n_exp,
                      experts_per_token=int(getattr(conf, "num_experts_per_tok", 0) or 0) if n_exp else 0,
                      units=tuple(units))


def _block_units(fmt, name: str, i: int, ts: dict, n_exp: int, h: int, attn_flops: int, kv: int, split) -> list:
    common = dict(block=i, attn_flops_per_ctx_token=attn_flops, kv_bytes_per_token=kv, hidden=h)
    expert_re = re.compile(r"^(.*\bexperts)\.(?:(\d+)\.)?(.*)$")
    experts: dict[int, dict] = defaultdict(dict)
    shared: dict[str, tuple] = {}
    rest: dict[str, tuple] = {}
    where = ""
    for k, s in ts.items():
        m = expert_re.match(k)
        if n_exp and m and "shared" not in m.group(1):
            where = m.group(1)
            if m.group(2) is not None:  # one module per expert
                experts[int(m.group(2))][m.group(3)] = s
            elif s and s[0] == n_exp:  # fused: one slice per expert
                for e in range(n_exp):
                    experts[e][m.group(3)] = s[1:]
            else:
                rest[k] = s
        elif n_exp and SHARED_RE.match(k):
            shared[k] = s
        else:
            rest[k] = s
    if not experts:
        return [make_unit(fmt, name=name, kind="decoder", modules=(name,), **split(rest), **common)]
    out = [make_unit(fmt, name=name, kind="attention", modules=(name,), **split(rest), **common)]
    for e in range(n_exp):
        ename = f"{name}.{where}.{e}"
        out.append(make_unit(fmt, name=ename, kind="expert", block=i, expert=e, modules=(ename,), **split(experts[e]),
                             hidden=h))
    if shared:
        sname = name + "." + SHARED_RE.match(next(iter(shared))).group(1)
        out.append(make_unit(fmt, name=sname, kind="shared-expert", block=i, modules=(sname,), **split(shared),
                             hidden=h))
    return out
