"""Lexically constrained beam search: each glossary term a sentence holds must appear in its output,
written by the model in context (Post & Vilar 2018, dynamic beam allocation).

A term is a constraint: one or more variants, each a sequence of target tokens; any variant
satisfies it. Each hypothesis's progress is a row of tensors (`_State`): which constraints it has
met, and the one it is partway through, if any. A hypothesis is in the bank of the constraint
tokens it has met. At every step each beam offers its best tokens, as plain beam search's do, and
also the tokens that would advance it (the next token of the constraint it is in, the first of any
it has not begun); the beam's K places are shared out among the banks, so that hypotheses that
have met more constraints are never all crowded out by likelier ones that have met fewer. A
started constraint is continued or, by any other token, abandoned. Only a hypothesis that has met
every constraint may end; one that reaches the length limit without doing so is kept only as a
last resort (scored far below any that did). A sentence without terms decodes as plain beam search.
The same rules for one hypothesis at a time, in plain Python, are the reference the tensors are
tested against (tests/inference/test_glossary.py).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from mt.data.vocab import END, PAD, UNK
from mt.inference.search import Choice

FALLBACK = 1e4  # what an output that missed a constraint is scored below any that met them all


class Constraints:
    """One sentence's constraints: each a tuple of variants (token id sequences)."""

    def __init__(self, constraints: list[tuple[tuple[int, ...], ...]]):
        self.items = constraints
        self.weights = [min(len(v) for v in c) for c in constraints]  # tokens a constraint counts for
        self.need = sum(self.weights)  # the top bank


class _Table:
    """A batch's constraints as tensors, each sentence's variants in one row (padded to the batch's
    most): the variants' tokens (n, V, L) (-1 past their end), the constraint each belongs to (n, V),
    their lengths (n, V), and each constraint's weight (n, C) (0 for padding)."""

    def __init__(self, sets: list[Constraints], device: torch.device):
        flat = [[(i, v) for i, variants in enumerate(c.items) for v in variants] for c in sets]
        n, v = len(sets), max(1, max(map(len, flat)))
        c = max(1, max(len(s.items) for s in sets))
        length = max([len(seq) for f in flat for _, seq in f], default=1)
        self.seq = torch.full((n, v, length), -1, dtype=torch.long)
        self.owner, self.lengths = torch.zeros(n, v, dtype=torch.long), torch.zeros(n, v, dtype=torch.long)
        self.weight = torch.zeros(n, c, dtype=torch.long)
        for s, (constraints, variants) in enumerate(zip(sets, flat)):
            for j, (i, seq) in enumerate(variants):
                self.seq[s, j, : len(seq)], self.owner[s, j], self.lengths[s, j] = torch.tensor(seq), i, len(seq)
            self.weight[s, : len(constraints.weights)] = torch.tensor(constraints.weights, dtype=torch.long)
        self.seq, self.owner, self.lengths, self.weight = (
            x.to(device) for x in (self.seq, self.owner, self.lengths, self.weight)
        )

    def select(self, sentences: torch.Tensor) -> _Table:
        """The same table for rows `sentences` (a sentence once per beam, or the sentences left)."""
        out = object.__new__(_Table)
        out.seq, out.owner, out.lengths, out.weight = (
            x[sentences] for x in (self.seq, self.owner, self.lengths, self.weight)
        )
        return out


@dataclass
class _State:
    """Each hypothesis's progress, one row a beam (or a beam's candidate): the constraints met (R, C),
    the one partway through (R,) (-1: none), its variants still matching (R, V), the tokens of it
    matched (R,), and the constraint the last token completed (R,) (-1: none)."""

    met: torch.Tensor
    within: torch.Tensor
    alive: torch.Tensor
    at: torch.Tensor
    fresh: torch.Tensor

    @classmethod
    def start(cls, rows: int, table: _Table) -> _State:
        device, none = table.seq.device, torch.full((rows,), -1, dtype=torch.long, device=table.seq.device)
        met = torch.zeros(rows, table.weight.size(1), dtype=torch.bool, device=device)
        alive = torch.zeros(rows, table.seq.size(1), dtype=torch.bool, device=device)
        return cls(met, none, alive, torch.zeros_like(none), none.clone())

    def take(self, rows: torch.Tensor) -> _State:
        return _State(self.met[rows], self.within[rows], self.alive[rows], self.at[rows], self.fresh[rows])

    def banks(self, weight: torch.Tensor) -> torch.Tensor:
        """Each row's bank: the weights of the constraints met, and the tokens
        matched of one partway through (short of its weight). `weight`: (R, C)."""
        met = (self.met * weight).sum(dim=1)
        inside = self.within.clamp(min=0)[:, None]
        partial = (self.within >= 0) & ~self.met.gather(1, inside).squeeze(1)
        return met + torch.where(partial, torch.minimum(self.at, weight.gather(1, inside).squeeze(1) - 1), 0)


