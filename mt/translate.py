"""python -m mt.translate [TEXT ...] [--model DIR] [--beam N | --greedy | --sample ...] [--input FILE] [--output FILE]

Translates the positional texts, else the lines of --input or of standard input: exactly one
output line per input line, in order. A line may hold a paragraph: it is cut into sentences, which
are translated and joined back (mt/inference/documents.py; --no-split translates each line whole).
A web page, Markdown, subtitles, a Word file or an EPUB (by --input's extension, or --input-format)
is translated whole with its markup kept (mt/formats/), into --output.
--n-best N prints N scored hypotheses per input (TSV, or JSON lines with --format jsonl);
--alignment appends word alignments; --attention FILE.png draws the cross-attention of one
sentence: these work on one sentence a line. The Python API is `Translator.load(run_dir).translate([...])`.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from mt.errors import UserError, cli_entry
from mt.files import atomic_write, output_file, read_lines, split_lines
from mt.flags import add_confidence_args, add_decoding_args, add_model_args, from_args, open_translator, trust_of
from mt.formats import BINARY, EXTENSIONS, FORMATS, check_kind
from mt.inference.attention_maps import cross_attention, save_heatmap, word_alignment
from mt.inference.documents import translate_lines
from mt.inference.formatted import translate_formatted
from mt.inference.translator import Translator

__all__ = ["Translator", "main"]  # Translator lives in mt.inference.translator; importing it from here still works


def parse_args(argv):
    p = argparse.ArgumentParser(prog="python -m mt.translate", description="Translate sentences with a trained model.")
    p.add_argument("text", nargs="*", help="texts to translate (else --input, else standard input)")
    p.add_argument("--input", help="file of text: each line a sentence or a paragraph")
    p.add_argument(
        "--no-split",
        action="store_true",
        help="translate each line as one sentence instead of cutting it into sentences (n-best lists, "
        "--format jsonl, --alignment and --attention always do)",
    )
    p.add_argument("--output", help="write translations here instead of standard output")
    p.add_argument(
        "--input-format",
        choices=FORMATS,
        help="the input's format, and so the output's, with its markup kept (default: from --input's extension: "
        ".html .xhtml .md .srt .vtt .docx .pptx .xlsx .odt .odp .epub; else text, one line in, one line out)",
    )
    p.add_argument(
        "--format",
        choices=["text", "tsv", "jsonl"],
        help="text: one translation per line (default); tsv: index, score, text (default with --n-best); "
        "jsonl: one JSON object per hypothesis",
    )
    p.add_argument(
        "--confidence",
        action="store_true",
        help="say how sure each translation is: its line's confidence (0 to 1) before it and a tab (text), "
        "a column (tsv), or fields with each word's (jsonl); see --min-confidence",
    )
    p.add_argument("--alignment", action="store_true", help="append ' ||| ' and source-target word alignments (i-j)")
    p.add_argument("--attention", metavar="PNG", help="save a heatmap of one sentence's cross-attention")
    p.add_argument(
        "--layer", type=int, default=-1, help="decoder layer for --attention/--alignment (default: the last)"
    )
    p.add_argument("--head", type=int, help="attention head for --attention/--alignment (default: the mean of all)")
    add_model_args(p)
    add_decoding_args(p)
    add_confidence_args(p)
    return p.parse_intermixed_args(argv)  # sentences before and after options alike


def read_input(args) -> list[str]:
    if args.text:
        return list(args.text)
    if args.input:
        return read_lines(Path(args.input))
    return split_lines(sys.stdin.buffer.read(), "standard input")


def _attention(translator, source: str, hyp, args):
    """(weights, source pieces, output pieces) of one translated sentence."""
    if not isinstance(translator, Translator):
        raise UserError("--attention and --alignment need --engine mt")
    src_ids = translator.encode([source], warn_truncated=False)[0]
    weights = cross_attention(translator.model, src_ids, hyp.ids, args.layer, args.head)
    return weights, translator.pieces(src_ids), translator.pieces(hyp.ids)


def plain_lines(lines: list[str]) -> str:
    return "".join(line.replace("\n", " ") + "\n" for line in lines)


def judged_lines(lines: list[str], done, fmt: str, shown: bool) -> str:
    """The output with confidence: each line's before it (text, with `shown`), as a column (tsv),
    or one JSON object a line with its sentences' confidences and words (jsonl)."""
    out = []
    for index, (source, text) in enumerate(zip(lines, done.lines)):
        text, score = text.replace("\n", " "), done.line_confidence(index)
        if fmt == "jsonl":
            sentences = [{"source": s, "translation": t} | c.to_dict() for s, t, c in done.judged[index]]
            words = [w for s in sentences for w in s["words"]]
            row = {"index": index, "source": source, "translation": text, "confidence": round(score, 4)}
            out.append(json.dumps(row | {"words": words, "sentences": sentences}, ensure_ascii=False))
        elif fmt == "tsv":
            out.append(f"{index}\t{score:.4f}\t{text}")
        else:
            out.append(f"{score:.2f}\t{text}" if shown else text)
    return "".join(line + "\n" for line in out)


