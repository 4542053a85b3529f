"""A glossary: terms that must be translated one way, which beam search then writes (a constraint of
mt/inference/constraints.py, not a substitution in the output).

A glossary file is UTF-8 text, one term a line: `source term<TAB>target term`; `#` starts a comment
line, blank lines are skipped. A target may list variants, `chat<TAB>cat|cats`: any one of them
satisfies the term. A term that is its own target (`Firefox<TAB>Firefox`) is not translated.
Source terms match whole words, case-insensitively, longest first, and never overlap.
"""

from __future__ import annotations

import functools
import hashlib
import re
from dataclasses import dataclass
from pathlib import Path

from mt.errors import UserError

MAX_TERMS = 100_000
MAX_TERM_TOKENS = 32  # words and marks in a term's source: what bounds the matching of each token


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
            if len(_TOKEN.findall(source)) > MAX_TERM_TOKENS:
                raise UserError(
                    f"glossary entry {i}'s source has more than {MAX_TERM_TOKENS} words and marks: "
                    f"a glossary holds terms, not sentences ({source[:60]!r})"
                )
            terms[source.lower()] = Term(source, variants)
        ordered = sorted(terms.values(), key=lambda t: (-len(t.source), t.source.lower()))
        return cls(tuple(ordered))

    @functools.cached_property
    def _trie(self) -> dict:
        """The terms' lowered sources as paths of tokens (words, and single other characters),
        each keyed with the space before it ("" or " ": sources are normalised so): built once per
        glossary, a request's included, and shared by the threads that match with it."""
        root: dict = {}
        for term in self.terms:
            node = root
            lowered = term.source.lower()
            for gap, token in _tokens(lowered):
                node = node.setdefault(gap + token, {})
            node.setdefault(_TERM, term)
        return root

    @functools.cached_property
    def _found(self) -> dict[bytes, list[Term]]:
        """What `find` gave each text lately, by the text's digest (the texts themselves are not
        kept): a server's budget and its decoding thread ask for the same sentences."""
        return {}

    def find(self, text: str) -> list[Term]:
        """The terms `text` holds, in order: whole words, case-insensitively, at each place the
        longest that starts there; matches never overlap, and a term counts as often as it occurs.
        A walk down the terms' index from each token: the work is bounded by the text's tokens
        times the longest term's, whatever the number of terms."""
        key = hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).digest()
        if (known := self._found.get(key)) is not None:
            return known
        lowered, found = text.lower(), []
        tokens = [(m.start(), m.end(), m.group()) for m in _TOKEN.finditer(lowered)]
        i = 0
        while i < len(tokens):
            node, j, best = self._trie, i, None
            while j < len(tokens) and node is not None:
                key = tokens[j][2] if j == i else lowered[tokens[j - 1][1] : tokens[j][0]] + tokens[j][2]
                node = node.get(key)
                j += 1
                if node is not None and _TERM in node:
                    best = (j, node[_TERM])
            if best is None:
                i += 1
                continue
            i = best[0]
            found.append(best[1])
        if len(self._found) >= _REMEMBERED:
            self._found.clear()
        self._found[key] = found
        return found

    def __len__(self) -> int:
        return len(self.terms)


_TOKEN = re.compile(r"\w+|[^\w\s]")  # a word, or one character of punctuation or a symbol
_TERM = ""  # the key under which a trie node holds the term that ends there (no token is empty)
_REMEMBERED = 4096  # texts whose matches a glossary keeps


def _tokens(text: str) -> list[tuple[str, str]]:
    """(what lies before it since the last token, the token) for each token of `text`."""
    out, end = [], None
    for m in _TOKEN.finditer(text):
        out.append(("" if end is None else text[end : m.start()], m.group()))
        end = m.end()
    return out


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
