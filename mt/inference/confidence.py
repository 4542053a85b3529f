"""How far to trust a translation: a confidence for the sentence and for each of its words.

Computed from what the search already has, each output token's log-probability under the model
(`Hypothesis.logprobs`), and from the texts themselves:

- sentence features: the mean and the minimum token log-probability, the output's length, and four
  detectors of the failures a model's probabilities miss: repeated n-grams (a loop), output that
  copies its source, a length ratio far from the references', output not in the target language;
- word features (as Firefox's translations mark doubtful words): the mean and the minimum
  log-probability of the word's pieces, their count, and the sentence's mean log-probability;
  and whether the source holds the word, and whether it has no letters.

A `Calibrator` maps each feature vector through a logistic regression to a probability: that the
sentence is acceptable (its chrF against a reference at least `acceptable_chrf`) and that a word is
right (found in the reference). It is fitted on validation data (mt/inference/calibration.py) and
kept in the run directory as confidence.json; without one, `Calibrator.untrained()` is a fixed rule
on the same features. Word tags and flags use 0.5: below it a word or sentence is doubtful.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path

from mt.data.vocab import without_surrogates
from mt.errors import UserError
from mt.files import atomic_write

FILE = "confidence.json"
SENTENCE_FEATURES = ("mean_logprob", "min_logprob", "log_length", "loop", "copy", "length_ratio", "foreign")
WORD_FEATURES = ("word_mean_logprob", "word_min_logprob", "pieces", "sentence_mean_logprob", "in_source", "no_letters")
# Where each detector says a failure, whatever the calibrator: the flags a translation carries.
FLAG_AT = {"loop": 0.3, "copy": 0.6, "length_ratio": 3.0, "foreign": 0.5}
FLAG_NAMES = {"loop": "loop", "copy": "copy", "length_ratio": "length", "foreign": "language"}
REFIT = "python -m mt.calibrate"
WORD_START = "\u2581"  # SentencePiece's mark of a piece that begins a word


@dataclass
class Confidence:
    """One translation's confidence: the sentence's, each output word's, the detectors that fired."""

    score: float  # the probability that the translation is acceptable
    words: list[tuple[str, float]] = field(default_factory=list)  # each word and the probability it is right
    flags: list[str] = field(default_factory=list)  # loop, copy, length, language
    withheld: bool = False  # under the user's threshold: not passed off as a translation

    def to_dict(self) -> dict:
        return {
            "confidence": round(self.score, 4),
            "words": [{"word": w, "confidence": round(p, 4)} for w, p in self.words],
            "flags": list(self.flags),
        } | ({"withheld": True} if self.withheld else {})


WITHHELD = ("source", "drop")  # what stands in for a withheld translation: its source sentence, or nothing


@dataclass(frozen=True)
class Trust:
    """Confidence asked for: each translation judged, and where `threshold` is set, those under it
    withheld: `withheld` "source" puts the source sentence in its place, "drop" leaves it out."""

    threshold: float | None = None
    withheld: str = "source"

    def __post_init__(self):
        if self.threshold is not None and not 0.0 <= self.threshold <= 1.0:
            raise UserError(f"a minimum confidence is a probability from 0 to 1, got {self.threshold:g}")
        if self.withheld not in WITHHELD:
            raise UserError(
                f"a withheld translation is replaced by one of {', '.join(WITHHELD)}, not {self.withheld!r}"
            )

    def apply(self, translator, sources: list[str], best: list) -> tuple[list[str], list[Confidence]]:
        """The texts to give for `sources` (`best`: each one's best hypothesis) and their confidences."""
        judged = translator.confidence(sources, best) if sources else []
        texts = []
        for source, h, c in zip(sources, best, judged):
            c.withheld = self.threshold is not None and bool(h.ids) and c.score < self.threshold
            # a withheld sentence's source stands in as text UTF-8 can carry (a lone surrogate as U+FFFD)
            texts.append((without_surrogates(source) if self.withheld == "source" else "") if c.withheld else h.text)
        return texts, judged


def words_of(pieces: list[str], logprobs: list[float]) -> list[tuple[str, list[float]]]:
    """The output's words (as its detokenised text splits them) with their pieces' log-probabilities:
    a piece that begins with the word mark starts a word. `logprobs` may hold one more (<END>'s)."""
    words: list[tuple[str, list[float]]] = []
    for piece, logprob in zip(pieces, logprobs):
        text = piece.replace(WORD_START, "")
        if piece.startswith(WORD_START) or not words:
            words.append((text, [logprob]))
        else:
            words[-1] = (words[-1][0] + text, words[-1][1] + [logprob])
    merged: list[tuple[str, list[float]]] = []
    for text, lps in words:  # a lone mark ("▁" then ",") is no word of its own
        if merged and not merged[-1][0]:
            text, lps = text, merged.pop()[1] + lps
        merged.append((text, lps))
    return [(t, lps) for t, lps in merged if t]


