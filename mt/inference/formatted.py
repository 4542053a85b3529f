"""Files and texts in a format (HTML, Markdown, subtitles, Word, EPUB), translated with their markup
kept: the inference room's side of mt/formats, which parses and writes, while this module supplies
the translating (mt/inference/markup.py for segments, documents for plain text)."""

from __future__ import annotations

from mt.deadline import checkpoint
from mt.errors import UserError
from mt.formats import translate_bytes, translate_string
from mt.formats.archives import Bounds, bounded
from mt.inference.confidence import Trust
from mt.inference.documents import translate_lines
from mt.inference.markup import translate_segments


def _translators(translator, options, batch_size: int, split: bool, progress: bool, max_chars: int | None, judged):
    def segments(segs):
        checkpoint()  # parsed: a server's request past its deadline goes no further
        chars = sum(len(s.text) for s in segs)
        if max_chars is not None and chars > max_chars:
            raise UserError(f"the document holds {chars:,} characters of text; the limit is {max_chars:,}")
        done = translate_segments(translator, segs, options, batch_size, split, progress, judged)
        checkpoint()  # translated: nor is it written
        return done

    def text(value: str) -> str:
        checkpoint()
        lines = value.split("\n")
        if max_chars is not None and len(value) > max_chars:
            raise UserError(f"the text holds {len(value):,} characters; the limit is {max_chars:,}")
        done = translate_lines(
            translator, lines, options, batch_size, split, progress, None if judged is None else Trust()
        )
        if judged is not None:
            judged.extend(piece for line in done.judged for piece in line)
        checkpoint()
        return "\n".join(done.lines)

    return segments, text


def translate_formatted(
    translator,
    data: bytes | str,
    fmt: str,
    options=None,
    *,
    batch_size: int = 64,
    split: bool = True,
    progress: bool = False,
    max_chars: int | None = None,
    name: str = "the input",
    archive_bounds: Bounds | None = None,
    judged: list | None = None,
) -> bytes | str:
    """`data` in format `fmt` ("html", "markdown", "srt", "docx", "pptx", ...; mt.formats.FORMATS)
    translated, its markup kept: a file's bytes give bytes, a text gives text. `max_chars` bounds
    the text a document may hold, `archive_bounds` what a zip container may unpack to (a server's
    limits; default: mt/formats/archives.py's). Under a deadline (mt.deadline) it stops at its
    next checkpoint once that has passed: after parsing, between lines and alignment batches,
    before writing. With a `judged` list, each sentence's (source, translation, Confidence) is
    added to it."""
    segments, text = _translators(translator, options, batch_size, split, progress, max_chars, judged)
    target = translator.cfg.data.tgt_lang
    try:
        with bounded(archive_bounds):
            if isinstance(data, bytes):
                return translate_bytes(data, fmt, segments, text, name, target)
            return translate_string(data, fmt, segments, text, target)
    except RecursionError:  # the parsers and the span tree walk the markup's nesting
        raise UserError(f"{name}'s markup nests too deeply to be translated") from None
