"""Seeded draws of the routed experts each token picks, from a uniform or Zipf-skewed popularity."""
from __future__ import annotations

import numpy as np


class ExpertRouter:
    """Per block, a popularity distribution over experts; draws top-k distinct experts per token (Gumbel top-k)."""

    def __init__(self, n_experts: int, top_k: int, n_blocks: int, skew: float = 0.0, seed: int = 0,
                 popularity_seed: int = 0):
        """`popularity_seed` fixes which experts are popular (a property of the model, known to a profiler);
        `seed` draws the tokens' picks (unknown ahead of the run)."""
        self.n, self.k = n_experts, top_k
        self.rng = np.random.default_rng(seed)
        ranks = np.arange(1, n_experts + 1, dtype=float)
        base = np.log(ranks ** -skew / np.sum(ranks ** -skew)) if skew > 0 else np.full(n_experts, -np.log(n_experts))
        perm = np.random.default_rng(popularity_seed)
        self.log_p = np.stack([base[perm.permutation(n_experts)] for _ in range(n_blocks)])  # popular set per block

    def pick_probability(self, block: int) -> np.ndarray:
        """Approximate chance that one token routes to each expert of `block` (k * p, capped at 1)."""
        return np.minimum(1.0, self.k * np.exp(self.log_p[block]))

    def draw(self, block: int, tokens: int) -> np.ndarray:
        """Tokens routed to each expert of `block` (an int array of length n_experts) for `tokens` tokens."""
        g = self.rng.gumbel(size=(tokens, self.n)) + self.log_p[block]
        picks = np.argpartition(-g, self.k - 1, axis=1)[:, : self.k]
        return np.bincount(picks.ravel(), minlength=self.n)
