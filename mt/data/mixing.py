"""Training corpora mixed by weight: `{corpus: hansard, weight: 0.5}`.

The one rule: an epoch holds as many pairs as the kept training pairs of all corpora together, and
each corpus contributes its weight's share of them (weights are relative: 2 and 1 mean two thirds
and one third). Inside a corpus pairs are drawn without replacement from a shuffled order, and
when it runs out a fresh shuffle follows, so a small corpus with a large weight cycles and a large
one with a small weight is spread over several epochs. Every draw is a function of (seed, corpus,
cycle), so epoch e's pairs depend on nothing else and --resume continues exactly. Without weights,
`repeat` keeps its meaning (every pair that many times an epoch); a recipe uses one or the other.
"""

from __future__ import annotations

import numpy as np


class Mixture:
    """Which kept pairs (positions 0..n-1 in the encoded corpus) make up each epoch."""

    def __init__(self, corpus_of: np.ndarray, weights: list[float], seed: int):
        self.members = [np.flatnonzero(corpus_of == c) for c in range(len(weights))]
        total, share = len(corpus_of), np.asarray(weights, dtype=np.float64) / sum(weights)
        self.per_epoch = [int(round(total * s)) if len(m) else 0 for s, m in zip(share, self.members)]
        self.seed = seed

    def _draw(self, corpus: int, start: int, count: int) -> np.ndarray:
        """Items start .. start+count of corpus' endless sequence of shuffles."""
        members = self.members[corpus]
        index = np.arange(start, start + count)
        cycles, offsets = np.divmod(index, len(members))
        out = np.empty(count, dtype=np.int64)
        for cycle in np.unique(cycles):
            order = np.random.default_rng([self.seed, corpus, int(cycle)]).permutation(members)
            chosen = cycles == cycle
            out[chosen] = order[offsets[chosen]]
        return out

    def epoch(self, epoch: int) -> np.ndarray:
        """The positions of epoch `epoch`'s pairs, corpus after corpus (batching shuffles them)."""
        return np.concatenate(
            [self._draw(c, epoch * k, k) for c, k in enumerate(self.per_epoch) if k] or [np.empty(0, np.int64)]
        )

    def shares(self) -> list[float]:
        n = sum(self.per_epoch)
        return [k / n for k in self.per_epoch]
