"""Sequence-level knowledge distillation (Kim and Rush, 2016) as a pipeline over existing parts:
sources drawn from the recipe's data.train as training draws its pairs (the same cleaning and
seed), translated once by the teacher (mt/training/teacher.py: batched, in processes, cached in
RUN_DIR/distill and resumable), filtered by the teacher's score and the length ratio, and handed
to the unchanged trainer as data.train. RUN_DIR/distill/manifest.json says where it all came from.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import sys
import time
from pathlib import Path

import numpy as np
import yaml

from mt.config import Config
from mt.errors import UserError
from mt.files import atomic_write, read_lines
from mt.model import positions
from mt.training import distributed
from mt.training.run_dir import RunLock, check_resumable, check_start
from mt.training.teacher import (
    CHUNK,
    TeacherFiles,
    check_teacher,
    one_line,
    teacher_identity,
    translate_sources,
)


def distilled(cfg: Config, resume: bool = False, log=sys.stderr) -> Config:
    """`cfg` as the student trains: with data.train the teacher's filtered translations (and the
    original pairs, by distill.original_weight), made first where RUN_DIR/distill lacks them;
    `cfg` itself without distill.teacher. `log` (None: silent) hears the draw, the speed and what
    the filter dropped."""
    if cfg.distill.teacher is None:
        return cfg
    check_start(cfg, resume)  # before an hour of translation, not after it
    files = TeacherFiles(cfg.run_dir / "distill", cfg.data.src_lang, cfg.data.tgt_lang)
    student = with_distilled_data(cfg, files)
    if resume:  # the data training began on, as it was: no teacher needed, nothing rewritten
        check_resumable(student, yaml.safe_load((cfg.run_dir / "config.yaml").read_text()), cfg.run_dir)
        if not _finished(files, cfg.data.src_lang, cfg.data.tgt_lang):
            raise UserError(
                f"--resume: {files.folder} no longer holds the pairs this run trained on; start a new out_dir"
            )
        return student
    teacher, teacher_cfg = check_teacher(cfg)
    distributed.one_machine("distill")
    if distributed.launched_rank() != 0:
        _wait_for_rank_zero(files)
        return student
    with RunLock(cfg.run_dir), _told_to_other_ranks(files):  # one process at a time; training takes it next
        manifest = _sources(cfg, teacher, files, log)
        sources = read_lines(files.source)
        speed = translate_sources(files, sources, teacher, cfg.distill, log)
        if speed is not None:
            manifest["translation"] = speed
        manifest["filter"] = filter_distilled(cfg, files, sources, positions(teacher_cfg) - 1, log)
        _write_json(files.manifest, manifest)
    return student


def _finished(files: TeacherFiles, *langs: str) -> bool:
    """Whether the teacher's work is whole: filtered, both sides of the kept pairs written."""
    done = files.manifest.is_file() and "filter" in json.loads(files.manifest.read_text())
    return done and all(files.distilled(lang).is_file() for lang in langs)


@contextlib.contextmanager
def _told_to_other_ranks(files: TeacherFiles):
    """Under torchrun, rank 0 tells the waiting ranks how its work ended, by this launch's id
    (distributed.launch_id): in `.ready`, or in `.failed` when it raised, so that they stop too
    instead of waiting for ever; a marker an earlier launch left says nothing to this one."""
    try:
        yield
    except BaseException:
        if distributed.launched():
            files.folder.mkdir(parents=True, exist_ok=True)
            (files.folder / ".failed").write_text(distributed.launch_id())
        raise
    if distributed.launched():
        atomic_write(files.folder / ".ready", lambda tmp: Path(tmp).write_text(distributed.launch_id()))


def _wait_for_rank_zero(files: TeacherFiles, every_s: float = 2.0) -> None:
    """Under torchrun the other ranks wait for rank 0 to finish the data (an hour of translation
    would outlast the process group's wait to start), told by the id of the launch they share."""
    ready, failed, launch = files.folder / ".ready", files.folder / ".failed", distributed.launch_id()
    while not (ready.is_file() and ready.read_text() == launch):
        if failed.is_file() and failed.read_text() == launch:
            raise UserError("distill: rank 0 stopped before the teacher's work was done (its message says why)")
        time.sleep(every_s)


def _write_json(path: Path, content: dict) -> None:
    atomic_write(path, lambda tmp: Path(tmp).write_text(json.dumps(content, indent=2, ensure_ascii=False) + "\n"))


def _made_by(cfg: Config, teacher: Path) -> dict:
    """What decides the teacher's translations: a cache made otherwise is not taken for this one."""
    d, x = cfg.data, cfg.distill
    made = {
        "teacher": teacher_identity(teacher),
        "data.train": d.train,
        "data.clean": d.clean,
        "data.dedup": d.dedup,
        "seed": cfg.seed,
        "distill.sentences": x.sentences,
        "distill.beam": x.beam,
        "distill.int8": x.int8,
        "distill.device": x.device,
        "chunk": CHUNK,
    }
    return json.loads(json.dumps(made))  # as it reads back from the manifest


