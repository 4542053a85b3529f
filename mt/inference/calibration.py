"""Fitting a run's confidence calibrator (mt/inference/confidence.py) on sentences with references.

The model translates them as it will in use (the recipe's decoding); each translation's features are
labelled by its reference: a sentence is acceptable when its chrF is at least `ACCEPTABLE_CHRF`, a
word right when the reference holds it (`word_tags`). A share of the outputs is also replaced by the
failures that probabilities miss (a loop, a copy of the source, another sentence's source text),
scored by the model as if it had written them and labelled unacceptable, so that the detectors'
weights are learned too. Two logistic regressions are fitted, one for sentences, one for words.
"""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import torch
from sacrebleu.metrics import CHRF

from mt.checkpoint import fingerprint, run_and_checkpoint
from mt.errors import UserError
from mt.inference.confidence import Calibrator, Logistic, bare, length_ratio, word_features, words_of

AT_TRAINING_END = 1500  # validation sentences the end of training fits on: under a minute of beam search on 2 cores
ACCEPTABLE_CHRF = 30.0  # a sentence's chrF from which a reader gets its meaning, if not its style
INJECTED_SHARE = 0.15  # of the outputs, also seen as one of the three failures
L2 = 1e-3  # the regressions' weight decay, on standardised features
_chrf = CHRF()


@dataclass
class Sample:
    """A translation to learn from: its source and reference, and what the model made of it."""

    source: str
    reference: str
    text: str
    pieces: list[str]
    logprobs: list[float]
    injected: bool = False  # a failure made up from the source (`failures`): never acceptable


def sentence_chrf(text: str, reference: str) -> float:
    return _chrf.sentence_score(text, [reference]).score


def word_tags(words: list[str], reference: str) -> list[int]:
    """1 for each output word the reference holds (lower-cased, outer punctuation aside; each of the
    reference's words matched once, in output order), 0 for the rest: a word-order-free stand-in for
    the WMT quality-estimation tags, which align the output to a post-edit."""
    left = Counter(bare(w) for w in reference.split())
    tags = []
    for word in words:
        key = bare(word)
        tags.append(int(left[key] > 0))
        left[key] -= 1
    return tags


