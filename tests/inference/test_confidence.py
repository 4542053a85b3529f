"""Confidence: the features and detectors, the calibrator's fitting and keeping, and the CLI's
--confidence and --min-confidence on the session's tiny trained model."""

import json
import random
import shutil

import pytest
from helpers import cli

from mt.errors import UserError
from mt.inference.calibration import Sample, fit, fit_logistic, word_tags
from mt.inference.confidence import (
    FILE,
    Calibrator,
    Trust,
    copied_share,
    foreign_share,
    repeated_share,
    sentence_features,
    words_of,
)
from mt.inference.documents import translate_lines
from mt.inference.translator import Translator
from mt.translate import judged_lines

M = "\u2581"


def test_words_gather_their_pieces_as_the_text_splits():
    pieces = [f"{M}The", f"{M}ca", "t", f"{M}", ",", f"{M}ok"]
    words = words_of(pieces, [-0.1, -2.0, -0.5, -0.2, -0.3, -0.4, -0.05])  # the last: <END>'s, no word's
    assert [w for w, _ in words] == ["The", "cat", ",", "ok"]
    assert [lps for _, lps in words] == [[-0.1], [-2.0, -0.5], [-0.2, -0.3], [-0.4]]


def test_detectors_tell_failures_from_translations():
    source = "le chat noir dort sur la table de la cuisine"
    good = "the black cat sleeps on the kitchen table"
    loop = "the cat the cat the cat the cat the cat the cat"
    assert repeated_share(good.split()) == 0.0 and repeated_share(loop.split()) > 0.6
    assert copied_share(source, source) == 1.0 and copied_share(source, good) < 0.4
    english, french = foreign_share([good, source], "en", "fr")
    assert english < 0.2 < 0.8 < french
    assert foreign_share(["ok"], "en", "fr")[0] <= 0.2  # one word: little to go on, little said


def test_word_tags_find_each_reference_word_once():
    assert word_tags(["The", "cat,", "the", "the", "dog"], "the Cat sat on the mat") == [1, 1, 1, 0, 0]


def test_a_fitted_regression_orders_what_it_learned():
    rng = random.Random(0)
    x = [[rng.gauss(0, 1), rng.gauss(0, 1)] for _ in range(400)]
    y = [int(a + 0.1 * rng.gauss(0, 1) > 0) for a, _ in x]
    model = fit_logistic(x, y)
    assert model([2.0, 0.0]) > 0.9 > 0.1 > model([-2.0, 0.0])
    assert abs(model.weights[1]) < abs(model.weights[0]) / 5  # the noise feature hardly counts


def samples(count: int = 80) -> list[Sample]:
    """Translations that are good where their log-probabilities are high, and a few failures."""
    rng = random.Random(1)
    out = []
    for i in range(count):
        good = i % 2 == 0
        lp = -0.2 if good else -2.5
        text = "the black cat sleeps" if good else "a dog"
        pieces = [f"{M}{w}" for w in text.split()]
        out.append(Sample("le chat noir dort", "the black cat sleeps", text, pieces, [lp + rng.gauss(0, 0.05)] * 5))
    copy = "le chat noir dort"
    out += [Sample(copy, "the black cat sleeps", copy, [f"{M}{w}" for w in copy.split()], [-0.3] * 5, True)] * 10
    return out


def test_a_calibrator_learns_its_data_and_is_kept_for_its_own_model_alone(tmp_path):
    calibrator = fit(samples(), "en", "fr")
    x = calibrator.features(
        ["le chat noir dort"] * 3,
        ["the black cat sleeps", "a dog", "le chat noir dort"],
        [[-0.2] * 5, [-2.5] * 5, [-0.3] * 5],
        "en",
        "fr",
    )
    good, bad, copied = (calibrator.judge(v, []).score for v in x)
    assert good > 0.8 and bad < 0.2 and copied < 0.5
    calibrator.model = "abc"
    path = calibrator.save(tmp_path)
    assert path.name == FILE and Calibrator.load(path, "abc").sentence == calibrator.sentence
    with pytest.raises(UserError, match="another model"):
        Calibrator.load(path, "def")
    path.write_text(path.read_text()[:40])
    with pytest.raises(UserError, match="not a confidence calibrator"):
        Calibrator.load(path, "abc")


