"""Lexically constrained beam search: each glossary term a sentence holds must appear in its output,
written by the model in context (Post & Vilar 2018, dynamic beam allocation).

A term is a constraint: one or more variants, each a sequence of target tokens; any variant
satisfies it. Each hypothesis carries its progress (`Progress`): which constraints it has met, and
the one it is partway through, if any. A hypothesis is in the bank of the constraint tokens it has
met. At every step each beam offers its best tokens, as plain beam search's do, and also the tokens
that would advance it (the next token of the constraint it is in, the first of any it has not
begun); the beam's K places are shared out among the banks, so that hypotheses that have met more
constraints are never all crowded out by likelier ones that have met fewer. A started constraint
is continued or, by any other token, abandoned. Only a hypothesis that has met every constraint
may end; one that reaches the length limit without doing so is kept only as a last resort (scored
far below any that did). A sentence without terms decodes as plain beam search.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from mt.data.vocab import END, PAD, UNK
from mt.inference.search import Choice

FALLBACK = 1e4  # what an output that missed a constraint is scored below any that met them all


@dataclass(frozen=True)
class Progress:
    met: int = 0  # a bit per constraint met
    within: int = -1  # the constraint partway through (-1: none)
    alive: tuple[int, ...] = ()  # its variants still matching
    at: int = 0  # tokens of it matched
    fresh: int = -1  # the constraint the last token completed: met only if the next starts a new word


class Constraints:
    """One sentence's constraints: each a tuple of variants (token id sequences)."""

    def __init__(self, constraints: list[tuple[tuple[int, ...], ...]]):
        self.items = constraints
        self.weights = [min(len(v) for v in c) for c in constraints]  # tokens a constraint counts for
        self.need = sum(self.weights)  # the top bank

    def bank(self, p: Progress) -> int:
        met = sum(w for i, w in enumerate(self.weights) if p.met >> i & 1)
        partial = p.within >= 0 and not p.met >> p.within & 1
        return met + (min(p.at, self.weights[p.within] - 1) if partial else 0)

    def advance(self, p: Progress, token: int, continues: bool = False) -> Progress:
        """The progress after `token` (`continues`: a piece that goes on the word before it): the
        constraint under way continued, met or abandoned; a constraint just met and then continued
        into a longer word is not met; else the first unmet constraint that begins with `token` is
        begun (or met, if one token long)."""
        met = p.met
        if p.within >= 0:
            variants = self.items[p.within]
            alive = tuple(v for v in p.alive if variants[v][p.at] == token)
            if alive:
                if p.fresh == p.within and continues:  # the shorter variant met was not a whole word
                    met &= ~(1 << p.within)
                return self._matched(met, p.within, alive, p.at + 1)
        if p.fresh >= 0 and continues:
            met &= ~(1 << p.fresh)
        for i, variants in enumerate(self.items):
            if not met >> i & 1:
                alive = tuple(v for v, seq in enumerate(variants) if seq[0] == token)
                if alive:
                    return self._matched(met, i, alive, 1)
        return Progress(met)

    def _matched(self, met: int, i: int, alive: tuple[int, ...], at: int) -> Progress:
        """`at` tokens of constraint `i` matched by its variants `alive`."""
        variants = self.items[i]
        completed = any(len(variants[v]) == at for v in alive)
        longer = tuple(v for v in alive if len(variants[v]) > at)
        met |= (1 << i) if completed else 0
        return Progress(met, i if longer else -1, longer, at if longer else 0, i if completed else -1)

    def advancing(self, p: Progress) -> list[int]:
        """The tokens that would advance `p`: the next of the constraint under way, the first of each unmet one."""
        tokens = {self.items[p.within][v][p.at] for v in p.alive} if p.within >= 0 else set()
        tokens |= {seq[0] for i, c in enumerate(self.items) if not p.met >> i & 1 for seq in c}
        return sorted(tokens)