def _bit(index: torch.Tensor, c: int) -> torch.Tensor:
    """(..., C) True at `index` (none where it is -1)."""
    return torch.arange(c, device=index.device) == index[..., None]


def _ahead(state: _State, table: _Table) -> torch.Tensor:
    """(R, V) each variant's token after the `at` matched (what continues the constraint under way)."""
    v, length = table.seq.shape[1:]
    return table.seq.gather(2, state.at.clamp(max=length - 1)[:, None, None].expand(-1, v, 1)).squeeze(2)


def _after(state: _State, table: _Table, tokens: torch.Tensor, continues: torch.Tensor) -> _State:
    """Each row's progress after each of its candidate tokens (R, T), for all at once: a (R * T)-row
    state. The constraint under way is continued, met or abandoned; a constraint just met and then
    continued into a longer word (`continues`) is not met; else the first unmet constraint that
    begins with the token is begun (or met, if one token long). `table` holds each row's own sentence."""
    r, t = tokens.shape
    c = table.weight.size(1)
    tok, goes_on = tokens[:, :, None], continues[tokens]  # (R, T, 1), (R, T)
    going = state.alive[:, None, :] & (_ahead(state, table)[:, None, :] == tok)  # (R, T, V): the one under way goes on
    continuing = going.any(dim=2)
    met = state.met[:, None, :].expand(r, t, c)
    longer_word = (state.fresh == state.within)[:, None] & goes_on  # the shorter variant met was not a whole word
    kept_on = met & ~(_bit(state.within, c)[:, None, :] & longer_word[:, :, None])
    unfresh = met & ~(_bit(state.fresh, c)[:, None, :] & goes_on[:, :, None])  # a word met goes on: not met
    owner = table.owner[:, None, :].expand(r, t, -1)
    starts = ~unfresh.gather(2, owner) & (table.seq[:, None, :, 0] == tok)  # (R, T, V)
    first = torch.where(starts, owner, c).amin(dim=2)  # the first unmet constraint the token begins
    index = torch.where(continuing, state.within[:, None], first)
    alive = torch.where(continuing[:, :, None], going, starts & (owner == first[:, :, None]))
    at = torch.where(continuing, state.at[:, None] + 1, 1)
    lengths = table.lengths[:, None, :]
    completed = (alive & (lengths == at[:, :, None])).any(dim=2)
    longer = alive & (lengths > at[:, :, None])
    on = longer.any(dim=2)
    met = torch.where(continuing[:, :, None], kept_on, unfresh) | _bit(torch.where(completed, index, -1), c)
    none = torch.full_like(index, -1)
    return _State(
        met.reshape(r * t, c),
        torch.where(on, index, none).view(-1),
        longer.reshape(r * t, -1),
        torch.where(on, at, 0).view(-1),
        torch.where(completed, index, none).view(-1),
    )


