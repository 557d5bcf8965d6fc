"""What one run of the engine returns: tokens, logits, events and its times."""
from __future__ import annotations

from dataclasses import dataclass

import torch

from sim.run.events import Event


@dataclass
class RunResult:
    tokens: torch.Tensor          # [batch, new_tokens]
    logits: list[torch.Tensor]    # per step, [batch, vocab] float32 on the CPU
    events: list[Event]
    ttft_s: float
    time_per_token_s: float
    total_s: float
    graphs: bool = False          # GPU-placed units ran as captured CUDA graphs (False: eagerly)
    gpu_peak_bytes: int = 0       # the most GPU memory this engine held during the run (torch's allocator: tensors
                                  # live, not its cache), weights and slots included; 0 on the CPU
