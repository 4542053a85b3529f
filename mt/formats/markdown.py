"""Markdown: the text of paragraphs, headings, list items, quotes and table cells translated; every
other line kept byte for byte.

Parsed with markdown-it-py (CommonMark, with GFM tables and strikethrough), which gives each block
the lines it spans. Each block's inline content becomes a segment: emphasis, strong, strikethrough
and links are its spans; code spans, images, inline HTML, autolinks and hard line breaks its voids,
written back exactly as they were (link targets too). The translation replaces the block's text
inside its lines, behind the same list markers, quote marks and indentation. A block written on
one line stays on one; one wrapped over several is wrapped again at its widest line's width. Code
blocks, HTML blocks, link definitions and front matter are not touched.
"""

from __future__ import annotations

import re
import textwrap
from dataclasses import dataclass

from mt.formats.spans import Segment, Span, Void

_ESCAPE = re.compile(r"([\\`*_\[\]<])")
_STARTS_BLOCK = re.compile(r"^(#{1,6}|[-+*]|\d{1,9}[.)]|>|=+|-+)$")  # a word that would start a block at a line's start


@dataclass(frozen=True)
class Mark:
    """How a span or void is written: what opens and closes it (a void: `opens` alone)."""

    opens: str
    closes: str = ""


@dataclass
class Block:
    """One block's inline content: the lines it spans and what stands before and after its text on each."""

    first: int
    prefixes: list[str]
    suffixes: list[str]
    widths: list[int]
    tail: list[str]  # lines after the text that belong to the block (a setext heading's underline)


def _parser():
    from markdown_it import MarkdownIt
    from markdown_it.rules_inline import image, link

    md = MarkdownIt("commonmark").enable(["table", "strikethrough"])
    md.normalizeLinkText = lambda url: url  # an autolink's text written back as it was
    md.inline.ruler.at("link", _as_written(link))
    md.inline.ruler.at("image", _as_written(image))
    return md


def _as_written(rule):
    """A link or image rule that keeps how the source wrote what it found on its opening token: a
    link's text is translated, but its target stays as written (`](url "title")`, `][ref]`, `]`)."""

    def wrapped(state, silent: bool) -> bool:
        start, first = state.pos, len(state.tokens)
        if not rule(state, silent):
            return False
        if not silent:  # the label scanned again only for what was found: every scan tried costs nesting depth
            image = state.src[start] == "!"
            label_end = state.md.helpers.parseLinkLabel(state, start + image, not image)  # as the rule reads it
            opening = next(t for t in state.tokens[first:] if t.type in ("link_open", "image"))
            opening.meta["written"] = state.src[start : state.pos]
            opening.meta["closes"] = state.src[label_end : state.pos]
        return True

    return wrapped


def _front_matter(lines: list[str]) -> int:
    """How many lines a YAML front matter block takes at the start (0 without one)."""
    if lines and lines[0].rstrip() == "---":
        for i, line in enumerate(lines[1:], 1):
            if line.rstrip() in ("---", "..."):
                return i + 1
    return 0


def _segment(children) -> Segment:
    """An inline token's children as a segment: text with spans and voids, each holding its `Mark`."""
    seg, stack, i = Segment(""), [], 0
    while i < len(children):
        token, kind = children[i], children[i].type
        if kind == "text":
            seg.add_text(token.content)
        elif kind in ("softbreak", "hardbreak"):  # the block is wrapped again as a whole
            if kind == "hardbreak":
                breaking = not seg.text.endswith(" ")
                mark = Mark(_raw(token))
                seg.voids.append(Void(len(seg.text), mark, _open(stack), breaking, True, len(seg.spans)))
            seg.add_text(" ")
        elif kind == "link_open" and token.markup == "autolink":  # <url>: its text is its target
            text = children[i + 1].content if i + 1 < len(children) else token.attrs.get("href", "")
            seg.voids.append(Void(len(seg.text), Mark(f"<{text}>"), _open(stack), opened=len(seg.spans)))
            i += 2  # its text and its close
        elif kind in ("em_open", "strong_open", "s_open", "link_open"):
            seg.spans.append(Span(len(seg.text), len(seg.text), None, _open(stack)))  # closed below
            stack.append((len(seg.spans) - 1, len(seg.text), token))
        elif kind in ("em_close", "strong_close", "s_close", "link_close") and stack:
            index, start, opened = stack.pop()
            seg.spans[index] = Span(start, len(seg.text), _mark(opened), _open(stack))
        else:
            seg.voids.append(Void(len(seg.text), Mark(_raw(token)), _open(stack), opened=len(seg.spans)))
        i += 1
    return seg


def _open(stack: list) -> frozenset[int]:
    """The spans open at this point, which hold what comes next."""
    return frozenset(n for n, _, _ in stack)


def _raw(token) -> str:
    """How a code span, image, hard break or inline HTML is written."""
    if token.type == "code_inline":
        pad = " " if token.content.startswith("`") or token.content.endswith("`") else ""
        return f"{token.markup}{pad}{token.content}{pad}{token.markup}"
    if token.type == "hardbreak":
        return "\\\n"
    if token.type == "image":
        return token.meta["written"]
    return token.content  # inline HTML, and anything else: as written


