"""Documents against plain text: a 1,000-cue subtitle file and a Word file of about 50 pages, each
translated with its markup, against the same sentences translated as plain text, back to back in
one process on one model (pairs of runs alternated; the median ratio).

    python bench/formats_speed.py --model runs/fr_en [--out bench/results/formats_speed.json]

The sentences are the run's validation set (repeated where it is shorter than a file needs). Every
tenth cue is in italics and every third paragraph has a bold word and an italic one, so the markup
path aligns what it must. Reported: seconds for each, and each document's time over plain text's.
"""

from __future__ import annotations

import argparse
import io
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from mt.data.corpora import columns, load_pairs  # noqa: E402
from mt.inference.documents import translate_lines  # noqa: E402
from mt.inference.formatted import translate_formatted  # noqa: E402
from mt.inference.translator import Translator  # noqa: E402


def subtitles(sentences: list[str], cues: int = 1000) -> tuple[bytes, list[str]]:
    """An .srt file of `cues` cues (a sentence each, in two lines where it is long), and its texts."""
    blocks, texts = [], []
    for i in range(cues):
        text = sentences[i % len(sentences)]
        words = text.split()
        lines = [text] if len(words) < 8 else [" ".join(words[: len(words) // 2]), " ".join(words[len(words) // 2 :])]
        if i % 10 == 0:
            lines = [f"<i>{line}</i>" for line in lines]
        start = 2 * i
        stamp = lambda s: f"00:{s // 60:02d}:{s % 60:02d},000"  # noqa: E731
        blocks.append(f"{i + 1}\n{stamp(start)} --> {stamp(start + 1)}\n" + "\n".join(lines) + "\n")
        texts.append(text)
    return "\n".join(blocks).encode(), texts


def word_file(sentences: list[str], paragraphs: int = 1000) -> tuple[bytes, list[str]]:
    """A .docx of `paragraphs` paragraphs (about 50 pages), each a sentence; every third with a bold
    word and an italic one. Returns its bytes and the paragraphs' texts."""
    import docx

    document, texts = docx.Document(), []
    for i in range(paragraphs):
        text = sentences[i % len(sentences)]
        words = text.split(" ")
        p = document.add_paragraph()
        if i % 3 == 0 and len(words) > 4:
            p.add_run(" ".join(words[:1]) + " ")
            p.add_run(words[1]).bold = True
            p.add_run(" " + " ".join(words[2:-2]) + " ")
            p.add_run(words[-2]).italic = True
            p.add_run(" " + words[-1])
        else:
            p.add_run(text)
        texts.append(text)
    out = io.BytesIO()
    document.save(out)
    return out.getvalue(), texts


def timed(work) -> float:
    started = time.perf_counter()
    work()
    return round(time.perf_counter() - started, 2)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="runs/fr_en")
    p.add_argument("--repeats", type=int, default=3, help="pairs of runs, plain text then the document")
    p.add_argument("--out", type=Path, default=Path("bench/results/formats_speed.json"))
    args = p.parse_args(argv)
    translator = Translator.load(args.model)
    cfg, options = translator.cfg, translator.options
    sentences = columns(load_pairs(cfg.data.valid, "valid", cfg.data.src_lang, cfg.data.tgt_lang), "src", "tgt")[0]
    translator.translate(sentences[:64], options)  # warm: the first batches allocate
    rows = {}
    for name, (data, texts, fmt) in {
        "srt, 1,000 cues": (*subtitles(sentences), "srt"),
        "docx, 1,000 paragraphs": (*word_file(sentences), "docx"),
    }.items():
        pairs = [  # alternated, so that a slower stretch of the machine weighs on both alike
            (
                timed(lambda texts=texts: translate_lines(translator, texts, options)),
                timed(lambda data=data, fmt=fmt: translate_formatted(translator, data, fmt, options)),
            )
            for _ in range(args.repeats)
        ]
        plain, document = (statistics.median(x) for x in zip(*pairs))
        ratio = round(statistics.median(d / p for p, d in pairs), 3)
        rows[name] = {"plain_s": plain, "document_s": document, "ratio": ratio, "pairs": pairs}
        print(f"{name}: plain text {plain} s, the document {document} s, ratio {ratio} (median of {args.repeats})")
    result = {"model": args.model, "decoding": options.name, "rows": rows}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