def test_the_untrained_rule_is_said_and_flags_a_loop():
    rule = Calibrator.untrained()
    assert not rule.fitted
    sure = sentence_features("le chat", "the cat", [-0.1, -0.1, -0.1], 0.0, 0.0, 0.35)
    looping = sentence_features("le chat", "the cat " * 8, [-0.1] * 17, 0.0, 0.0, 0.35)
    assert rule.judge(sure, []).score > 0.5 > rule.judge(looping, []).score
    assert "loop" in rule.judge(looping, []).flags and "length" in rule.judge(looping, []).flags


@pytest.fixture(scope="module")
def calibrated(run_dir, tmp_path_factory):
    """A copy of the session's tiny run with a calibrator fitted by the command (once a module)."""
    run = tmp_path_factory.mktemp("calibrated") / "run"
    shutil.copytree(run_dir, run)
    (run / FILE).unlink(missing_ok=True)
    done = cli("mt.calibrate", "--model", str(run))
    assert done.returncode == 0, done.stderr
    assert "confidence calibrator fitted on" in done.stderr and (run / FILE).is_file()
    return run


def test_translate_says_its_confidence_and_withholds_under_a_threshold(calibrated):
    lines = ["le chat noir", "le chien blanc"]
    shown = cli("mt.translate", "--model", str(calibrated), "--confidence", *lines)
    assert shown.returncode == 0, shown.stderr
    rows = [line.split("\t") for line in shown.stdout.splitlines()]
    assert len(rows) == 2 and all(0.0 <= float(score) <= 1.0 for score, _ in rows)
    assert [text for _, text in rows] == Translator.load(calibrated).translate(lines)
    withheld = cli("mt.translate", "--model", str(calibrated), "--min-confidence", "1", *lines)
    assert withheld.stdout.splitlines() == lines  # nothing reaches certainty: each kept in its source language
    assert "2 of 2 sentences under confidence 1" in withheld.stderr
    # the rest in this process, through what the command calls
    translator = Translator.load(calibrated)
    judged = translate_lines(translator, lines, translator.options, trust=Trust())
    first = json.loads(judged_lines(lines, judged, "jsonl", True).splitlines()[0])
    assert first["source"] == lines[0] and first["translation"] == [text for _, text in rows][0]
    assert first["words"] and {"word", "confidence"} <= set(first["words"][0])
    assert first["confidence"] == pytest.approx(float(rows[0][0]), abs=0.006)
    dropped = translate_lines(translator, lines, translator.options, trust=Trust(1.0, "drop"))
    assert dropped.lines == ["", ""] and dropped.withheld == 2
    kept = translate_lines(translator, lines, translator.options, trust=Trust(0.0))
    assert kept.lines == translator.translate(lines) and kept.withheld == 0


def test_a_calibrator_of_another_model_is_refused_in_one_line(calibrated, tmp_path):
    other = tmp_path / "other"
    shutil.copytree(calibrated, other)
    saved = json.loads((other / FILE).read_text())
    (other / FILE).write_text(json.dumps(saved | {"model": "0" * 64}))
    done = cli("mt.translate", "--model", str(other), "--confidence", "le chat noir")
    assert done.returncode != 0 and "fitted to another model" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1


def test_a_document_keeps_its_translation_and_lists_its_doubtful_sentences_beside_it(calibrated, tmp_path):
    page, out = tmp_path / "p.html", tmp_path / "p.en.html"
    page.write_text("<p>le chat noir</p><p>le chien <b>blanc</b></p>")
    done = cli("mt.translate", "--model", str(calibrated), "--input", str(page), "--output", str(out),
               "--min-confidence", "1")  # fmt: skip
    assert done.returncode == 0, done.stderr
    plain = cli("mt.translate", "--model", str(calibrated), "--input", str(page), "--output", str(tmp_path / "q.html"))
    assert out.read_text() == (tmp_path / "q.html").read_text()  # every sentence kept: its markup is around it
    listed = (tmp_path / "p.en.html.doubtful.tsv").read_text().splitlines()
    assert listed[0] == "confidence\tflags\tsource\ttranslation" and len(listed) == 3
    assert {row.split("\t")[2] for row in listed[1:]} == {"le chat noir", "le chien blanc"}
    assert "2 of 2 sentences under confidence 1: listed in" in done.stderr and plain.returncode == 0