def _sources(cfg: Config, teacher: Path, files: TeacherFiles, log) -> dict:
    """The manifest of the run's sources: drawn and written once, checked against the recipe after."""
    made_by = _made_by(cfg, teacher)
    if files.manifest.is_file() and files.source.is_file():
        manifest = json.loads(files.manifest.read_text())
        changed = [key for key in made_by if manifest["made_by"].get(key) != made_by[key]]
        if changed:
            raise UserError(
                f"{files.folder} holds a teacher's work made with another {changed[0]} "
                f"({manifest['made_by'].get(changed[0])!r}, now {made_by[changed[0]]!r}); restore it, "
                f"or delete {files.folder} to translate again (or set out_dir=...)"
            )
        return manifest
    sources = draw_sources(cfg, log)
    files.folder.mkdir(parents=True, exist_ok=True)
    for stale in (
        files.teacher,
        files.scores,
        *(files.distilled(lang) for lang in (cfg.data.src_lang, cfg.data.tgt_lang)),
    ):
        stale.unlink(missing_ok=True)  # made for other sources: never to be lined up with these
    atomic_write(files.source, lambda tmp: Path(tmp).write_text("".join(s + "\n" for s in sources), encoding="utf-8"))
    manifest = {"made_by": made_by, "sources": len(sources)}
    _write_json(files.manifest, manifest)
    return manifest


def draw_sources(cfg: Config, log=sys.stderr) -> list[str]:
    """Up to distill.sentences distinct source sentences of data.train (repeats and what cleaning
    drops are not made up), drawn as training draws its pairs: each corpus its weight's share,
    cleaned and deduplicated as the recipe says, chosen by the run's seed."""
    from mt.data.corpora import columns, load_corpora  # imports `datasets`, slow to load

    d, wanted = cfg.data, cfg.distill.sentences
    pairs, _, _ = load_corpora(d.train, "train", d.src_lang, d.tgt_lang, d.clean, d.dedup, log, wanted, cfg.seed)
    sources = [s for s in dict.fromkeys(one_line(s) for s in columns(pairs, "src")[0]) if s.strip()]
    # Shuffled, so that every chunk mixes the corpora and the time left is told from the like, and
    # trimmed: each corpus' share was rounded up.
    order = np.random.default_rng((cfg.seed,)).permutation(len(sources))[:wanted]
    sources = [sources[i] for i in order]
    if log is not None:
        print(f"distill: {len(sources):,} distinct sources for the teacher (distill.sentences {wanted:,})", file=log)
    return sources


def read_scores(path: Path) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """scores.tsv's columns: log-probability per token, source tokens, output tokens."""
    rows = [line.split("\t") for line in read_lines(path)]
    score = np.array([float(r[0]) for r in rows], dtype=np.float64)
    src, tgt = (np.array([int(r[i]) for r in rows], dtype=np.int64) for i in (1, 2))
    return score, src, tgt


def filter_distilled(cfg: Config, files: TeacherFiles, sources: list[str], teacher_max: int, log) -> dict:
    """Write the pairs the filter keeps as the student's training files; returns the counts. Pairs
    are dropped when empty, when the source is longer than the teacher reads (it translated a part),
    when their token lengths differ more than distill.max_len_ratio, or when the teacher's score
    per token is below distill.min_score."""
    from mt.data.corpora import filter_pairs

    x = cfg.distill
    targets = read_lines(files.teacher)
    score, src_lens, tgt_lens = read_scores(files.scores)
    low = score < x.min_score if x.min_score is not None else np.zeros(len(score), dtype=bool)
    ratio = x.max_len_ratio if x.max_len_ratio is not None else float("inf")
    try:
        keep = filter_pairs(src_lens, tgt_lens, teacher_max, ratio, "distill", log, {"low score": low})
    except UserError:
        hint = "lower distill.min_score or raise distill.max_len_ratio"
        raise UserError(f"distill: the filter left no pair; {hint}") from None
    for lang, side in ((cfg.data.src_lang, sources), (cfg.data.tgt_lang, targets)):
        _write_if_changed(files.distilled(lang), "".join(side[i] + "\n" for i in keep))
    return {
        "distill.min_score": x.min_score,
        "distill.max_len_ratio": x.max_len_ratio,
        "pairs": len(sources),
        "kept": len(keep),
        "mean_score_kept": round(float(score[keep].mean()), 4),
    }


def _write_if_changed(path: Path, text: str) -> None:
    """Rewritten only when its content changes: the corpus caches key on the file's time."""
    data = text.encode("utf-8")
    if not (path.is_file() and path.read_bytes() == data):
        atomic_write(path, lambda tmp: Path(tmp).write_bytes(data))


def with_distilled_data(cfg: Config, files: TeacherFiles) -> Config:
    """`cfg` with data.train the teacher's filtered pairs; with distill.original_weight > 0, mixed
    with the original corpora, which share that weight by theirs (equally where none is given)."""
    from mt.data.corpora import corpus_options

    d, share = cfg.data, cfg.distill.original_weight
    spec = {"path": "text", "data_files": {lang: str(files.distilled(lang)) for lang in (d.src_lang, d.tgt_lang)}}
    if share == 0:
        return dataclasses.replace(cfg, data=dataclasses.replace(d, train=[spec]))
    options = [corpus_options(s) for s in d.train]
    weights = [w if w is not None else 1.0 for _, _, w in options]
    originals = [
        {**({"corpus": s} if isinstance(s, str) else s), "weight": round(share * w / sum(weights), 6)}
        for (s, _, _), w in zip(options, weights)
    ]
    train = [{**spec, "weight": round(1 - share, 6)}, *originals]
    return dataclasses.replace(cfg, data=dataclasses.replace(d, train=train))


def summary(run_dir: Path) -> dict | None:
    """RUN_DIR/distill/manifest.json (where a distilled run's data came from), or None."""
    path = Path(run_dir) / "distill" / "manifest.json"
    return json.loads(path.read_text()) if path.is_file() else None
