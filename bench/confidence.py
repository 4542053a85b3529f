"""How far the confidence can be trusted: the calibrator fitted on the run's validation sets, then
measured on its test sets, none of which it saw.

    python bench/confidence.py [--model runs/fr_en] [--fit-sentences 1500] [--sets newstest:newstest2013 ...]

For each test set, with the recipe's decoding (beam 5):
- Pearson r between sentence confidence and sentence chrF against the reference, beside the
  length-normalised log-probability's (the plain glass-box signal);
- words: the F1 of "bad" tags (confidence under 0.5) against the reference's tags (a word the
  reference does not hold is bad: mt/inference/calibration.py), beside always-OK's (0) and the
  untrained rule's;
- injected failures: a tenth of the outputs replaced by a loop, a copy of the source or another
  sentence's source, each scored by the model: the share of them under 0.5, and of the rest;
- abstaining: corpus BLEU of the 80% most confident sentences against all of them;
- what each figure could be on this model: the share of sentences under chrF 30 (what a calibrated
  score flags), always-bad's word F1, and abstaining by the mean log-probability and by the truth
  (each sentence's chrF, and its BLEU): the oracles no confidence can beat;
- cost: seconds of beam search, and of the confidence after it (features, detectors, regressions).
Writes bench/results/confidence.json.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path

import torch
from sacrebleu.metrics import BLEU

from mt.data.corpora import columns, load_pairs, spec_label
from mt.inference.calibration import (
    ACCEPTABLE_CHRF,
    AT_TRAINING_END,
    Sample,
    calibrate_run,
    failures,
    sentence_chrf,
    validation_pairs,
    with_failures,
    word_tags,
)
from mt.inference.confidence import Calibrator, assess, words_of
from mt.inference.translator import Translator

SETS = ["newstest:newstest2013", "newstest:newsdiscusstest2015", "multi30k"]


def pearson(a: list[float], b: list[float]) -> float:
    x, y = torch.tensor(a, dtype=torch.float64), torch.tensor(b, dtype=torch.float64)
    x, y = x - x.mean(), y - y.mean()
    return float((x * y).sum() / (x.norm() * y.norm()).clamp(min=1e-12))


def bad_f1(predicted_bad: list[bool], truly_bad: list[bool]) -> float:
    hits = sum(p and t for p, t in zip(predicted_bad, truly_bad))
    said, true = sum(predicted_bad), sum(truly_bad)
    return 2 * hits / (said + true) if said + true else 0.0


def word_figures(samples: list[Sample], judged, rule_judged) -> dict:
    """The F1 of bad-word tags: the calibrated, the untrained rule's, always-OK's."""
    truth, calibrated, rule = [], [], []
    for s, c, r in zip(samples, judged, rule_judged):
        words = [w for w, _ in words_of(s.pieces, s.logprobs)]
        truth += [t == 0 for t in word_tags(words, s.reference)]
        calibrated += [p < 0.5 for _, p in c.words]
        rule += [p < 0.5 for _, p in r.words]
    return {
        "words": len(truth),
        "bad_share": round(sum(truth) / max(len(truth), 1), 4),
        "f1_bad": round(bad_f1(calibrated, truth), 4),
        "f1_bad_untrained": round(bad_f1(rule, truth), 4),
        "f1_bad_always_ok": 0.0,
        "f1_bad_always_bad": round(bad_f1([True] * len(truth), truth), 4),
    }


def injected_figures(translator, samples: list[Sample], calibrator: Calibrator) -> dict:
    """The share of injected failures under 0.5, and of the outputs left as they were."""
    made = with_failures(translator, samples, seed=7)[len(samples) :]
    touched = {i for i, _ in failures(samples, random.Random(7))}
    judged = judge(translator, made, calibrator)
    clean = judge(translator, [s for i, s in enumerate(samples) if i not in touched], calibrator)
    return {
        "injected": len(made),
        "injected_flagged": round(sum(c.score < 0.5 for c in judged) / max(len(judged), 1), 4),
        "untouched_flagged": round(sum(c.score < 0.5 for c in clean) / max(len(clean), 1), 4),
    }


def judge(translator, samples: list[Sample], calibrator: Calibrator):
    from mt.inference.search import Hypothesis

    hyps = [Hypothesis(s.text, 0.0, [0] * len(s.pieces), s.pieces, s.logprobs) for s in samples]
    return assess(translator, [s.source for s in samples], hyps, calibrator)


def abstaining(samples: list[Sample], scores: list[float], share: float = 0.2) -> dict:
    keep = sorted(range(len(samples)), key=lambda i: scores[i], reverse=True)[: round(len(samples) * (1 - share))]
    bleu = BLEU()
    whole = bleu.corpus_score([s.text for s in samples], [[s.reference for s in samples]]).score
    kept = bleu.corpus_score([samples[i].text for i in keep], [[samples[i].reference for i in keep]]).score
    return {"bleu_all": round(whole, 2), "bleu_most_confident_80": round(kept, 2), "gain": round(kept - whole, 2)}


def ceilings(samples: list[Sample], rows: list[int], chrf: list[float], mean_logprob: list[float]) -> dict:
    """What the figures could be on this model's outputs: the share a calibrated score flags, and
    the BLEU gained by abstaining on the mean log-probability and on the truth (oracles)."""
    by_row = {i: n for n, i in enumerate(rows)}

    def ranked(values: list[float]) -> list[float]:  # an empty output ranks last
        return [values[by_row[i]] if i in by_row else float("-inf") for i in range(len(samples))]

    sentence_bleu = BLEU(effective_order=True)
    truth_bleu = [sentence_bleu.sentence_score(samples[i].text, [samples[i].reference]).score for i in rows]
    return {
        "unacceptable_share": round(sum(c < ACCEPTABLE_CHRF for c in chrf) / max(len(chrf), 1), 4),
        "gain_mean_logprob": abstaining(samples, ranked(mean_logprob))["gain"],
        "gain_oracle_chrf": abstaining(samples, ranked(chrf))["gain"],
        "gain_oracle_sentence_bleu": abstaining(samples, ranked(truth_bleu))["gain"],
    }


def measure(translator, spec: str, calibrator: Calibrator) -> dict:
    d = translator.cfg.data
    src, ref = columns(load_pairs(spec, "test", d.src_lang, d.tgt_lang), "src", "tgt")
    start = time.perf_counter()
    found = translator.translate(src, hypotheses=True, warn_truncated=False)
    decode_s = time.perf_counter() - start
    best = [h[0] for h in found]
    start = time.perf_counter()
    judged = assess(translator, src, best, calibrator)
    confidence_s = time.perf_counter() - start
    samples = [Sample(s, r, h.text, h.tokens, h.logprobs) for s, r, h in zip(src, ref, best)]
    rows = [i for i, s in enumerate(samples) if s.text.strip()]
    chrf = [sentence_chrf(samples[i].text, samples[i].reference) for i in rows]
    mean_logprob = [sum(samples[i].logprobs) / len(samples[i].logprobs) for i in rows]
    return {
        "sentences": len(src),
        "pearson_confidence_chrf": round(pearson([judged[i].score for i in rows], chrf), 4),
        "pearson_mean_logprob_chrf": round(pearson(mean_logprob, chrf), 4),
        **word_figures(samples, judged, assess(translator, src, best, Calibrator.untrained())),
        **injected_figures(translator, samples, calibrator),
        **abstaining(samples, [c.score for c in judged]),
        **ceilings(samples, rows, chrf, mean_logprob),
        "decode_s": round(decode_s, 2),
        "confidence_s": round(confidence_s, 2),
        "confidence_cost": round(confidence_s / decode_s, 4),
    }


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="runs/fr_en")
    p.add_argument(
        "--fit-sentences", type=int, default=AT_TRAINING_END, help="validation sentences to fit on (0: keep the run's)"
    )
    p.add_argument("--sets", nargs="+", default=SETS)
    p.add_argument("--out", default="bench/results/confidence.json")
    args = p.parse_args(argv)
    torch.set_num_threads(2)
    translator = Translator.load(args.model)
    if args.fit_sentences:
        start = time.perf_counter()
        calibrator = calibrate_run(translator, args.model, *validation_pairs(translator.cfg, args.fit_sentences))
        print(f"fitted on {calibrator.about} in {time.perf_counter() - start:.0f} s", file=sys.stderr)
    calibrator = translator.calibrator()
    results = {"model": args.model, "calibrator": calibrator.about, "sets": {}}
    for spec in args.sets:
        results["sets"][spec_label(spec)] = figures = measure(translator, spec, calibrator)
        print(spec_label(spec), json.dumps(figures), file=sys.stderr)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