def failures(samples: list[Sample], rng: random.Random) -> list[tuple[int, str]]:
    """(index, text) of outputs to see as failures: for a share of the samples, in turn, a loop (the
    output's first words repeated), a copy of the source, or another sentence's source."""
    picked = rng.sample(range(len(samples)), max(1, int(len(samples) * INJECTED_SHARE)))
    made = []
    for n, i in enumerate(picked):
        kind = n % 3
        if kind == 0:
            words = (samples[i].text.split() or samples[i].source.split())[:3]
            made.append((i, " ".join(words * max(4, len(samples[i].text.split()) // 2))))
        elif kind == 1:
            made.append((i, samples[i].source))
        else:
            other = rng.randrange(len(samples) - 1) if len(samples) > 1 else 0
            made.append((i, samples[other + (other >= i)].source if len(samples) > 1 else samples[i].source))
    return made


def fit_logistic(x: list[list[float]], y: list[int], steps: int = 200) -> Logistic:
    """A logistic regression of `y` (0 or 1) on `x`, standardised, with a little weight decay."""
    data = torch.tensor(x, dtype=torch.float64)
    target = torch.tensor(y, dtype=torch.float64)
    mean, scale = data.mean(dim=0), data.std(dim=0).clamp(min=1e-6)
    z = (data - mean) / scale
    w = torch.zeros(z.size(1), dtype=torch.float64, requires_grad=True)
    b = torch.zeros((), dtype=torch.float64, requires_grad=True)
    optimizer = torch.optim.LBFGS([w, b], max_iter=steps, line_search_fn="strong_wolfe")

    def loss():
        optimizer.zero_grad()
        value = torch.nn.functional.binary_cross_entropy_with_logits(z @ w + b, target) + L2 * (w @ w)
        value.backward()
        return value

    optimizer.step(loss)
    return Logistic(w.detach().tolist(), float(b.detach()), mean.tolist(), scale.tolist())


def collect(translator, sources: list[str], references: list[str], options=None, batch_size: int = 64):
    """Each source's translation by `translator` (mt's engine), as a Sample."""
    found = translator.translate(sources, options, batch_size=batch_size, hypotheses=True, warn_truncated=False)
    return [Sample(s, r, h[0].text, h[0].tokens, h[0].logprobs) for s, r, h in zip(sources, references, found)]


def with_failures(translator, samples: list[Sample], seed: int = 1) -> list[Sample]:
    """`samples` and, for a share of them, the same source with a failure as its output (`failures`),
    its tokens scored by the model."""
    made = failures(samples, random.Random(seed))
    ids = translator.tokenizer.encode_batch([text for _, text in made], "tgt")
    ids = [x[: translator.max_src_tokens] for x in ids]
    logprobs = translator.token_logprobs([samples[i].source for i, _ in made], ids)
    return samples + [
        Sample(samples[i].source, samples[i].reference, translator.tokenizer.decode(x), translator.pieces(x), lps, True)
        for (i, _), x, lps in zip(made, ids, logprobs)
    ]


def fit(samples: list[Sample], target: str, source: str, acceptable_chrf: float = ACCEPTABLE_CHRF) -> Calibrator:
    """A calibrator fitted on `samples` (translations into `target` from `source`)."""
    kept = [s for s in samples if s.text.strip() and s.reference.strip()]
    if len(kept) < 20:
        raise ValueError(f"a calibrator needs at least 20 translated sentences with references, got {len(kept)}")
    ratios = [length_ratio(s.source, s.reference) for s in kept]
    mean = sum(ratios) / len(ratios)
    std = max((sum((r - mean) ** 2 for r in ratios) / len(ratios)) ** 0.5, 0.05)
    calibrator = Calibrator.untrained()
    calibrator.ratio_mean, calibrator.ratio_std = mean, std
    sources, texts, logprobs = ([getattr(s, name) for s in kept] for name in ("source", "text", "logprobs"))
    x = calibrator.features(sources, texts, logprobs, target, source)
    y = [int(not s.injected and sentence_chrf(s.text, s.reference) >= acceptable_chrf) for s in kept]
    if len(set(y)) < 2:
        raise ValueError(f"every sentence is on one side of chrF {acceptable_chrf:g}: nothing to calibrate on")
    calibrator.sentence = fit_logistic(x, y)
    word_x, word_y = [], []
    for s, features in zip(kept, x):
        words = words_of(s.pieces, s.logprobs)
        word_x += word_features(words, features[0], s.source)
        word_y += word_tags([w for w, _ in words], s.reference)
    calibrator.word = fit_logistic(word_x, word_y) if len(set(word_y)) == 2 else calibrator.word
    calibrator.fitted = True
    calibrator.about = {
        "sentences": len(kept),
        "acceptable_chrf": acceptable_chrf,
        "acceptable_share": round(sum(y) / len(y), 4),
        "words": len(word_y),
        "right_word_share": round(sum(word_y) / max(len(word_y), 1), 4),
    }
    return calibrator


def validation_pairs(cfg, most: int | None = None) -> tuple[list[str], list[str]]:
    """The sources and references of every validation set the run's recipe names; with `most`, an
    equal share of that many from each (a fixed draw)."""
    from mt.data.corpora import columns, load_pairs  # imports `datasets`, slow to load

    d = cfg.data
    specs = d.valid if isinstance(d.valid, list) else [d.valid] if d.valid else []
    if not specs:
        raise UserError("the run's recipe names no data.valid set; pass --src FILE --ref FILE")
    sources, references = [], []
    for spec in specs:
        src, ref = columns(load_pairs(spec, "valid", d.src_lang, d.tgt_lang), "src", "tgt")
        rows = range(len(src))
        if most is not None and len(src) > most // len(specs):
            rows = sorted(random.Random(len(src)).sample(rows, most // len(specs)))
        sources += [src[i] for i in rows]
        references += [ref[i] for i in rows]
    return sources, references


def calibrate_run(translator, run: str | Path, sources: list[str], references: list[str], options=None) -> Calibrator:
    """Fit the calibrator of the run `translator` loaded from `run` (a run directory or a checkpoint
    in one) on `sources` and `references`, and keep it in the run directory as confidence.json."""
    run_dir, checkpoint = run_and_checkpoint(run)
    if checkpoint is None:
        raise UserError(f"no trained model in {run_dir}")
    data = translator.cfg.data
    samples = with_failures(translator, collect(translator, sources, references, options))
    try:
        calibrator = fit(samples, data.tgt_lang, data.src_lang)
    except ValueError as e:
        raise UserError(f"cannot fit a confidence calibrator: {e}") from None
    calibrator.model = fingerprint(checkpoint)
    calibrator.save(run_dir)
    translator.forget_calibrator()
    return calibrator