def repeated_share(words: list[str]) -> float:
    """The share of the output's word 2- and 3-grams that repeat an earlier one (the larger): near 1
    in a loop, near 0 in a sentence."""
    found = 0.0
    for n in (2, 3):
        grams = [tuple(words[i : i + n]) for i in range(len(words) - n + 1)]
        if len(grams) >= 3:
            found = max(found, 1.0 - len(set(grams)) / len(grams))
    return found


def _char_grams(text: str, n: int = 4) -> set[str]:
    text = " ".join(text.lower().split())
    return {text[i : i + n] for i in range(len(text) - n + 1)}


def copied_share(source: str, output: str) -> float:
    """The share of the output's character 4-grams (lower-cased) that its source holds: near 1 for
    a copy; names, numbers and cognates give a translation some."""
    out = _char_grams(output)
    return len(out & _char_grams(source)) / len(out) if out else 0.0


def length_ratio(source: str, output: str) -> float:
    """log((output characters + 1) / (source characters + 1))."""
    return math.log((len(output.strip()) + 1) / (len(source.strip()) + 1))


def foreign_share(outputs: list[str], target: str, source: str) -> list[float]:
    """For each output, the probability that it is not in the `target` language (among the two and
    the languages an output could stray into), scaled down on outputs under five words, whose
    detection has little to go on."""
    from mt.languages import detect_ranked

    candidates = list(dict.fromkeys([target, source, "de", "es", "it", "pt", "nl"]))
    found = []
    for text, ranked in zip(outputs, detect_ranked(outputs, candidates)):
        p_target = dict(ranked).get(target, 0.0)
        found.append((1.0 - p_target) * min(1.0, len(text.split()) / 5))
    return found


def sentence_features(
    source: str, text: str, logprobs: list[float], foreign: float, ratio_mean: float, ratio_std: float
):
    """The features of one translation, in SENTENCE_FEATURES' order."""
    lps = logprobs or [0.0]
    words = text.lower().split()
    ratio = abs(length_ratio(source, text) - ratio_mean) / ratio_std
    return [
        sum(lps) / len(lps),
        min(lps),
        math.log(len(lps)),
        repeated_share(words),
        copied_share(source, text),
        ratio,
        foreign,
    ]


def word_features(words: list[tuple[str, list[float]]], sentence_mean: float, source: str) -> list[list[float]]:
    """Each word's features, in WORD_FEATURES' order: its pieces' mean and least log-probability,
    their count, the sentence's mean; and whether the source holds it (names and numbers pass
    through) and whether it has no letters (punctuation, figures)."""
    held = {bare(w) for w in source.split()}
    return [
        [
            sum(lps) / len(lps),
            min(lps),
            float(len(lps)),
            sentence_mean,
            float(bare(word) in held),
            float(not any(ch.isalpha() for ch in word)),
        ]
        for word, lps in words
    ]


def bare(word: str) -> str:
    """A word lower-cased, without the punctuation around it."""
    return re.sub(r"^\W+|\W+$", "", word.lower()) or word.lower()


@dataclass
class Logistic:
    """A logistic regression over standardised features: p = sigmoid(w . (x - mean) / scale + b)."""

    weights: list[float]
    bias: float
    mean: list[float]
    scale: list[float]

    def __call__(self, x: list[float]) -> float:
        z = self.bias + sum(w * (v - m) / s for w, v, m, s in zip(self.weights, x, self.mean, self.scale))
        return 1.0 / (1.0 + math.exp(-max(min(z, 50.0), -50.0)))


