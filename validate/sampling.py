"""How `offloadsim run` chooses tokens, as a value checked without torch (validate/decoding.py draws them)."""
from __future__ import annotations

from dataclasses import dataclass

from hwmodels.units import InputError


@dataclass(frozen=True)
class Sampling:
    """How tokens are chosen: temperature 0 is greedy (the most likely token); above 0, drawn from the top-p set."""
    temperature: float = 0.0
    top_p: float = 1.0
    seed: int = 0

    def check(self) -> "Sampling":
        if not (0.0 <= self.temperature <= 100.0):
            raise InputError(f"temperature: {self.temperature!r} is out of range; give 0 (greedy) up to 100.")
        if not (0.0 < self.top_p <= 1.0):
            raise InputError(f"top-p: {self.top_p!r} is out of range; give a number in (0, 1].")
        return self
