"""A glossary enforced by constrained beam search: the file and its one-line errors, the matching,
the constraint bookkeeping, and the search itself on the tiny model (which says "the black cat"
for "le chat noir": a term makes it say what it would not), through the API and the command (the
server's routes: tests/serving/test_serve.py; the CTranslate2 engine's refusal: test_ctranslate2.py)."""

import json
from dataclasses import dataclass

import pytest
from helpers import cli

from mt.errors import UserError
from mt.glossary import Glossary, read_glossary
from mt.inference.constraints import Constraints, word_continuations


@dataclass(frozen=True)
class Progress:
    """One hypothesis's progress, the scalar reference the search's tensors (`_State`) are tested against."""

    met: int = 0  # a bit per constraint met
    within: int = -1  # the constraint partway through (-1: none)
    alive: tuple[int, ...] = ()  # its variants still matching
    at: int = 0  # tokens of it matched
    fresh: int = -1  # the constraint the last token completed: met only if the next starts a new word


class Reference(Constraints):
    """The constraint rules for one hypothesis at a time, in plain Python."""

    def bank(self, p: Progress) -> int:
        met = sum(w for i, w in enumerate(self.weights) if p.met >> i & 1)
        partial = p.within >= 0 and not p.met >> p.within & 1
        return met + (min(p.at, self.weights[p.within] - 1) if partial else 0)

    def advance(self, p: Progress, token: int, continues: bool = False) -> Progress:
        """The progress after `token` (`continues`: a piece that goes on the word before it)."""
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
        variants = self.items[i]
        completed = any(len(variants[v]) == at for v in alive)
        longer = tuple(v for v in alive if len(variants[v]) > at)
        met |= (1 << i) if completed else 0
        return Progress(met, i if longer else -1, longer, at if longer else 0, i if completed else -1)

    def advancing(self, p: Progress) -> list[int]:
        tokens = {self.items[p.within][v][p.at] for v in p.alive} if p.within >= 0 else set()
        tokens |= {seq[0] for i, c in enumerate(self.items) if not p.met >> i & 1 for seq in c}
        return sorted(tokens)


def glossary_file(tmp_path, text: str, name="terms.tsv"):
    path = tmp_path / name
    path.write_bytes(text.encode() if isinstance(text, str) else text)
    return path


def test_a_glossary_file_holds_terms_comments_variants_and_multi_word_terms(tmp_path):
    path = glossary_file(tmp_path, "# nos termes\n\nchat\tdog\nchat noir\tblack dog|dark dog\nFirefox\tFirefox\n")
    g = read_glossary(path)
    assert [(t.source, t.targets) for t in g.terms] == [
        ("chat noir", ("black dog", "dark dog")),
        ("Firefox", ("Firefox",)),
        ("chat", ("dog",)),
    ]


@pytest.mark.parametrize(
    "content, message",
    [
        ("chat\n", "line 1: expected 'source term<TAB>target term'"),
        ("chat\tdog\nnoir\t\n", "line 2: expected"),
        ("a\tb\tc\n", "line 1: expected"),
        (b"chat\tdog\nchien\t\xff\n", "line 2: not UTF-8 text"),
        ("# nothing\n\n", "holds no terms"),
    ],
)
def test_a_malformed_glossary_file_is_one_line_naming_what_and_where(tmp_path, content, message):
    with pytest.raises(UserError, match=message) as caught:
        read_glossary(glossary_file(tmp_path, content))
    assert "\n" not in str(caught.value)


def test_terms_match_whole_words_case_insensitively_longest_first():
    g = Glossary.of([("chat", "dog"), ("chat noir", "black dog"), ("C++", "C++"), ("homme", "guy")])
    found = g.find("Le Chat noir, le chat. Un chaton, un HOMME et du c++ ; hommes")
    assert [t.source for t in found] == ["chat noir", "chat", "homme", "C++"]


def _scanned(glossary: Glossary, text: str) -> list:
    """The terms `text` holds, found the slow way: at each word or mark, every term tried from
    there, longest first, never overlapping, and none ending inside a word: what the index must
    agree with."""
    import re

    lowered, found, free = text.lower(), [], 0
    for token in re.finditer(r"\w+|[^\w\s]", lowered):
        if token.start() < free:
            continue
        for term in glossary.terms:  # longest first
            source, start = term.source.lower(), token.start()
            end = start + len(source)
            inside_a_word = re.match(r"\w\w", source[-1] + lowered[end : end + 1])
            if lowered.startswith(source, start) and not inside_a_word:
                found.append(term)
                free = end
                break
    return found


