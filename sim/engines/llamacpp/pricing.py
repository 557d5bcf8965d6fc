"""llama.cpp's hooks in the schedule: its own kernels (sim.engines.llamacpp.graphs), ggml's op offload of CPU-held
weights on large steps, its CUDA graphs' warm-up, unfused attentions and the operators of an MoE block."""
from __future__ import annotations

from sim.costs.tiers import tier_row
from sim.engines.base import Kernels
from sim.engines.hosted import HostedPricing
from sim.engines.llamacpp.graphs import cpu_stream_bytes_per_s, ggml_flash_attention, graph_warmup_steps
from sim.model.shapes import ATTENTION_KINDS, GGML_MOE_WEIGHTS, ggml_moe_ops, ggml_ops, ggml_weights
from sim.run.steps import step_shape


class LlamacppPricing(HostedPricing):
    def __init__(self, model, machine, plan, w, costs):
        super().__init__(model, machine, plan, w, costs)
        c, t, units = costs, self.tiers, model.units
        self.fused = ggml_flash_attention(model, plan, c.flash_attention, c.flash_attn)
        self._kernels = self._own_kernels()
        memory = [tier_row(t[u.name].tier).cpu_memory for u in units]
        # op offload: a CPU-held unit multiplied on the GPU keeps its attention on the CPU, with its KV cache (the
        # GPU price of the unit still counts its attention there too: small beside the copy at these step sizes)
        self.offloaded = [t[u.name].compute == "cpu" and u.kind != "embedding" for u in units]
        split, pinned_split = c.gpu_offload_split_s, c.gpu_offload_split_pinned_s
        self.split_of = [pinned_split if m == "pinned" and pinned_split is not None else split for m in memory]
        prompt_split = c.gpu_offload_split_prompt_s  # a prompt's step: the mapped weights' own split cost
        self.prompt_split_of = [prompt_split if m == "pageable" and prompt_split is not None else x
                                for m, x in zip(memory, self.split_of)]
        self.attn_flops = self._kernels.cpu_flops or machine.cpu.flops_per_s
        # CUDA graphs: a step that warms one up launches its GPU units' operators one by one
        self.warmup_op_s = c.gpu_graph_warmup_op_s if self._kernels.dispatch == "graph" else 0.0
        self.warmup = set(graph_warmup_steps(w)) if self.warmup_op_s > 0 else set()
        self.warmup_s = [self.warmup_op_s * ggml_ops(u.kind, model.family) if t[u.name].compute == "gpu" else 0.0
                         for u in units]
        # an attention of a one-token step computed unfused: on the GPU, a build without fused kernels; on the CPU,
        # flash attention turned off (ggml_flash_attention)
        self.mm_attention = {cpu: [getattr(c, f"{dev}_mm_attention_s") if not self.fused[dev]
                                   and u.kind in ATTENTION_KINDS else 0.0 for u in units]
                             for cpu, dev in ((False, "gpu"), (True, "cpu"))}
        self.moe_ops = ggml_moe_ops(model.experts_per_token) if model.is_moe else 0

    def _own_kernels(self) -> Kernels:
        c, model, plan, machine = self.costs, self.model, self.plan, self.machine
        return Kernels(dispatch=c.gpu_dispatch, scale={True: c.cpu_compute_scale, False: c.gpu_compute_scale},
                       op_s={True: c.cpu_op_s, False: c.gpu_op_s}, row_s=c.gpu_row_s, cpu_row_s=c.cpu_row_s,
                       multi=(c.gpu_multi_row_s, c.gpu_row_token_s) if c.gpu_row_token_s is not None else None,
                       cpu_flops=c.cpu_flops_per_s, cpu_fused=self.fused["cpu"],
                       stream={kind: cpu_stream_bytes_per_s(model, plan, machine, c, kind)
                               for kind in ("decoder", "lm_head")},
                       last_only=c.head_last_position)

    def kernels(self) -> Kernels:
        return self._kernels

    def moe_block_s(self, ui: int, cpu: bool, s: int, decode: bool) -> float:
        """The operators of a block's routed experts (sim.model.shapes.ggml_moe_ops), priced with its first expert to
        run in the step: on the device that runs them, a split per fused weight when offloaded, a graph warm-up."""
        op = self._kernels.op_s[cpu] or 0.0
        split_s = (self.split_of if decode else self.prompt_split_of)[ui]
        on_gpu = self.tiers[self.model.units[ui].name].compute == "gpu"
        return self.moe_ops * (op + (self.warmup_op_s if not cpu and s in self.warmup and on_gpu else 0.0)) \
            + (split_s * GGML_MOE_WEIGHTS if self.offloaded[ui] and not cpu else 0.0) \
            + (self.costs.gpu_moe_expert_s * self.model.n_routed_experts if not cpu and decode else 0.0)

    def compute_s(self, ui: int, cpu: bool, base_s: float, shape: tuple[int, int, int], s: int,
                  first_expert: bool) -> float:
        batch, new, ctx = shape
        decode = step_shape(self.w, False, s)[0] == 1  # one token of each sequence
        block = self.moe_block_s(ui, cpu, s, decode) if first_expert and self.moe_ops else 0.0
        u = self.model.units[ui]
        if self.offloaded[ui] and not cpu:  # ggml_weights splits of its own, the attention over the shared cache
            split_s = (self.split_of if decode else self.prompt_split_of)[ui]
            return base_s + split_s * ggml_weights(u.kind, self.model.family) \
                + u.ggml_attention_flops(batch, new, ctx) / self.attn_flops + block
        return base_s + (self.warmup_s[ui] if s in self.warmup else 0.0) \
            + (self.mm_attention[cpu][ui] if batch * new == 1 else 0.0) + block
