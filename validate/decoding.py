"""How a run of the engine chooses its tokens and hands them out as they are made: greedy or sampled (temperature,
top-p, a seeded generator on the device), a callback per token on a thread of its own, and a stop token.

The compute thread never waits for the host here: a token leaves the device into pinned memory behind a CUDA event,
and the hand-out thread waits on that event. A stop token sets `halt`; the run then ends at its next step boundary
(validate/stream_run.py), so at most the steps already under way are computed past it.
"""
from __future__ import annotations

import queue
import threading
from collections.abc import Callable

import torch


class Sampler:
    """A token per sequence from float32 logits [batch, vocab]: temperature, then the smallest set of tokens whose
    probability reaches `top_p` (transformers' own logits warpers), drawn with a generator seeded with `seed`."""

    def __init__(self, temperature: float, top_p: float, seed: int, device: torch.device):
        from transformers.generation.logits_process import (LogitsProcessorList, TemperatureLogitsWarper,
                                                            TopPLogitsWarper)
        warpers = [TemperatureLogitsWarper(temperature)]
        if top_p < 1.0:
            warpers.append(TopPLogitsWarper(top_p))
        self.warpers = LogitsProcessorList(warpers)
        self.generator = torch.Generator(device).manual_seed(seed)

    def __call__(self, logits: torch.Tensor) -> torch.Tensor:
        scores = self.warpers(None, logits.float())
        probs = torch.softmax(scores, dim=-1)
        return torch.multinomial(probs, 1, generator=self.generator)[:, 0]


class Decoding:
    """A run's token choice and hand-out: `sampler` (None: greedy, the head's own argmax), `on_token(step, token id)`
    called in step order for sequence 0, and `stop_ids` that end the run."""

    def __init__(self, sampler: Sampler | None = None, on_token: Callable[[int, int], None] | None = None,
                 stop_ids: frozenset[int] = frozenset()):
        self.sampler, self.on_token, self.stop_ids = sampler, on_token, stop_ids
        self.halt = threading.Event()
        self.handed: list[int] = []  # the tokens handed out, up to and including a stop token
        self._queue: queue.Queue = queue.Queue()
        self._thread: threading.Thread | None = None
        self._host: torch.Tensor | None = None
        self.error: BaseException | None = None

    def start(self, steps: int, batch: int, cuda: bool) -> None:
        self._host = torch.zeros((steps, batch), dtype=torch.long, pin_memory=cuda)
        self._thread = threading.Thread(target=self._hand_out, daemon=True)
        self._thread.start()

    def choose(self, step: int, logits: torch.Tensor, tok: torch.Tensor) -> None:
        """After the head of `step`: overwrite the greedy `tok` with a sampled one, and queue it for the hand-out."""
        if self.sampler is not None:
            tok.copy_(self.sampler(logits))
        self._host[step].copy_(tok, non_blocking=True)
        ev = None
        if tok.device.type == "cuda":
            ev = torch.cuda.Event()
            ev.record(torch.cuda.current_stream(tok.device))
        self._queue.put((step, ev))

    def finish(self) -> None:
        """Wait until every queued token is handed out; raise what the callback raised."""
        if self._thread is not None:
            self._queue.put(None)
            self._thread.join()
        if self.error is not None:
            raise self.error

    def _hand_out(self) -> None:
        while (item := self._queue.get()) is not None:
            step, ev = item
            if ev is not None:
                ev.synchronize()
            if self.halt.is_set() or self.error is not None:
                continue
            token = int(self._host[step, 0])
            self.handed.append(token)
            try:
                if self.on_token is not None:
                    self.on_token(step, token)
            except BaseException as exc:  # raised by finish(), in the caller's thread
                self.error = exc
                self.halt.set()
            if token in self.stop_ids:
                self.halt.set()