class DynamicBeamAllocation:
    """A beam search step (the shape of `TopK`, mt/inference/search.py) under constraints, for a
    batch whose every sentence has its own `Constraints`. The bookkeeping is tensor operations over
    beams, candidate tokens and constraint variants (`_after`)."""

    def __init__(self, beam: int, constraints: list[Constraints], continues: torch.Tensor):
        """`continues`: (V,) whether each token is a piece that goes on the word before it."""
        self.k, self.continues, self.device = beam, continues, continues.device
        self.table = _Table(constraints, self.device)
        self.state = _State.start(len(constraints), self.table)  # one row a sentence until the first step
        self.need = torch.tensor([c.need for c in constraints], device=self.device)
        self.extra = torch.zeros(0, 1, dtype=torch.long)
        self._rows: _Table | None = None  # `table` a row a beam: the same from step to step until `keep`

    def _rows_table(self) -> _Table:
        width = self.state.at.size(0) // self.need.size(0)
        if self._rows is None or self._rows.seq.size(0) != self.state.at.size(0):  # one beam a sentence, then K
            self._rows = self.table.select(torch.arange(self.need.size(0), device=self.device).repeat_interleave(width))
        return self._rows

    def extra_tokens(self) -> torch.Tensor:
        """Each beam's advancing tokens (the next of the constraint under way, the first of each unmet
        one), (rows, M), padded with <pad> (never produced, so never chosen)."""
        table, s = self._rows_table(), self.state
        none = torch.iinfo(torch.long).max
        first = table.seq[:, :, 0]
        begins = ~s.met.gather(1, table.owner) & (first >= 0)
        tokens = torch.cat([torch.where(s.alive, _ahead(s, table), none), torch.where(begins, first, none)], dim=1)
        tokens = tokens.sort(dim=1).values
        tokens[:, 1:][tokens[:, 1:] == tokens[:, :-1]] = none  # each token once
        tokens = tokens.sort(dim=1).values
        width = max(1, int((tokens != none).sum(dim=1).max()))
        self.extra = torch.where(tokens[:, :width] == none, PAD, tokens[:, :width])
        return self.extra

    def choose(self, scores, top_logp, top_tokens, extra_logp, forced, done) -> Choice:
        n, width = scores.shape
        table = self._rows_table()
        candidates = torch.cat([top_tokens, self.extra], dim=1)  # (rows, C + M)
        per_row = candidates.size(1)
        after = _after(self.state, table, candidates, self.continues)
        repeated = (self.extra[:, :, None] == top_tokens[:, None, :]).any(dim=2) | (self.extra == PAD)
        logp = torch.cat([top_logp, extra_logp.masked_fill(repeated, float("-inf"))], dim=1)  # (rows, C + M)
        totals = (scores.reshape(-1, 1) + logp).view(n, -1)  # (n, width * (C + M))
        tokens = candidates.view(n, -1)
        banks = after.banks(table.weight.repeat_interleave(per_row, dim=0)).view(n, -1)
        rows = torch.arange(n * width, device=scores.device).repeat_interleave(per_row).view(n, -1)
        ended, met = tokens == END, banks == self.need[:, None]
        finishing = ended & totals.isfinite() & ~done[:, None] & (met | forced[:, None])  # at the limit: a last resort
        going = torch.where(ended, float("-inf"), totals)
        picked = self._allocate(going, banks)  # (n, K) candidate indices
        base = torch.arange(n, device=scores.device)[:, None] * (width * per_row)
        self.state = after.take((base + picked).view(-1))
        kept = (going.gather(1, picked), rows.gather(1, picked), tokens.gather(1, picked))
        return Choice(totals, rows, finishing, *kept, offsets=torch.where(met, 0.0, -FALLBACK))

    def _allocate(self, going: torch.Tensor, banks: torch.Tensor) -> torch.Tensor:
        """K candidates per sentence: each bank's share of the beam (the remainder to the highest
        banks) filled with its best, then the places left with the best of the rest."""
        k, count = self.k, going.size(1)
        banks_n = self.need + 1  # (n,)
        share, spare = k // banks_n, k % banks_n
        values, order = going.sort(dim=1, descending=True, stable=True)
        bank = banks.gather(1, order)  # (n, P): by score, best first
        by_bank, where = bank.sort(dim=1, stable=True)  # within a bank, still best first
        rank_sorted = torch.arange(count, device=going.device) - torch.searchsorted(by_bank, by_bank)
        rank = torch.empty_like(rank_sorted).scatter_(1, where, rank_sorted)  # (n, P): place within its bank
        slots = share[:, None] + (bank >= (banks_n - spare)[:, None]).long()
        real = values.isfinite()
        chosen = real & (rank < slots)
        left = k - chosen.sum(dim=1, keepdim=True)
        chosen |= real & ~chosen & ((real & ~chosen).cumsum(dim=1) <= left)
        picked = torch.where(chosen, values, float("-inf")).topk(k, dim=1).indices  # the chosen, best first
        return order.gather(1, picked)

    def reorder(self, order: torch.Tensor) -> None:
        n, k = order.shape
        self.state = self.state.take((torch.arange(n, device=order.device)[:, None] * k + order).view(-1))

    def keep(self, live: torch.Tensor) -> None:
        width = self.state.at.size(0) // self.need.size(0)
        rows = (live[:, None] * width + torch.arange(width, device=live.device)).view(-1)
        self.state, self.table, self.need = self.state.take(rows), self.table.select(live), self.need[live]
        self._rows = None

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