def _mark(token) -> Mark:
    if token.type == "link_open":
        return Mark("[", token.meta["closes"])
    return Mark(token.markup, token.markup)


def render(nodes: list) -> str:
    """A translated tree written as Markdown: text escaped, marks around their content."""
    out = []
    for n in nodes:
        if isinstance(n, str):
            out.append(_ESCAPE.sub(r"\\\1", n))
        elif n.void:
            out.append(n.tag.opens)
        else:
            out.append(f"{n.tag.opens}{render(n.children)}{n.tag.closes}")
    return "".join(out)


def _block(lines: list[str], token, content: str) -> Block | None:
    """Where an inline token's content lies in `lines`: per line, what stands before and after it."""
    first, end = token.map
    content_lines = content.split("\n")
    prefixes, suffixes, widths = [], [], []
    for k, part in enumerate(content_lines):
        if first + k >= end:
            return None
        line, part = lines[first + k], part.strip()
        at = line.rfind(part) if part else len(line.rstrip())
        if at < 0:
            return None
        prefixes.append(line[:at])
        suffixes.append(line[at + len(part) :])
        widths.append(len(line.rstrip()))
    return Block(first, prefixes, suffixes, widths, lines[first + len(content_lines) : end])


def _wrapped(text: str, block: Block) -> list[str]:
    """The translated text laid over the block's lines: one line where it had one, else wrapped at its
    widest line, each line behind the prefix its place calls for (continuation lines: the second's)."""
    paragraphs = text.split("\\\n")  # hard breaks stay where the translation put them
    if len(block.prefixes) == 1 and len(paragraphs) == 1:
        return [block.prefixes[0] + text + block.suffixes[0]]
    width = max(20, max(block.widths) - max(len(p) for p in block.prefixes))
    out: list[str] = []
    for i, paragraph in enumerate(paragraphs):
        rows = textwrap.wrap(paragraph, width, break_long_words=False, break_on_hyphens=False) or [""]
        rows = _no_block_starts(rows)
        rows[-1] += "\\" if i < len(paragraphs) - 1 else ""
        out += rows
    rest = block.prefixes[1] if len(block.prefixes) > 1 else re.sub(r"[^\s>]", " ", block.prefixes[0])
    lines = [(block.prefixes[0] if i == 0 else rest) + row for i, row in enumerate(out)]
    suffix = block.suffixes[-1]
    return lines[:-1] + [lines[-1] + (suffix if suffix.strip() else "")]


def _no_block_starts(rows: list[str]) -> list[str]:
    """Rows whose first word would start a list, a heading or a quote take it onto the row before."""
    out = [rows[0]]
    for row in rows[1:]:
        word, _, rest = row.partition(" ")
        if _STARTS_BLOCK.match(word):
            out[-1] += " " + word
            row = rest
        if row:
            out.append(row)
    return out


def _table_row(line: str, cells: list[str]) -> str | None:
    """A table row with its cells' text replaced, pipes and padding kept; None where its cells
    cannot be told apart."""
    parts = re.split(r"(?<!\\)\|", line)
    inner = [i for i, p in enumerate(parts) if not (i in (0, len(parts) - 1) and not p.strip())]
    if len(inner) != len(cells):
        return None
    for i, cell in zip(inner, cells):
        part = parts[i]
        lead, trail = part[: len(part) - len(part.lstrip())], part[len(part.rstrip()) :]
        parts[i] = f"{lead}{cell.replace('|', chr(92) + '|')}{trail}"
    return "|".join(parts)


def translate(text: str, job) -> str:
    """Markdown `text` with its prose translated by `job.segments` and everything else kept (the
    markdown format's adapter): see the module notes."""
    lines = text.split("\n")
    skip = _front_matter(lines)
    tokens = _parser().parse("\n" * skip + "\n".join(lines[skip:]))
    blocks, cells, segments = [], {}, []
    in_cell = False
    for token in tokens:
        if token.type in ("th_open", "td_open"):
            in_cell = True
        elif token.type in ("th_close", "td_close"):
            in_cell = False
        if token.type != "inline" or not token.map or not token.content.strip():
            continue
        seg = _segment(token.children or [])
        if in_cell:
            cells.setdefault(token.map[0], []).append(len(segments))
            blocks.append(None)
        else:
            block = _block(lines, token, token.content)
            if block is None:
                continue  # lines it cannot be found in as written: left as they are
            blocks.append(block)
        segments.append(seg)
    translated = [render(nodes) for nodes in job.segments(segments)] if segments else []
    for row, indices in cells.items():
        new = _table_row(lines[row], [translated[i].strip() for i in indices])
        if new is not None:
            lines[row] = new
    for block, new in sorted(
        ((b, t) for b, t in zip(blocks, translated) if b is not None), key=lambda bt: -bt[0].first
    ):
        count = len(block.prefixes)
        replacement = _wrapped(new, block)
        if block.tail and set(block.tail[0].strip()) <= set("=-"):  # a setext heading's underline fits its text
            block.tail[0] = block.tail[0].strip()[0] * max(3, len(replacement[-1]))
        lines[block.first : block.first + count + len(block.tail)] = replacement + block.tail
    return "\n".join(lines)
