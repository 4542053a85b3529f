"""A distillation's teacher: a run directory checked against the student's recipe, and its
translation of the student's sources, made once into RUN_DIR/distill and resumable.

The files, line for line with the sources:
  - `source.<src>`: the sentences the teacher translates;
  - `teacher.<tgt>`: its translations;
  - `scores.tsv`: per line, the teacher's log-probability per output token (<END> counted), the
    source's tokens and the output's tokens, in the teacher's vocabulary;
  - `distilled.<src>`, `distilled.<tgt>`: the pairs the filter keeps (mt/training/distillation.py);
  - `manifest.json`: what made them (the teacher, the draw, the settings) and what the filter did.
The translations are appended CHUNK sentences at a time, each chunk flushed to disk before the next
starts. The sentences of a chunk are decoded together, and int8 decoding scales activations by the
whole batch, so chunks keep their bounds: an interrupted run resumes at the first chunk that is not
whole in both files, and writes what an uninterrupted one would.
"""

from __future__ import annotations

import dataclasses
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from tqdm import tqdm

from mt.checkpoint import run_checkpoint
from mt.config import Config, DistillConfig, read_run_config
from mt.decode_options import DecodeOptions
from mt.errors import UserError
from mt.inference.processes import ProcessDied

CHUNK = 2000  # sentences decoded together and written at once: a few seconds of a small teacher's work


@dataclass(frozen=True)
class TeacherFiles:
    """Where a run keeps its teacher's work: RUN_DIR/distill."""

    folder: Path
    src_lang: str
    tgt_lang: str

    @property
    def source(self) -> Path:
        return self.folder / f"source.{self.src_lang}"

    @property
    def teacher(self) -> Path:
        return self.folder / f"teacher.{self.tgt_lang}"

    @property
    def scores(self) -> Path:
        return self.folder / "scores.tsv"

    @property
    def manifest(self) -> Path:
        return self.folder / "manifest.json"

    def distilled(self, lang: str) -> Path:
        """The filtered pairs the student trains on, one side."""
        return self.folder / f"distilled.{lang}"


def check_teacher(cfg: Config) -> tuple[Path, Config]:
    """The teacher's run directory and config, checked against the student's recipe `cfg`: one
    line where it cannot teach this run."""
    teacher = Path(cfg.distill.teacher)
    hint = "give a run directory made by python -m mt.train or python -m mt.import"
    what = f"distill.teacher: {teacher}"
    if not teacher.is_dir():
        raise UserError(f"{what} is not a directory; {hint}")
    if teacher.resolve() == cfg.run_dir.resolve():
        raise UserError(f"{what} is this run's own directory; {hint}")
    if not (teacher / "config.yaml").is_file() or run_checkpoint(teacher) is None:
        raise UserError(f"{what} holds no trained model (config.yaml and best.pt or last.pt); {hint}")
    saved = read_run_config(teacher / "config.yaml")
    if saved.model.arch != "transformer":
        raise UserError(f"{what} holds a {saved.model.arch} language model, not a translation model")
    theirs, mine = (saved.data.src_lang, saved.data.tgt_lang), (cfg.data.src_lang, cfg.data.tgt_lang)
    if theirs != mine:
        raise UserError(f"{what} translates {'->'.join(theirs)}, but the recipe is {'->'.join(mine)}")
    return teacher, saved


def teacher_identity(teacher: Path) -> dict:
    """What names the teacher's weights: its path and its checkpoint's name, size and time, so a
    teacher trained further is not taken for the one that made a cache."""
    path = run_checkpoint(teacher)
    stat = path.stat()
    return {"path": str(teacher), "checkpoint": path.name, "bytes": stat.st_size, "mtime_ns": stat.st_mtime_ns}


def one_line(text: str) -> str:
    """`text` with its line breaks made spaces: the files hold one sentence a line."""
    return text.replace("\r", " ").replace("\n", " ")


def resume_point(paths: list[Path], total: int) -> int:
    """How many sentences every file in `paths` holds whole chunks of (all `total`, at the end);
    each file is cut back to them, so a kill mid-chunk, or between the two files, leaves no trace."""
    contents = [path.read_bytes() if path.is_file() else b"" for path in paths]
    done = min(total, *(data.count(b"\n") for data in contents))
    if done < total:
        done -= done % CHUNK
    for path, data in zip(paths, contents):
        ends = np.flatnonzero(np.frombuffer(data, dtype=np.uint8) == ord("\n")) + 1  # where each line ends
        end = int(ends[done - 1]) if done else 0
        if len(data) != end:
            with open(path, "r+b") as f:
                f.truncate(end)
    return done


