"""What a markup language's elements are to a translation: which bound a segment, which are kept as
they are, which move whole. HTML's is here; OpenDocument's is beside its reader."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Vocabulary:
    """Elements by name without prefix, lower-cased: blocks bound segments (as does any element
    holding one); untouched elements are kept as they are, as boundaries where they are
    `untouched_blocks` or hold a block, else as voids (`inline` ones even holding a block: a comment
    on a word); `voids` move whole, and `breaking` ones part two words; `attributes` are translated."""

    blocks: frozenset[str]
    untouched: frozenset[str]
    untouched_blocks: frozenset[str]
    voids: frozenset[str]
    breaking: frozenset[str]
    attributes: tuple[str, ...] = ()
    inline: frozenset[str] = frozenset()
    lines: frozenset[str] = frozenset()  # voids that break a line


def element_names(text: str) -> frozenset[str]:
    """Names written one after another, as a set."""
    return frozenset(text.split())


HTML = Vocabulary(
    blocks=element_names(
        "address article aside blockquote body caption center dd details dialog dir div dl dt fieldset figcaption "
        "figure footer form frameset h1 h2 h3 h4 h5 h6 head header hgroup hr html legend li main menu nav ol "
        "optgroup option p section summary table tbody td tfoot th thead title tr ul"
    ),
    untouched=element_names("script style pre code kbd samp var textarea template svg math noscript iframe object"),
    untouched_blocks=element_names("script style pre textarea template noscript"),
    voids=element_names("area base br col embed hr img input link meta param source track wbr"),
    breaking=element_names("br hr"),
    attributes=("alt", "title", "placeholder"),
    lines=element_names("br"),
)
