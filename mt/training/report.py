"""The report at the end of training: the best checkpoint scored on the recipe's test sets with the
recipe's decoding, the demo sentence translated, `results.json` written, the next commands shown."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from mt.checkpoint import BEST
from mt.config import Config
from mt.errors import UserError
from mt.files import atomic_write
from mt.inference.metrics import corpus_scores
from mt.training import distillation

DEMO_SENTENCE = {"fr": "les réseaux de neurones sont géniaux!", "en": "neural networks are great!"}
RESULTS = "results.json"


def test_specs(cfg: Config) -> list:
    return cfg.data.test_sets


def translation_report(cfg: Config, run_dir: Path, device: str, log=None) -> dict:
    """Score `best` on each test set with the recipe's beam (a line too long for the model cut at its
    clauses, as mt.translate cuts it, not truncated), translate the demo, write results.json."""
    log = log or sys.stderr
    from mt.data.corpora import columns, load_pairs, spec_label  # imports `datasets`, slow to load
    from mt.inference.documents import translate_lines
    from mt.inference.translator import Translator

    translator = Translator.load(run_dir, device)
    d, beam = cfg.data, cfg.decode.beam
    fit_confidence(translator, run_dir, log)
    results = {
        "checkpoint": str(run_dir / "best.pt"),
        "decoding": f"beam {beam}, length penalty {cfg.decode.length_penalty}; lines past the model's length "
        "cut at their clauses",
        "test": {},
    }
    for spec in test_specs(cfg):
        src, ref = columns(load_pairs(spec, "test", d.src_lang, d.tgt_lang), "src", "tgt")
        start = time.perf_counter()
        # each line one sentence, as mt.evaluate scores it; one too long for the model cut at its
        # clauses (as mt.translate cuts it), never truncated
        hyp = translate_lines(translator, src, translator.options.replace(beam=beam), split=False).lines
        scores = corpus_scores(hyp, ref)
        label = spec_label(spec)
        results["test"][label] = {
            "bleu": scores["bleu"],
            "chrf": scores["chrf"],
            "sentences": len(src),
            "seconds": round(time.perf_counter() - start, 1),
        }
        results["signature"] = scores["signature"]
        print(
            f"test {label}: BLEU {scores['bleu']:.2f}  chrF {scores['chrf']:.2f}  ({len(src)} sentences, beam {beam})",
            file=log,
        )
    if "signature" in results:
        print(f"sacreBLEU {results['signature']['bleu']}", file=log)
    distilled_from = distillation.summary(run_dir)
    if distilled_from is not None:  # where the training pairs came from: the teacher, the draw, the filter
        results["distill"] = distilled_from
    demo = DEMO_SENTENCE.get(d.src_lang)
    if demo:
        results["demo"] = {"source": demo, "translation": translator.translate([demo], beam=beam)[0]}
        print(f"demo: {demo}  ->  {results['demo']['translation']}", file=log)
    atomic_write(
        run_dir / RESULTS, lambda tmp: Path(tmp).write_text(json.dumps(results, indent=2, ensure_ascii=False) + "\n")
    )
    model = f" --model {run_dir}" if str(run_dir) != "runs/fr_en" else ""
    print(
        f"results in {run_dir / RESULTS}; next:\n"
        f'  python -m mt.translate{model} "{demo or "your sentence"}"\n'
        f"  python -m mt.evaluate{model} --split test\n"
        f"  python -m mt.serve{model}      # a web page and a JSON API on http://127.0.0.1:8000\n"
        f"  python -m mt.plot {run_dir}      # the learning curves as a picture",
        file=log,
    )
    return results


def fit_confidence(translator, run_dir: Path, log) -> None:
    """The run's confidence calibrator, fitted on its validation sets with its decoding and kept
    in the run directory (mt/inference/calibration.py); where it cannot be, a warning."""
    from mt.inference.calibration import AT_TRAINING_END, calibrate_run, validation_pairs

    start = time.perf_counter()
    try:
        about = calibrate_run(translator, run_dir, *validation_pairs(translator.cfg, AT_TRAINING_END)).about
    except UserError as e:
        print(f"warning: no confidence calibrator: {e}", file=log)
        return
    print(
        f"confidence calibrator: fitted on {about['sentences']} validation translations "
        f"({about['acceptable_share']:.0%} acceptable) in {time.perf_counter() - start:.0f} s",
        file=log,
    )


def language_model_report(run_dir: Path, log=None) -> None:
    log = log or sys.stderr
    print(f'next:\n  python -m mt.generate --model {run_dir} --prompt "ROMEO:" --max-new-tokens 300', file=log)


def report(cfg: Config) -> None:
    """The end-of-training report on the run's best.pt, on the device training used. The run is
    complete without it, so a failure here (a test set that cannot be read) is a warning, not an
    error; a run that never evaluated has no best.pt and no report."""
    run_dir = cfg.run_dir
    if not cfg.train.report or not (run_dir / BEST).is_file():
        return
    if cfg.model.arch != "transformer":
        language_model_report(run_dir)
        return
    print("end-of-training report (train.report=false skips it)", file=sys.stderr)
    try:
        translation_report(cfg, run_dir, cfg.train.device)
    except UserError as e:
        print(f"warning: no end-of-training report: {e}", file=sys.stderr)