def test_the_index_finds_what_trying_every_term_finds_and_bounds_a_terms_length():
    import random

    rng = random.Random(7)
    words = ["le", "la", "chat", "chats", "noir", "c++", "e-mail", "l'", "réseau", "de", "neurones", "."]
    for _ in range(200):
        terms = [" ".join(rng.choice(words) for _ in range(rng.randint(1, 3))) for _ in range(rng.randint(1, 12))]
        glossary = Glossary.of([(t, "x") for t in terms])
        text = " ".join(rng.choice(words) for _ in range(rng.randint(0, 30)))
        assert glossary.find(text) == _scanned(glossary, text), (terms, text)
    with pytest.raises(UserError, match="not sentences"):
        Glossary.of([(" ".join(["le"] * 33), "x")])


def test_a_constraint_is_continued_abandoned_met_and_not_met_by_a_longer_word():
    c = Reference([((5, 6),), ((7,), (7, 8))])  # a two-token term; a term with variants "x" and "x y"
    p = c.advance(Progress(), 5)
    assert (p.within, p.at, c.bank(p)) == (0, 1, 1)
    assert c.advance(p, 9) == Progress()  # another token abandons it
    met = c.advance(p, 6)
    assert met.met == 1 and c.bank(met) == 2 and c.advance(met, 9).met == 1
    assert c.advance(met, 9, continues=True).met == 0  # 5 6 then a piece of the same word: a longer word
    short = c.advance(Progress(), 7)
    assert short.met == 2 and short.within == 1  # "x" met, "x y" still possible
    assert c.advance(short, 8).met == 2 and c.advance(short, 8, continues=True).met == 2  # "x y" met
    assert c.advance(short, 9, continues=True).met == 0 and c.need == 3
    assert sorted(c.advancing(Progress())) == [5, 7]
    assert word_continuations(["<pad>", "\u2581cat", "s", ".", "at"]).tolist() == [False, False, True, False, True]


def translate(run_dir, sentences, terms, **options):
    from mt.inference.translator import Translator

    return Translator.load(run_dir).translate(sentences, glossary=Glossary.of(terms), **options)


def test_a_term_goes_where_the_model_would_not_put_it_and_other_sentences_are_left_alone(run_dir):
    from mt.inference.translator import Translator

    plain = Translator.load(run_dir).translate(["le chat noir", "le chien blanc"])
    assert plain == ["the black cat", "the white dog"]
    assert translate(run_dir, ["le chat noir", "le chien blanc"], [("chat", "dog")]) == ["the black dog", plain[1]]
    two = translate(run_dir, ["le chat noir"], [("chat", "dog"), ("noir", "white")])[0]
    assert "white" in two.split() and "dog" in two.split() and "cat" not in two
    assert translate(run_dir, ["le chat noir"], [("chat", "small dog")]) == ["the small dog"]  # a multi-word term
    assert translate(run_dir, ["le chat noir"], [("chat", "chat")]) == ["the black chat"]  # not translated


def test_the_search_holds_with_the_cache_off_int8_an_ensemble_documents_and_greedy(run_dir, capsys):
    from mt.inference.documents import translate_lines
    from mt.inference.translator import Translator

    terms = [("chat", "dog")]
    assert translate(run_dir, ["le chat noir"], terms, use_cache=False) == ["the black dog"]
    for translator in (Translator.load(run_dir, quantize="int8"), Translator.load([run_dir, run_dir])):
        assert translator.translate(["le chat noir"], glossary=Glossary.of(terms)) == ["the black dog"]
    translator = Translator.load(run_dir)
    options = translator.options.replace(glossary=Glossary.of(terms))
    assert translate_lines(translator, ["Le chat noir. Le chien blanc."], options).lines[0].count("dog") == 2
    greedy = translator.translate(["le chat noir"] * 2, options, beam=1)
    assert greedy == ["the black dog"] * 2 and capsys.readouterr().err.count("more beams than greedy has") == 1


def test_a_term_the_vocabulary_cannot_write_is_said_once_and_the_translation_goes_on(run_dir, capsys):
    from mt.inference.translator import Translator

    plain = Translator.load(run_dir).translate(["le chat noir", "le chat"])
    assert translate(run_dir, ["le chat noir", "le chat"], [("chat", "Ωmega")]) == plain
    assert capsys.readouterr().err.count("'chat' -> 'Ωmega' has pieces this model's vocabulary lacks") == 1