def withheld_note(done, trust) -> str:
    """One line: how many sentences fell under --min-confidence, and what took their place."""
    instead = "kept in the source language" if trust.withheld == "source" else "left out"
    lines = [i + 1 for i, line in enumerate(done.judged) if any(c.withheld for _, _, c in line)]
    named = ", ".join(map(str, lines[:10])) + (", ..." if len(lines) > 10 else "")
    where = f" (lines {named})" if lines else ""
    return f"{done.withheld} of {done.sentences} sentences under confidence {trust.threshold:g}, {instead}{where}"


def format_lines(lines, found, fmt: str, alignments=None) -> str:
    """The output text: one line per input (text), or one per hypothesis (tsv, jsonl)."""
    out = []
    for index, hyps in enumerate(found):
        for rank, h in enumerate(hyps):
            text = h.text.replace("\n", " ")
            extra = f" ||| {' '.join(f'{i}-{j}' for i, j in alignments[index])}" if alignments else ""
            if fmt == "text":
                out.append(text + extra)
            elif fmt == "tsv":
                out.append(f"{index}\t{h.score:.4f}\t{text}{extra}")
            else:
                row = {
                    "index": index,
                    "rank": rank,
                    "score": round(h.score, 4),
                    "source": lines[index],
                    "text": text,
                    "tokens": h.tokens,
                }
                out.append(
                    json.dumps(row | ({"alignment": alignments[index]} if alignments else {}), ensure_ascii=False)
                )
            if fmt == "text":
                break  # the best only: one line per input
    return "".join(line + "\n" for line in out)


@cli_entry
def main(argv=None):
    args = parse_args(argv)
    for flag, path in (("--output", args.output), ("--attention", args.attention)):
        if path:
            output_file(path, flag)  # before the work, which a typo in a folder's name would waste
    fmt = document_format(args)
    document = read_document(args, fmt) if fmt != "text" else None  # read and checked before the model loads
    translator = open_translator(args)
    options = from_args(args, translator.options)
    if document is not None:
        translate_document(args, translator, options, fmt, document, trust_of(args, asked=args.confidence))
        return
    lines = read_input(args)
    if args.attention and len(lines) != 1:
        raise UserError(f"--attention draws one sentence; {len(lines)} were given")
    fmt = args.format or ("tsv" if options.n_best > 1 else "text")
    trust = trust_of(args, asked=args.confidence)
    if trust is not None and (options.n_best > 1 or args.alignment or args.attention):
        raise UserError(
            "--confidence and --min-confidence judge each line's best translation: not with --n-best, --alignment "
            "or --attention"
        )
    if trust is not None or (fmt == "text" and not (args.alignment or args.attention)):
        # whole documents: one line out per line in
        done = translate_lines(
            translator, lines, options, args.batch_size, split=not args.no_split, progress=bool(args.output),
            trust=trust,
        )  # fmt: skip
        if done.long_sentences:
            print(done.long_note(translator.max_src_tokens), file=sys.stderr)
        write(args, judged_lines(lines, done, fmt, args.confidence) if trust else plain_lines(done.lines))
        if trust is not None and trust.threshold is not None:
            print(withheld_note(done, trust), file=sys.stderr)
        return
    found = translator.translate(lines, options, batch_size=args.batch_size, hypotheses=True)
    alignments = None
    if args.alignment or args.attention:
        maps = [
            _attention(translator, line, hyps[0], args) if hyps[0].ids else None for line, hyps in zip(lines, found)
        ]
        alignments = [word_alignment(*m) if m else [] for m in maps] if args.alignment else None
        if args.attention and maps[0]:
            save_heatmap(*maps[0], args.attention, title=f"{lines[0]}\n→ {found[0][0].text}")
            print(f"attention heatmap in {args.attention}", file=sys.stderr)
    write(args, format_lines(lines, found, fmt, alignments))


