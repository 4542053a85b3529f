"""A glossary: terms that must be translated one way, which beam search then writes (a constraint of
mt/inference/constraints.py, not a substitution in the output).

A glossary file is UTF-8 text, one term a line: `source term<TAB>target term`; `#` starts a comment
line, blank lines are skipped. A target may list variants, `chat<TAB>cat|cats`: any one of them
satisfies the term. A term that is its own target (`Firefox<TAB>Firefox`) is not translated.
Source terms match whole words, case-insensitively, longest first, and never overlap.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from pathlib import Path

from mt.errors import UserError

MAX_TERMS = 100_000


@dataclass(frozen=True)
class Term:
    source: str
    targets: tuple[str, ...]  # variants: any one satisfies the term


@dataclass(frozen=True)
class Glossary:
    """Terms, longest source first; hashable, so requests with the same glossary batch together."""

    terms: tuple[Term, ...]

    @classmethod
    def of(cls, pairs) -> Glossary:
        """From (source, target) pairs, a target holding variants as `a|b`; checked as a file's lines are."""
        terms = {}
        for i, pair in enumerate(pairs, 1):
            if not (isinstance(pair, (list, tuple)) and len(pair) == 2 and all(isinstance(p, str) for p in pair)):
                raise UserError(f"glossary entry {i} must be a [source, target] pair of strings, got {pair!r}")
            source, target = (" ".join(p.split()) for p in pair)
            variants = tuple(dict.fromkeys(v.strip() for v in target.split("|") if v.strip()))
            if not source or not variants:
                raise UserError(f"glossary entry {i} has an empty source or target term: {pair!r}")
            terms[source.lower()] = Term(source, variants)
        ordered = sorted(terms.values(), key=lambda t: (-len(t.source), t.source.lower()))
        return cls(tuple(ordered))

    @functools.cached_property
    def _by_word(self) -> dict[str, list[tuple[int, str, Term]]]:
        """Each term under its first word: (where that word starts in it, its lowered source, it)."""
        index: dict[str, list[tuple[int, str, Term]]] = {}
        for term in self.terms:  # longest first, so each list is too
            lowered = term.source.lower()
            first = re.search(r"\w+", lowered)
            index.setdefault(first.group() if first else lowered, []).append(
                (first.start() if first else 0, lowered, term)
            )
        return index

    def find(self, text: str) -> list[Term]:
        """The terms `text` holds, in order: whole words, case-insensitively, at each place the
        longest that starts there; matches never overlap, and a term counts as often as it occurs."""
        lowered, found, free_from = text.lower(), [], 0
        for word in re.finditer(r"\w+", lowered):
            for offset, source, term in self._by_word.get(word.group(), ()):
                start, end = word.start() - offset, word.start() - offset + len(source)
                if start < free_from or not lowered.startswith(source, start):
                    continue
                if (start > 0 and _wordy(lowered[start - 1], source[0])) or (
                    end < len(lowered) and _wordy(lowered[end], source[-1])
                ):
                    continue
                found.append(term)
                free_from = end
                break
        return found

    def __len__(self) -> int:
        return len(self.terms)


def _wordy(neighbour: str, edge: str) -> bool:
    """Whether a character beside a match would join it to a longer word."""
    return neighbour.isalnum() and (edge.isalnum() or edge == "_")


def read_glossary(path: str | Path) -> Glossary:
    """A glossary file (see the module notes), or a one-line error naming the line at fault."""
    path = Path(path)
    try:
        raw = path.read_bytes()
    except OSError as e:
        raise UserError(f"--glossary {path}: cannot read it ({e.strerror or e})") from None
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        line = raw[: e.start].count(b"\n") + 1
        raise UserError(f"{path}, line {line}: not UTF-8 text; save the glossary as UTF-8") from None
    pairs = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        fields = line.split("\t")
        if len(fields) != 2 or not fields[0].strip() or not fields[1].strip():
            raise UserError(f"{path}, line {number}: expected 'source term<TAB>target term', got {line[:80]!r}")
        pairs.append((fields[0], fields[1]))
    if len(pairs) > MAX_TERMS:
        raise UserError(f"{path} holds {len(pairs):,} terms; at most {MAX_TERMS:,} are read")
    if not pairs:
        raise UserError(f"{path} holds no terms (one 'source<TAB>target' a line)")
    return Glossary.of(pairs)
