"""Distillation (mt/training/distillation.py, mt/training/teacher.py): a teacher translates sources
drawn from data.train once, into RUN_DIR/distill, resumably; the filter drops what it should; the
student trains on what is kept, through the real mt.train, or on the original pairs with
`distill: null`; bad teachers and settings are one-line errors."""

import dataclasses
import io
import json
import os
import shutil
import subprocess
import sys

import pytest
import yaml
from helpers import TINY_MODEL, synthetic_corpus

from mt import train as train_module
from mt.config import load_config
from mt.errors import UserError
from mt.inference.translator import Translator
from mt.training import teacher as teacher_module
from mt.training.distillation import distilled, filter_distilled, with_distilled_data
from mt.training.teacher import TeacherFiles, per_token_score

CACHE = ["source.fr", "teacher.en", "scores.tsv", "distilled.fr", "distilled.en"]


def student_args(out_dir, teacher, spec, *extra):
    """A tiny student on the synthetic corpus (20 distinct sources), taught by `teacher`, with a
    vocabulary of its own (characters: too few pairs for SentencePiece)."""
    return [
        "recipes/multi30k.yaml",
        *TINY_MODEL,
        "tokenizer.kind=char",
        f"data.train=[{spec}]",
        f"data.valid={spec}",
        "data.test=null",
        f"distill.teacher={teacher}",
        "distill.sentences=1000",
        "distill.int8=false",
        "distill.processes=0",
        "train.max_steps=4",
        "train.eval_every=4",
        "train.report=false",
        f"out_dir={out_dir}",
        *extra,
    ]


def student_config(out_dir, teacher, spec, *extra):
    recipe, *overrides = student_args(out_dir, teacher, spec, *extra)
    return load_config(recipe, overrides)


@pytest.fixture
def corpus(tmp_path):
    return synthetic_corpus(tmp_path, 400)


@pytest.fixture
def small_chunks(monkeypatch):
    """Chunks of 8 sentences: the 20 sources make three (8, 8 and 4)."""
    monkeypatch.setattr(teacher_module, "CHUNK", 8)
    import mt.training.distillation as distillation_module

    monkeypatch.setattr(distillation_module, "CHUNK", 8)


def count_translations(monkeypatch, interrupt_at_call: int | None = None) -> list[int]:
    """Each Translator.translate call's sentence count, in order; Ctrl-C at call `interrupt_at_call`."""
    calls, original = [], Translator.translate

    def translate(self, sentences, *args, **kwargs):
        calls.append(len(sentences))
        if len(calls) == interrupt_at_call:
            raise KeyboardInterrupt
        return original(self, sentences, *args, **kwargs)

    monkeypatch.setattr(Translator, "translate", translate)
    return calls


def cache_files(run) -> dict:
    return {name: (run / "distill" / name).read_bytes() for name in CACHE}


def test_the_student_trains_on_the_teachers_translations_through_mt_train(run_dir, corpus, tmp_path):
    out = tmp_path / "student"
    train_module.main(student_args(out, run_dir, corpus, "train.report=true", f"data.test={corpus}"))
    folder = out / "distill"
    sources = (folder / "source.fr").read_text().splitlines()
    assert len(sources) == len(set(sources)) == 20  # every distinct source of the corpus, once
    teacher_lines = (folder / "teacher.en").read_text().splitlines()
    assert teacher_lines == Translator.load(run_dir).translate(sources, beam=1)
    assert len((folder / "scores.tsv").read_text().splitlines()) == 20
    saved = yaml.safe_load((out / "config.yaml").read_text())
    assert saved["distill"]["teacher"] == str(run_dir)  # where the data came from
    assert saved["data"]["train"] == [
        {"path": "text", "data_files": {"fr": str(folder / "distilled.fr"), "en": str(folder / "distilled.en")}}
    ]
    results = json.loads((out / "results.json").read_text())
    assert results["distill"]["made_by"]["teacher"]["path"] == str(run_dir)
    assert results["distill"]["filter"]["kept"] == len((folder / "distilled.en").read_text().splitlines()) > 0
    assert (out / "best.pt").is_file() and (out / "tokenizer.json").is_file()


