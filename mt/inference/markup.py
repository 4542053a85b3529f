"""Segments with inline markup, translated: the text goes through the documents room like any line
(cut into sentences, batched with the rest), and the markup is put back on the target words that
the model's cross-attention aligns to its source words (mt/formats/spans.py).

Only segments that hold markup pay for an alignment: one teacher-forced pass over each of their
sentences, batched, after decoding. How the attention is read (mt/inference/attention_maps.py) was
chosen on tagged validation sentences (bench/markup.py; docs/results.md).
"""

from __future__ import annotations

from mt.deadline import checkpoint
from mt.formats.spans import Aligned, Segment, place
from mt.inference.attention_maps import cross_attention_batch, grown_links
from mt.inference.documents import cut_segmented, joiner, progress_bar, segment_lines, token_counter

ALIGN_BATCH = 64  # sentences aligned in one teacher-forced pass, of like lengths


def surface_offsets(text: str, tokens: list[str], start: int = 0, end: int | None = None) -> list[tuple[int, int]]:
    """Where each subword token lies in `text[start:end]`, as (start, end) characters; a token not
    found there as written (a normalised character, a bare word boundary) gets an empty range."""
    end = len(text) if end is None else end
    out, at = [], start
    for token in tokens:
        surface = token.replace("\u2581", " ").strip()
        found = text.find(surface, at, end) if surface else -1
        if found < 0 or found - at > 4:  # only whitespace and a stray character may lie between tokens
            out.append((at, at))
            continue
        out.append((found, found + len(surface)))
        at = found + len(surface)
    return out


def translate_segments(
    translator,
    segments: list[Segment],
    options,
    batch_size: int = 64,
    split: bool = True,
    progress: bool = False,
    judged: list | None = None,
) -> list[list]:
    """Each segment translated, its markup placed: one list of text and Elements per segment. With
    `progress`, a bar over the sentences as they are decoded; with a `judged` list, each sentence's
    (source, translation, Confidence) is added to it."""
    lines = [_line_ends(seg) for seg in segments]
    segmented = segment_lines(lines, translator.cfg.data.src_lang, split)
    pieces, cuts, _ = cut_segmented(segmented, lines, translator.max_src_tokens, token_counter(translator))
    with progress_bar(len(pieces), progress) as tell:
        found = translator.translate(pieces, options, batch_size=batch_size, hypotheses=True, progress=tell)
    best = [h[0] for h in found]
    if judged is not None:
        judged += zip(pieces, [h.text for h in best], translator.confidence(pieces, best) if pieces else [])
    owner = [i for i, cut in enumerate(cuts) for _ in range(sum(cut.pieces))]
    marked = [k for k, i in enumerate(owner) if not segments[i].plain]
    piece_links = dict(zip(marked, _links(translator, [pieces[k] for k in marked], [best[k] for k in marked])))
    out, k, sep = [], 0, joiner(translator.cfg.data.tgt_lang)
    for seg, cut in zip(segments, cuts):
        n = sum(cut.pieces)
        aligned = _joined(seg, cut, best[k : k + n], [piece_links.get(j) for j in range(k, k + n)], sep)
        out.append(place(seg, aligned))
        k += n
    return out


def _links(translator, sources: list[str], hyps) -> list[tuple[list[str], list[tuple[int, int]]]]:
    """Each (source piece, hypothesis)'s source tokens and (source, target) token links, from one
    model's cross-attention."""
    model = getattr(translator, "model", None)
    if not sources:
        return []
    if model is None:  # an engine whose attention mt cannot read (CTranslate2): tokens in order
        translator.note_once("markup goes back by token position: this engine gives no attention to align it by")
        split = translator.tokenizer.split(sources)
        return [(tokens, _in_order(len(tokens), len(h.tokens))) for tokens, h in zip(split, hyps)]
    src_ids = translator.encode(sources, warn_truncated=False)
    order = sorted(range(len(sources)), key=lambda i: len(src_ids[i]) + len(hyps[i].ids))  # little padding
    weights: dict[int, object] = {}
    for start in range(0, len(order), ALIGN_BATCH):
        checkpoint()  # a server's request past its deadline aligns no further batch
        rows = order[start : start + ALIGN_BATCH]
        found = cross_attention_batch(model, [src_ids[i] for i in rows], [hyps[i].ids for i in rows])
        weights.update(zip(rows, found))
    return [
        (translator.pieces(s), grown_links(weights[i], len(s), len(h.ids)))
        for i, (s, h) in enumerate(zip(src_ids, hyps))
    ]


def _line_ends(seg: Segment) -> str:
    """The segment's text for the sentence splitter: a line break before a capital letter ends a
    sentence (lines of an address, items of a cell: run together, a model drops some), one before a
    small letter only wraps the line. The space beside it becomes a newline, which the splitter
    splits at; offsets stay as they are."""
    text = list(seg.text)
    for void in seg.voids:
        at = void.at if seg.text[void.at : void.at + 1] == " " else void.at - 1
        if void.line and 0 <= at < len(text) and text[at] == " " and seg.text[at + 1 : at + 2].isupper():
            text[at] = "\n"
    return "".join(text)


def _joined(seg: Segment, cut, hyps, links, sep: str) -> Aligned:
    """The segment's pieces' translations joined as documents join them, with every token's place
    in the source text and in the joined target, and the links between them."""
    text, aligned = cut.lead, Aligned("")
    for (start, end), hyp, piece_links in zip(cut.offsets, hyps, links):
        if not hyp.text:
            continue
        if text != cut.lead:
            text += sep
        s_base, t_base = len(aligned.source_units), len(aligned.target_units)
        if piece_links is not None:
            tokens, links_of_piece = piece_links
            aligned.source_units += surface_offsets(seg.text, tokens, start, end)
            aligned.links += [(s + s_base, t + t_base) for s, t in links_of_piece]
        aligned.target_units += [(a + len(text), b + len(text)) for a, b in surface_offsets(hyp.text, hyp.tokens)]
        aligned.pieces.append((start, end, len(aligned.target_units)))
        text += hyp.text
    aligned.text = text + cut.trail
    return aligned


def _in_order(n_src: int, n_tgt: int) -> list[tuple[int, int]]:
    """Links that map tokens by their relative position: each output token to the source token as far along."""
    return [(min(n_src - 1, j * n_src // n_tgt), j) for j in range(n_tgt)] if n_src and n_tgt else []
