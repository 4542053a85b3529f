"""Characters written as entities: read as the characters they stand for, and written back as the
same entities, so that a translated page spells its `&nbsp;` and `&copy;` as the source did."""

from __future__ import annotations

import html
import html.entities
import re
from collections.abc import Callable

_ENTITY = re.compile(r"&(#[0-9]+|#[xX][0-9a-fA-F]+|[A-Za-z][A-Za-z0-9]*);")
_MARKUP = re.compile(r"(<!--.*?-->|<!\[CDATA\[.*?\]\]>|<\?.*?\?>|<[^>]*>)", re.S)  # what is not text
_XML_OWN = ("amp", "lt", "gt", "quot", "apos")


def source_entities(source: str) -> dict[str, str]:
    """Each character the source wrote as an entity (but XML's own five), to the entity it wrote."""
    found: dict[str, str] = {}
    for m in _ENTITY.finditer(source):
        char = html.unescape(m.group())
        if char != m.group() and char not in "&<>\"'":
            found.setdefault(char, m.group())
    return found


def _outside_markup(text: str, change) -> str:
    """`change` applied to the text between tags and to attribute values; comments, CDATA and
    processing instructions kept as they are."""
    parts = _MARKUP.split(text)
    for i, part in enumerate(parts):
        if i % 2 == 0:
            parts[i] = change(part)
        elif not part.startswith(("<!", "<?")):
            parts[i] = re.sub(r"(=\s*)(\"[^\"]*\"|'[^']*')", lambda m: m.group(1) + change(m.group(2)), part)
    return "".join(parts)


def numeric(text: str) -> str:
    """XML text with HTML's named entities (`&nbsp;`) as numeric references, which an XML parser
    reads without a DTD; XML's own five and names HTML does not know stay as they are."""

    def replace(m: re.Match) -> str:
        code = html.entities.name2codepoint.get(m.group(1))
        return m.group() if code is None or m.group(1) in _XML_OWN else f"&#{code};"

    return _outside_markup(text, lambda part: re.sub(r"&([A-Za-z][A-Za-z0-9]*);", replace, part))


def _respelling(source: str) -> Callable[[str], str] | None:
    """Text with each character that `source` wrote as an entity written as that entity again; None
    where the source wrote none."""
    entities = source_entities(source)
    if not entities:
        return None
    pattern = re.compile("|".join(map(re.escape, entities)))
    return lambda text: pattern.sub(lambda m: entities[m.group()], text)


def escaping(source: str) -> Callable[[str], str]:
    """How text is written into markup as `source` spells it: `&`, `<` and `>` escaped, and each
    character the source wrote as an entity written as that entity."""
    respell = _respelling(source) or (lambda text: text)
    return lambda text: respell(html.escape(text, quote=False))


def as_in_source(text: str, source: str) -> str:
    """Written XML `text` (already escaped) with each character that `source` wrote as an entity
    written so again."""
    respell = _respelling(source)
    return _outside_markup(text, respell) if respell else text