class DynamicBeamAllocation:
    """A beam search step (the shape of `TopK`, mt/inference/search.py) under constraints, for a
    batch whose every sentence has its own `Constraints`."""

    def __init__(self, beam: int, constraints: list[Constraints], continues: torch.Tensor):
        """`continues`: (V,) whether each token is a piece that goes on the word before it."""
        self.k, self.sets, self.continues, self.device = beam, constraints, continues, continues.device
        self.continues_list = continues.tolist()  # read per candidate: once, not a device read each time
        self.progress: list[list[Progress]] = [[Progress()] for _ in constraints]  # per live sentence, per beam
        self.need = torch.tensor([c.need for c in constraints], device=self.device)
        self.extra = torch.zeros(0, 1, dtype=torch.long)

    def _rows(self) -> list[tuple[Constraints, Progress]]:
        return [(c, p) for c, beams in zip(self.sets, self.progress) for p in beams]

    def extra_tokens(self) -> torch.Tensor:
        """Each beam's advancing tokens, (rows, M), padded with <pad> (never produced, so never chosen)."""
        lists = [c.advancing(p) for c, p in self._rows()]
        out = torch.full((len(lists), max(1, max(map(len, lists)))), PAD, dtype=torch.long)
        for row, tokens in enumerate(lists):
            out[row, : len(tokens)] = torch.tensor(tokens, dtype=torch.long)
        self.extra = out.to(self.device)
        return self.extra

    def _banks(self, top_tokens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, list[list[Progress]]]:
        """The bank of each candidate among the rows' best tokens (rows, C) and advancing tokens
        (rows, M), and each row's progress after each of its advancing tokens."""
        stay, broken, moved, after = [], [], [], []
        continues = self.continues_list
        for (c, p), tokens in zip(self._rows(), self.extra.tolist()):
            stay.append(c.bank(Progress(p.met)))  # any other token abandons what was under way...
            broken.append(c.bank(Progress(p.met & ~(1 << p.fresh) if p.fresh >= 0 else p.met)))  # ...or the word
            after.append([c.advance(p, t, continues[t]) for t in tokens])
            moved.append([c.bank(q) for q in after[-1]])
        stay_t, broken_t = torch.tensor(stay, device=self.device), torch.tensor(broken, device=self.device)
        moved_t = torch.tensor(moved, device=self.device)
        otherwise = torch.where(self.continues[top_tokens], broken_t[:, None], stay_t[:, None])
        same = top_tokens[:, :, None] == self.extra[:, None, :]  # (rows, C, M): a best token that also advances
        top_banks = torch.where(same.any(dim=2), moved_t.gather(1, same.int().argmax(dim=2)), otherwise)
        return top_banks, moved_t, after

    def choose(self, scores, top_logp, top_tokens, extra_logp, forced, done) -> Choice:
        n, width = scores.shape
        top_banks, extra_banks, after = self._banks(top_tokens)
        repeated = (self.extra[:, :, None] == top_tokens[:, None, :]).any(dim=2) | (self.extra == PAD)
        logp = torch.cat([top_logp, extra_logp.masked_fill(repeated, float("-inf"))], dim=1)  # (rows, C + M)
        per_row = logp.size(1)
        totals = (scores.reshape(-1, 1) + logp).view(n, -1)  # (n, width * (C + M))
        tokens = torch.cat([top_tokens, self.extra], dim=1).view(n, -1)
        banks = torch.cat([top_banks, extra_banks], dim=1).view(n, -1)
        rows = torch.arange(n * width, device=scores.device).repeat_interleave(per_row).view(n, -1)
        ended, met = tokens == END, banks == self.need[:, None]
        finishing = ended & totals.isfinite() & ~done[:, None] & (met | forced[:, None])  # at the limit: a last resort
        going = torch.where(ended, float("-inf"), totals)
        picked = self._allocate(going, banks)  # (n, K) candidate indices
        self._advance(picked.tolist(), tokens, rows, after, per_row - self.extra.size(1))
        kept = (going.gather(1, picked), rows.gather(1, picked), tokens.gather(1, picked))
        return Choice(totals, rows, finishing, *kept, offsets=torch.where(met, 0.0, -FALLBACK))

    def _allocate(self, going: torch.Tensor, banks: torch.Tensor) -> torch.Tensor:
        """K candidates per sentence: each bank's share of the beam (the remainder to the highest
        banks) filled with its best, then the places left with the best of the rest."""
        k = self.k
        banks_n = self.need + 1  # (n,)
        share, spare = k // banks_n, k % banks_n
        chosen = torch.zeros_like(going, dtype=torch.bool)
        places = torch.arange(min(k, going.size(1)), device=going.device)
        for b in range(int(banks_n.max())):
            slots = torch.where(b < banks_n, share + (b >= banks_n - spare).long(), 0)  # (n,)
            values, index = torch.where(banks == b, going, float("-inf")).topk(len(places), dim=1)
            take = (places[None, :] < slots[:, None]) & values.isfinite()
            chosen.scatter_(1, index, take | chosen.gather(1, index))
        left = k - chosen.sum(dim=1)
        values, index = torch.where(chosen, float("-inf"), going).topk(len(places), dim=1)
        chosen.scatter_(1, index, (places[None, :] < left[:, None]) & values.isfinite() | chosen.gather(1, index))
        return torch.where(chosen, going, float("-inf")).topk(k, dim=1).indices  # the chosen, best first

    def _advance(self, picked: list[list[int]], tokens, rows, after, top: int) -> None:
        """Each kept beam's progress, from its parent's and its token."""
        parents = self._rows()
        per_row = top + self.extra.size(1)
        progress = []
        for s, indices in enumerate(picked):
            beams = []
            for index in indices:
                row, j = int(rows[s, index]), index % per_row
                c, p = parents[row]
                token = int(tokens[s, index])
                beams.append(after[row][j - top] if j >= top else c.advance(p, token, self.continues_list[token]))
            progress.append(beams)
        self.progress = progress

    def reorder(self, order: torch.Tensor) -> None:
        self.progress = [[beams[j] for j in row] for beams, row in zip(self.progress, order.tolist())]

    def keep(self, live: torch.Tensor) -> None:
        kept = live.tolist()
        self.progress, self.sets = [self.progress[i] for i in kept], [self.sets[i] for i in kept]
        self.need = self.need[live]

    def settle(self, scores: torch.Tensor) -> torch.Tensor:
        """Scores as the model gives them: a last resort's without its fall."""
        return torch.where(scores < -FALLBACK / 2, scores + FALLBACK, scores)


def word_continuations(pieces: list[str]) -> torch.Tensor:
    """(V,) whether each vocabulary piece goes on the word before it: one that neither starts a
    word ('▁') nor is punctuation or a special token."""
    return torch.tensor([not p.startswith("\u2581") and p[:1].isalnum() and not p.startswith("<") for p in pieces])


def build_constraints(tokenizer, terms_of_sentences, warn=None) -> list[Constraints]:
    """Each sentence's matched glossary terms as token constraints (the target side's pieces). A
    variant with a piece the vocabulary lacks cannot be written: `warn` is told so once, and the
    term goes on with its other variants, or without the term."""
    said, out = set(), []
    for terms in terms_of_sentences:
        items = []
        for term in terms:
            variants = []
            for target in term.targets:
                ids = tuple(tokenizer.encode_batch([target], "tgt")[0])
                if ids and UNK not in ids:
                    variants.append(ids)
                elif (term.source, target) not in said and warn:
                    said.add((term.source, target))
                    warn(f"the glossary's {term.source!r} -> {target!r} has pieces this model's vocabulary lacks")
            if variants:
                items.append(tuple(variants))
        out.append(Constraints(items))
    return out