def test_a_finished_translation_is_not_done_again_on_resume(run_dir, corpus, tmp_path, monkeypatch, capsys):
    out = tmp_path / "student"
    train_module.main(student_args(out, run_dir, corpus))
    calls = count_translations(monkeypatch)
    train_module.main(student_args(out, run_dir, corpus, "--resume"))  # training had ended: nothing to do
    assert calls == []
    kept = cache_files(out)
    with pytest.raises(SystemExit) as refused:  # a resumed run's data may not change under it
        train_module.main(student_args(out, run_dir, corpus, "--resume", "distill.max_len_ratio=1.01"))
    assert refused.value.code == 2 and cache_files(out) == kept
    assert "cannot resume" in capsys.readouterr().err.splitlines()[-1]


def test_a_resumed_student_needs_its_pairs_not_its_teacher(run_dir, corpus, tmp_path, capsys):
    teacher = tmp_path / "teacher"
    shutil.copytree(run_dir, teacher)
    out = tmp_path / "student"
    train_module.main(student_args(out, teacher, corpus, "train.max_steps=2"))
    shutil.rmtree(teacher)  # moved, or trained further: the pairs the student began on still stand
    train_module.main(student_args(out, teacher, corpus, "train.max_steps=4", "--resume"))
    assert json.loads((out / "metrics.jsonl").read_text().splitlines()[-1])["step"] == 4
    (out / "distill" / "distilled.en").unlink()
    with pytest.raises(SystemExit) as refused:
        train_module.main(student_args(out, teacher, corpus, "train.max_steps=6", "--resume"))
    assert refused.value.code == 2
    assert "no longer holds the pairs this run trained on" in capsys.readouterr().err.splitlines()[-1]


def test_the_teacher_decodes_over_its_whole_vocabulary(run_dir):
    """A run whose shortlist holds none of "cat"'s pieces: its own decoding cannot write it, the
    teacher's decoding for distillation (which the filter's scores assume) still does."""
    import torch

    from mt.inference.shortlist import Shortlist

    translator = Translator.load(run_dir)
    ids = sorted(set(translator.tokenizer.encode("the black dog", "tgt")))
    vocab = translator.vocab
    translator.shortlist = Shortlist(torch.full((vocab, 1), ids[0]), torch.tensor(ids), vocab, "")
    settings = dataclasses.replace(load_config("recipes/fr_en_student.yaml").distill, beam=2)
    teacher = teacher_module.decode_options(translator, settings)
    assert "cat" not in translator.translate(["le chat noir"], teacher.replace(shortlist=True))[0]
    assert translator.translate(["le chat noir"], teacher) == ["the black cat"]


def test_waiting_ranks_stop_when_rank_zero_fails(tmp_path, monkeypatch):

    from mt.training import distillation as distillation_module

    files = TeacherFiles(tmp_path / "distill", "fr", "en")
    monkeypatch.setattr(distillation_module.distributed, "launched", lambda: True)
    with pytest.raises(RuntimeError), distillation_module._told_to_other_ranks(files):
        raise RuntimeError("the teacher's processes died")
    assert (files.folder / ".failed").read_text() == distillation_module.distributed.launch_id()
    with pytest.raises(UserError, match="rank 0 stopped"):
        distillation_module._wait_for_rank_zero(files, every_s=0.01)


def test_markers_of_an_earlier_launch_under_the_same_process_id_are_not_this_launchs(tmp_path, monkeypatch):
    """A launcher that is PID 1 in a container has the same process id every launch: a `.failed`
    or `.ready` left by an earlier one neither stops nor releases this launch's waiting ranks."""
    import threading

    from mt.training import distillation as distillation_module
    from mt.training.distributed import launch_id

    files = TeacherFiles(tmp_path / "distill", "fr", "en")
    files.folder.mkdir(parents=True)
    parent = str(os.getppid())
    assert launch_id().split(":")[1] == parent and launch_id() != parent  # more than the process id
    (files.folder / ".failed").write_text(parent)  # as the earlier scheme wrote it
    (files.folder / ".ready").write_text(launch_id().replace(":0", ":1") + "-earlier")
    done = threading.Timer(0.3, lambda: (files.folder / ".ready").write_text(launch_id()))
    done.start()
    distillation_module._wait_for_rank_zero(files, every_s=0.01)  # waits for this launch's own, then goes on
    done.join()
    monkeypatch.setenv("WORLD_SIZE", "4")
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    with pytest.raises(UserError, match="one machine"):
        distillation_module.distributed.one_machine("distill")