@dataclass
class Calibrator:
    """Features to probabilities, for sentences and words; `fitted` says whether it learned them."""

    sentence: Logistic
    word: Logistic
    ratio_mean: float = 0.0  # the references' log length ratio to their sources, mean and spread
    ratio_std: float = 0.35
    fitted: bool = False
    model: str = ""  # the fingerprint of the model it was fitted to
    about: dict = field(default_factory=dict)  # what it was fitted on, and how well it did there

    @classmethod
    def untrained(cls) -> Calibrator:
        """The fallback: the sentence's mean token probability, pulled down hard by any detector
        that fires; a word's mean piece probability. No data behind it, and so said."""
        n = len(SENTENCE_FEATURES)
        # z = 4 (mean_logprob + 0.7) - 3 (loop / 0.3 + copy / 0.6 + ratio / 3 + foreign / 0.5 - 1, where over)
        sentence = Logistic([4.0, 0, 0, -10.0, -5.0, -1.0, -6.0], 2.8, [0.0] * n, [1.0] * n)
        word = Logistic([4.0, 0, 0, 0, 0, 0], 2.8, [0.0] * 6, [1.0] * 6)
        return cls(sentence, word)

    def save(self, run_dir: Path) -> Path:
        path = Path(run_dir) / FILE
        saved = {
            "model": self.model,
            "sentence": vars(self.sentence) | {"features": SENTENCE_FEATURES},
            "word": vars(self.word) | {"features": WORD_FEATURES},
            "length_ratio": {"mean": self.ratio_mean, "std": self.ratio_std},
            "about": self.about,
        }
        atomic_write(path, lambda tmp: Path(tmp).write_text(json.dumps(saved, indent=1) + "\n", encoding="utf-8"))
        return path

    @classmethod
    def load(cls, path: Path, fingerprint: str) -> Calibrator:
        """The calibrator saved at `path`, refused where it was fitted to another model than `fingerprint`'s."""
        try:
            saved = json.loads(Path(path).read_text(encoding="utf-8"))
            parts = [
                Logistic(**{k: saved[part][k] for k in ("weights", "bias", "mean", "scale")})
                for part in ("sentence", "word")
            ]
            names = (tuple(saved["sentence"]["features"]), tuple(saved["word"]["features"]))
            ratio = saved["length_ratio"]
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise UserError(f"{path}: not a confidence calibrator mt can read ({e}); fit one: {REFIT}") from e
        if names != (SENTENCE_FEATURES, WORD_FEATURES):
            raise UserError(f"{path} was fitted on other features; fit one: {REFIT}")
        if saved["model"] != fingerprint:
            raise UserError(f"{path} was fitted to another model than this one; fit one: {REFIT}")
        return cls(*parts, ratio["mean"], ratio["std"], True, saved["model"], saved.get("about", {}))

    @staticmethod
    def fitted_to(path: Path) -> str:
        """The fingerprint of the model the calibrator at `path` says it was fitted to ("" if unreadable)."""
        try:
            return str(json.loads(Path(path).read_text(encoding="utf-8")).get("model", ""))
        except (OSError, ValueError, AttributeError):
            return ""

    def features(self, sources, texts, logprobs, target: str, source_lang: str) -> list[list[float]]:
        """Each translation's sentence features (`logprobs`: its tokens', <END>'s included)."""
        foreign = foreign_share(texts, target, source_lang)
        return [
            sentence_features(s, t, lps, f, self.ratio_mean, self.ratio_std)
            for s, t, lps, f in zip(sources, texts, logprobs, foreign)
        ]

    def judge(self, features: list[float], words: list[tuple[str, list[float]]], source: str = "") -> Confidence:
        """One translation's confidence from its sentence features, its words and its source."""
        flags = [FLAG_NAMES[name] for name, at in FLAG_AT.items() if features[SENTENCE_FEATURES.index(name)] > at]
        word_scores = [self.word(x) for x in word_features(words, features[0], source)]
        return Confidence(self.sentence(features), [(w, p) for (w, _), p in zip(words, word_scores)], flags)


def calibrator_for(run: str | Path, warn=None) -> Calibrator:
    """The calibrator of the run directory (or checkpoint file) `run`: its confidence.json, checked
    against the checkpoint it reads, else the untrained rule, which `warn` is told of."""
    from mt.checkpoint import fingerprint, run_and_checkpoint

    run_dir, checkpoint = run_and_checkpoint(run)
    path = run_dir / FILE
    if checkpoint is None or not path.is_file():
        if warn:
            warn(f"{run_dir} has no {FILE}: confidence is an untrained rule; fit one: {REFIT} --model {run_dir}")
        return Calibrator.untrained()
    return Calibrator.load(path, fingerprint(checkpoint))


def assess(translator, sources: list[str], hypotheses: list, calibrator: Calibrator) -> list[Confidence]:
    """Each translation's confidence (`hypotheses`: each source's best, as `translate` returns them
    with hypotheses=True). Outputs whose tokens' log-probabilities the engine did not give are scored
    by it (forced decoding); an empty output is no translation, with confidence 0."""
    missing = [i for i, h in enumerate(hypotheses) if h.ids and not h.logprobs]
    if missing:
        scored = translator.token_logprobs([sources[i] for i in missing], [hypotheses[i].ids for i in missing])
        for i, logprobs in zip(missing, scored):
            hypotheses[i].logprobs = logprobs
    data = translator.cfg.data
    texts = [h.text for h in hypotheses]
    features = calibrator.features(sources, texts, [h.logprobs for h in hypotheses], data.tgt_lang, data.src_lang)
    found = []
    for source, h, x in zip(sources, hypotheses, features):
        found.append(calibrator.judge(x, words_of(h.tokens, h.logprobs), source) if h.ids else Confidence(0.0))
    return found