def document_format(args) -> str:
    """The input's format: --input-format, else --input's extension (text where it names none of the
    formats: news.fr is text). A formatted document is translated whole, with its markup."""
    fmt = args.input_format or (EXTENSIONS.get(Path(args.input).suffix.lower(), "text") if args.input else "text")
    if fmt != "text":
        asked = [
            flag
            for flag, on in (
                ("--n-best", args.n_best and args.n_best > 1),
                ("--format", args.format),
                ("--alignment", args.alignment),
                ("--attention", args.attention),
            )
            if on
        ]
        if asked:
            raise UserError(f"{', '.join(asked)} take plain text, not a {fmt} document")
        if fmt in BINARY and not args.output:
            raise UserError(f"a .{fmt} document is written to a file: give --output")
        if fmt in BINARY and args.text:
            raise UserError(f"a .{fmt} document is read from a file: give --input")
    return fmt


def read_document(args, fmt: str) -> bytes:
    """The document's bytes (--input, the texts given, or standard input), checked to be what its
    format says before any model is loaded."""
    if args.input:
        path = Path(args.input)
        if not path.is_file():
            raise UserError(f"--input {args.input}: no such file")
        data = path.read_bytes()
    else:
        data = "\n".join(args.text).encode() if args.text else sys.stdin.buffer.read()
    check_kind(data, fmt, args.input or "the input")
    return data


def translate_document(args, translator, options, fmt: str, data: bytes, trust=None) -> None:
    """A document in a format, translated whole with its markup, to --output or standard output;
    with confidence asked for, its doubtful sentences listed beside it (`write_doubtful`)."""
    judged = [] if trust is not None else None
    out = translate_formatted(
        translator, data, fmt, options, batch_size=args.batch_size, split=not args.no_split,
        progress=bool(args.output), name=args.input or "the input", judged=judged,
    )  # fmt: skip
    if args.output:
        atomic_write(Path(args.output), lambda tmp: Path(tmp).write_bytes(out))
    else:
        sys.stdout.write(out.decode("utf-8") + ("" if out.endswith(b"\n") else "\n"))
    if judged is not None:
        write_doubtful(args.output, judged, DOUBTFUL if trust.threshold is None else trust.threshold)


DOUBTFUL = 0.5  # a document's sentences listed as doubtful under this confidence, without --min-confidence


def write_doubtful(output: str | None, judged: list, threshold: float) -> None:
    """The document's sentences under `threshold`, least sure first, as TSV (confidence, flags,
    source, translation) in OUTPUT.doubtful.tsv, or on standard error without --output. The
    document keeps their translations: its markup was placed around them."""
    doubtful = sorted((c.score, ",".join(c.flags), s, t) for s, t, c in judged if c.score < threshold)
    rows = "".join(f"{score:.4f}\t{flags}\t{s}\t{t}\n".replace("\r", " ") for score, flags, s, t in doubtful)
    note = f"{len(doubtful)} of {len(judged)} sentences under confidence {threshold:g}"
    if output:
        path = Path(f"{output}.doubtful.tsv")
        atomic_write(path, lambda tmp: Path(tmp).write_text("confidence\tflags\tsource\ttranslation\n" + rows))
        print(f"{note}: listed in {path}", file=sys.stderr)
    else:
        sys.stderr.write(f"{note}:\n{rows}")


def write(args, text: str) -> None:
    if args.output:
        atomic_write(Path(args.output), lambda tmp: Path(tmp).write_text(text, encoding="utf-8"))
    else:
        sys.stdout.write(text)


if __name__ == "__main__":
    main()