@pytest.mark.slow
def test_under_torchrun_rank_zero_translates_once_and_both_ranks_train(run_dir, corpus, tmp_path, own_temporary_folder):
    out = tmp_path / "student"
    launch = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", "-m", "mt.train"]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    done = subprocess.run(
        [*launch, *student_args(out, run_dir, corpus)], capture_output=True, text=True, env=env, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "x 2 processes" in done.stderr
    assert done.stderr.count("distinct sources for the teacher") == 1  # rank 0 alone drew
    sources = (out / "distill" / "source.fr").read_text().splitlines()
    teacher_lines = (out / "distill" / "teacher.en").read_text().splitlines()
    assert teacher_lines == Translator.load(run_dir).translate(sources, beam=1)
    assert (out / "distill" / ".ready").is_file() and not (out / "distill" / ".failed").exists()
    assert json.loads((out / "metrics.jsonl").read_text().splitlines()[-1])["step"] == 4


def test_an_interrupted_translation_goes_on_where_it_stopped(run_dir, corpus, tmp_path, monkeypatch, small_chunks):
    whole = distilled(student_config(tmp_path / "whole", run_dir, corpus))
    assert whole.data.train[0]["data_files"]["en"].endswith("distilled.en")
    cfg = student_config(tmp_path / "cut", run_dir, corpus)
    with monkeypatch.context() as m:
        calls = count_translations(m, interrupt_at_call=2)
        with pytest.raises(SystemExit) as stopped:
            distilled(cfg)
        assert stopped.value.code == 130 and calls == [8, 8]
    assert len((tmp_path / "cut" / "distill" / "teacher.en").read_text().splitlines()) == 8
    calls = count_translations(monkeypatch)
    distilled(cfg)
    assert calls == [8, 4]  # the first chunk is not translated again
    assert cache_files(tmp_path / "cut") == cache_files(tmp_path / "whole")
    distilled(cfg)
    assert calls == [8, 4]  # the same command after completion translates nothing


def test_files_cut_mid_chunk_are_cut_back_to_whole_chunks(run_dir, corpus, tmp_path, monkeypatch, small_chunks):
    cfg = student_config(tmp_path / "run", run_dir, corpus)
    distilled(cfg)
    finished = cache_files(tmp_path / "run")
    folder = tmp_path / "run" / "distill"
    teacher_text = (folder / "teacher.en").read_bytes()
    cut = teacher_text.index(b"\n", teacher_text.index(b"\n") + 1) + 3  # 2 lines and a part into chunk 1
    lines = (folder / "teacher.en").read_text().splitlines(keepends=True)
    (folder / "teacher.en").write_bytes(b"".join(x.encode() for x in lines[:10]) + lines[10].encode()[:3])
    (folder / "scores.tsv").write_bytes((folder / "scores.tsv").read_bytes()[:cut])  # a kill between the files
    calls = count_translations(monkeypatch)
    distilled(cfg)
    assert calls == [8, 8, 4]  # scores.tsv held no whole chunk: everything again
    assert cache_files(tmp_path / "run") == finished
    (folder / "teacher.en").write_bytes(b"".join(x.encode() for x in lines[:19]))  # the last line lost
    distilled(cfg)
    assert calls == [8, 8, 4, 4]
    assert cache_files(tmp_path / "run") == finished