def _append(f, lines: list[str]) -> None:
    f.write("".join(line + "\n" for line in lines).encode("utf-8"))
    f.flush()
    os.fsync(f.fileno())


def per_token_score(score: float, ids: list[int], o: DecodeOptions) -> float:
    """A hypothesis' log-probability per output token (<END> counted), from the score the search
    gave it: beam search divides by its length penalty, undone here, so that no second pass is
    needed (greedy's score is the log-probability itself)."""
    from mt.inference.search import length_penalty_of  # the searches' own formula

    length = len(ids) + 1
    penalty = length_penalty_of(length, o.length_penalty, o.scoring) if o.beam > 1 else 1.0
    return score * penalty / length


def load_teacher(teacher: Path, settings: DistillConfig):
    """The teacher's Translator, int8 and in decoding processes as `settings` say."""
    from mt.inference.translator import Translator

    translator = Translator.load(teacher, settings.device, "int8" if settings.int8 else None)
    if settings.device == "cpu" and settings.processes != 0:
        translator.start_processes(None if settings.processes == "auto" else settings.processes)
    return translator


def decode_options(translator, settings: DistillConfig) -> DecodeOptions:
    """The teacher's own decoding (its scoring, length penalty and limits) at the distillation's
    beam, one hypothesis, no sampling and no glossary."""
    # the whole vocabulary: a shortlist would score over fewer pieces than the filter assumes
    return dataclasses.replace(
        translator.options, beam=settings.beam, n_best=1, temperature=0.0, glossary=None, shortlist=False
    )


def translate_sources(
    files: TeacherFiles, sources: list[str], teacher: Path, settings: DistillConfig, log=sys.stderr
) -> dict | None:
    """Translate the `sources` the files do not hold yet, chunk by chunk, with a progress bar;
    returns the speed of this session's work (None when there was none). Ctrl-C keeps the chunks
    written and says how to go on."""
    done = resume_point([files.teacher, files.scores], len(sources))
    if done == len(sources):
        return None
    if done and log is not None:
        print(f"distill: {done:,} of {len(sources):,} sentences translated before; going on", file=log)
    translator = load_teacher(teacher, settings)
    started = time.monotonic()
    try:
        with open(files.teacher, "ab") as out, open(files.scores, "ab") as scores:
            _translate_chunks(translator, sources, done, out, scores, settings, log)
    except KeyboardInterrupt:
        kept = resume_point([files.teacher, files.scores], len(sources))
        said = f"interrupted: {kept:,} of {len(sources):,} sentences translated; the same command goes on"
        print(said, file=log or sys.stderr)
        raise SystemExit(130) from None
    except ProcessDied as e:
        kept = resume_point([files.teacher, files.scores], len(sources))
        raise UserError(
            f"distill: {e}; {kept:,} of {len(sources):,} sentences translated, the same command goes on"
        ) from None
    finally:
        translator.close()
    seconds = time.monotonic() - started
    speed = {"sentences": len(sources) - done, "seconds": round(seconds, 1)}
    speed["sentences_per_s"] = round(speed["sentences"] / max(seconds, 1e-9), 1)
    if log is not None:
        print(f"distill: the teacher translated {speed['sentences']:,} sentences in {seconds:,.0f} s "
              f"({speed['sentences_per_s']:,.1f} sentences/s)", file=log)  # fmt: skip
    return speed


def _translate_chunks(translator, sources: list[str], done: int, out, scores, settings: DistillConfig, log) -> None:
    """Translate from sentence `done` to the end, appending each chunk to `out` and `scores`."""
    o = decode_options(translator, settings)
    bar = tqdm(total=len(sources), initial=done, unit="sent", desc="teacher", dynamic_ncols=True,
               file=sys.stderr, disable=log is None)  # fmt: skip
    with bar:
        for start in range(done, len(sources), CHUNK):
            chunk = sources[start : start + CHUNK]
            found = translator.translate(chunk, o, hypotheses=True, warn_truncated=False, progress=bar.update)
            lengths = [len(ids) for ids in translator.tokenizer.encode_batch(chunk)]
            best = [h[0] for h in found]
            _append(out, [one_line(h.text) for h in best])
            rows = [(per_token_score(h.score, h.ids, o), n, len(h.ids)) for h, n in zip(best, lengths)]
            _append(scores, [f"{score:.4f}\t{n}\t{m}" for score, n, m in rows])