def test_the_command_takes_a_glossary_and_refuses_a_bad_one_in_one_line(run_dir, tmp_path):
    good = glossary_file(tmp_path, "chat\tdog\n")
    done = cli("mt.translate", "--model", str(run_dir), "--glossary", str(good), "le chat noir", "le chien blanc")
    assert done.returncode == 0 and done.stdout == "the black dog\nthe white dog\n", done.stderr
    bad = glossary_file(tmp_path, "chat dog\n", "bad.tsv")
    refused = cli("mt.translate", "--model", str(run_dir), "--glossary", str(bad), "le chat noir")
    assert refused.returncode == 2 and "bad.tsv, line 1" in refused.stderr and len(refused.stderr.splitlines()) == 1
    (tmp_path / "s.fr").write_text("le chat noir\n")
    (tmp_path / "s.en").write_text("the black dog\n")
    scored = cli("mt.evaluate", "--model", str(run_dir), "--glossary", str(good), "--src", str(tmp_path / "s.fr"),
                 "--ref", str(tmp_path / "s.en"), "--json")  # fmt: skip
    assert scored.returncode == 0 and json.loads(scored.stdout)["chrf"] == 100.0, scored.stderr


def test_a_glossary_constrains_search_not_sampling():
    from mt.decode_options import DecodeOptions

    with pytest.raises(UserError, match="not sampling"):
        DecodeOptions(beam=1, temperature=0.8, glossary=Glossary.of([("chat", "dog")]))


def _progress_of(state, row: int):
    """Row `row` of the tensor bookkeeping as the `Progress` it stands for."""
    met = sum(1 << i for i, m in enumerate(state.met[row].tolist()) if m)
    return met, int(state.within[row]), int(state.at[row]), int(state.fresh[row])


def test_the_tensor_bookkeeping_follows_each_hypothesis_as_the_scalar_rules_do():
    """Random constraints (overlapping prefixes, variants, one-token terms) and random token walks:
    at every step the tensors' progress, bank and advancing tokens are the scalar `Reference`'s."""
    import random

    import torch

    from mt.inference.constraints import DynamicBeamAllocation, _after, _State, _Table

    rng = random.Random(0)
    for _ in range(30):
        sets = []
        for _ in range(3):  # a batch of three sentences, each with its own constraints
            variant = lambda: tuple(rng.randrange(4, 9) for _ in range(rng.randint(1, 3)))  # noqa: E731
            items = [tuple(variant() for _ in range(rng.randint(1, 2))) for _ in range(rng.randint(0, 4))]
            sets.append(Reference(items))
        table, continues = _Table(sets, torch.device("cpu")), torch.tensor([i % 3 == 0 for i in range(10)])
        state, scalar = _State.start(3, table), [Progress() for _ in sets]
        search = DynamicBeamAllocation(4, sets, continues)
        for _ in range(8):
            search.state = state
            advancing = [[t for t in row if t] for row in search.extra_tokens().tolist()]
            assert advancing == [c.advancing(p) for c, p in zip(sets, scalar)]
            tokens = torch.tensor([[rng.randrange(3, 10) for _ in range(4)] for _ in sets])
            after = _after(state, table, tokens, continues)
            banks = after.banks(table.weight.repeat_interleave(4, dim=0))
            for s, (c, p) in enumerate(zip(sets, scalar)):
                for j, token in enumerate(tokens[s].tolist()):
                    q = c.advance(p, token, bool(continues[token]))
                    assert _progress_of(after, 4 * s + j) == (q.met, q.within, q.at, q.fresh)
                    assert int(banks[4 * s + j]) == c.bank(q)
            pick = [rng.randrange(4) for _ in sets]
            state = after.take(torch.tensor([4 * s + j for s, j in enumerate(pick)]))
            scalar = [c.advance(p, int(tokens[s, j]), bool(continues[int(tokens[s, j])]))
                      for s, (c, p, j) in enumerate(zip(sets, scalar, pick))]  # fmt: skip


def test_a_search_told_to_stop_stops_between_steps_with_or_without_terms(run_dir):
    from mt.inference.search import Cancelled
    from mt.inference.translator import Translator

    translator = Translator.load(run_dir)
    for glossary in (None, Glossary.of([("chat", "dog")])):
        asked: list[int] = []

        def stop(asked=asked) -> bool:  # true from the third step
            asked.append(1)
            return len(asked) > 2

        with pytest.raises(Cancelled):
            translator.translate(["le chat noir"], glossary=glossary, stop=stop)
        assert len(asked) == 3


def test_a_glossary_never_widens_the_search_past_the_translators_ceiling(run_dir, monkeypatch):
    from mt.inference import translator as module

    beams = []
    search = module.beam_search
    monkeypatch.setattr(
        module,
        "beam_search",
        lambda models, src, beam, *a, **kw: beams.append(beam) or search(models, src, beam, *a, **kw),
    )
    translator = module.Translator.load(run_dir)
    translator.max_constrained_beam = 3  # a server's --max-beam
    terms = [("chat", "dog"), ("noir", "white"), ("le", "a")]  # more constraint tokens than 3 beams
    out = translator.translate(["le chat noir"], glossary=Glossary.of(terms), beam=2)
    assert beams == [3] and len(out) == 1