def test_scores_are_the_teachers_log_probability_per_token(run_dir):
    translator = Translator.load(run_dir)
    sources = ["le chat noir", "le chien rouge", "le enfant petit", "le homme blanc"]
    for beam in (1, 3):
        o = dataclasses.replace(translator.options, beam=beam, n_best=1)
        best = [h[0] for h in translator.translate(sources, o, hypotheses=True)]
        forced = translator.score(sources, [h.text for h in best])
        for h, (total, count) in zip(best, forced):
            assert count == len(h.ids) + 1
            assert per_token_score(h.score, h.ids, o) == pytest.approx(total / count, rel=1e-4, abs=1e-5)


def test_the_filter_drops_low_scores_long_sources_length_ratios_and_empty_outputs(tmp_path):
    filters = ["distill.teacher=t", "distill.min_score=-1.0", "distill.max_len_ratio=2"]
    cfg = load_config("recipes/multi30k.yaml", filters)
    files = TeacherFiles(tmp_path, "fr", "en")
    rows = [
        ("un", "one", "-0.2\t3\t3"),  # kept
        ("deux", "two", "-3.0\t3\t3"),  # low score
        ("trois", "three three three", "-0.2\t3\t9"),  # (9 + 1) / (3 + 1) > 2
        ("quatre", "four", "-0.2\t200\t150"),  # longer than the teacher reads
        ("cinq", "", "0.0\t3\t0"),  # empty
        ("six", "six", "-0.9\t4\t5"),  # kept
    ]
    (tmp_path / "teacher.en").write_text("".join(t + "\n" for _, t, _ in rows))
    (tmp_path / "scores.tsv").write_text("".join(s + "\n" for _, _, s in rows))
    log = io.StringIO()
    counts = filter_distilled(cfg, files, [s for s, _, _ in rows], 128, log)
    assert (tmp_path / "distilled.fr").read_text() == "un\nsix\n"
    assert (tmp_path / "distilled.en").read_text() == "one\nsix\n"
    assert counts["kept"] == 2 and counts["pairs"] == 6
    assert log.getvalue() == (
        "distill: 6 pairs, kept 2, dropped 4 (1 empty, 1 too long, 1 length ratio, 1 low score)\n"
    )
    no_filter = load_config("recipes/multi30k.yaml", ["distill.teacher=t"])
    assert filter_distilled(no_filter, files, [s for s, _, _ in rows], 128, None)["kept"] == 4  # length rules stay
    strict = load_config("recipes/multi30k.yaml", ["distill.teacher=t", "distill.min_score=-0.01"])
    with pytest.raises(UserError, match="the filter left no pair; lower distill.min_score"):
        filter_distilled(strict, files, [s for s, _, _ in rows], 128, None)


def test_distill_null_trains_the_same_student_on_the_original_pairs(run_dir, corpus, tmp_path):
    out = tmp_path / "original"
    train_module.main(student_args(out, run_dir, corpus, "distill=null"))
    saved = yaml.safe_load((out / "config.yaml").read_text())
    assert saved["distill"]["teacher"] is None
    assert saved["data"]["train"] == [yaml.safe_load(corpus)]
    assert not (out / "distill").exists() and (out / "best.pt").is_file()
    cfg = student_config(out, run_dir, corpus, "distill.teacher=null")
    assert distilled(cfg) is cfg


def test_original_pairs_mix_in_by_weight(run_dir, corpus, tmp_path):
    out = tmp_path / "mixed"
    train_module.main(student_args(out, run_dir, corpus, "distill.original_weight=0.25"))
    train = yaml.safe_load((out / "config.yaml").read_text())["data"]["train"]
    assert [spec["weight"] for spec in train] == [0.75, 0.25]
    assert train[1]["data_files"] == yaml.safe_load(corpus)["data_files"]
    cfg = load_config("recipes/fr_en_student.yaml", ["distill.original_weight=0.5"])
    mixed = with_distilled_data(cfg, TeacherFiles(tmp_path, "fr", "en")).data.train
    originals = [spec["corpus"] for spec in cfg.data.train]  # the teacher's mix, technical text included
    assert [spec.get("corpus") for spec in mixed] == [None, *originals] and "pydocs_fr" in originals
    halved = [0.5 * spec["weight"] / sum(s["weight"] for s in cfg.data.train) for spec in cfg.data.train]
    assert [spec["weight"] for spec in mixed] == pytest.approx([0.5, *halved])


def test_an_imported_marian_teacher_teaches_in_int8_processes(tmp_path):
    pytest.importorskip("transformers", reason="transformers (the dev extra) builds the Marian model; .ci/run has it")
    from random_marian import ENGLISH, FRENCH, build, sentences

    from mt.importers.marian import import_marian

    build(tmp_path / "hf")
    teacher = import_marian(str(tmp_path / "hf"), tmp_path / "teacher", ("fr", "en"))
    (tmp_path / "c.fr").write_text("".join(s + "\n" for s in sentences(FRENCH, 30, seed=5)))
    (tmp_path / "c.en").write_text("".join(s + "\n" for s in sentences(ENGLISH, 30, seed=6)))
    spec = f"{{path: text, data_files: {{fr: {tmp_path / 'c.fr'}, en: {tmp_path / 'c.en'}}}}}"
    out = tmp_path / "student"
    args = student_args(out, teacher, spec, "distill.int8=true", "distill.processes=1")
    train_module.main(args)
    folder = out / "distill"
    sources = (folder / "source.fr").read_text().splitlines()
    assert sorted(sources) == sorted(set(sentences(FRENCH, 30, seed=5)))
    int8 = Translator.load(teacher, quantize="int8")
    assert (folder / "teacher.en").read_text().splitlines() == int8.translate(sources, beam=1, warn_truncated=False)
    assert (out / "best.pt").is_file()


@pytest.mark.parametrize(
    "teacher, extra, message",
    [
        ("{tmp}/nowhere", [], "distill.teacher: {tmp}/nowhere is not a directory; give a run directory"),
        ("{tmp}/empty", [], "distill.teacher: {tmp}/empty holds no trained model"),
        ("{tmp}/lm", [], "distill.teacher: {tmp}/lm holds a gpt language model, not a translation model"),
        ("{run}", ["data.src_lang=en", "data.tgt_lang=fr"], "translates fr->en, but the recipe is en->fr"),
        ("{run}", ["distill.beam=0"], "distill.beam must be between 1 (greedy) and 256, got 0"),
        ("{run}", ["distill.max_len_ratio=0.5"], "distill.max_len_ratio must be >= 1"),
        ("{run}", ["--resume"], "--resume: {tmp}/student/last.pt does not exist"),
    ],
)
def test_bad_teachers_and_settings_are_one_line_errors(run_dir, corpus, tmp_path, capsys, teacher, extra, message):
    (tmp_path / "empty").mkdir()
    (tmp_path / "lm").mkdir()
    (tmp_path / "lm" / "config.yaml").write_text("name: lm\nmodel:\n  arch: gpt\ndata:\n  corpus: tinyshakespeare\n")
    (tmp_path / "lm" / "best.pt").write_bytes(b"")
    teacher = teacher.format(tmp=tmp_path, run=run_dir)
    with pytest.raises(SystemExit) as stopped:
        train_module.main(student_args(tmp_path / "student", teacher, corpus, *extra))
    assert stopped.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message.format(tmp=tmp_path) in err[0], err


def test_a_cache_made_with_other_settings_is_refused_but_the_filter_may_change(run_dir, corpus, tmp_path):
    distilled(student_config(tmp_path / "run", run_dir, corpus))
    with pytest.raises(UserError, match=r"holds a teacher's work made with another distill.beam \(1, now 2\)"):
        distilled(student_config(tmp_path / "run", run_dir, corpus, "distill.beam=2"))
    scores = sorted(float(line.split("\t")[0]) for line in (tmp_path / "run" / "distill" / "scores.tsv").open())
    below = max(range(1, 20), key=lambda i: scores[i] - scores[i - 1])  # the widest gap: no tie at the cut
    assert scores[below] > scores[below - 1]
    cut = (scores[below - 1] + scores[below]) / 2
    distilled(student_config(tmp_path / "run", run_dir, corpus, f"distill.min_score={cut}"))
    manifest = json.loads((tmp_path / "run" / "distill" / "manifest.json").read_text())
    assert manifest["filter"]["distill.min_score"] == cut and manifest["filter"]["kept"] == 20 - below
