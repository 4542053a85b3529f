"""Markdown (mt/formats/markdown.py): prose translated, every other line kept byte for byte, and the
markup inside a paragraph (emphasis, links, code spans) kept on its words."""

import pytest
from helpers import Reverse, Upper

pytest.importorskip("markdown_it", reason="the formats extra is not installed (pip install 'mt[formats]')")

from mt.inference.formatted import translate_formatted  # noqa: E402

DOCUMENT = """---
title: Mon document
---
# Le *titre* principal

Un paragraphe avec **du gras** et `un_code` et un [lien](http://x.org/a_b?c=1 "titre"), écrit
sur deux lignes, assez longues pour que le texte traduit soit replié encore une fois.

- premier élément
- deuxième *élément*
  1. sous-élément numéroté

> une citation
> sur deux lignes

| chat | chien |
|------|------:|
| noir | blanc |

```python
x = "ne pas traduire"  # ni ceci
```

    un bloc de code indenté

<div class="garder">un bloc HTML</div>

Voir <https://exemple.fr/page> et ![une image](img.png "légende").

Titre souligné
==============

[ref]: http://example.com/ref
"""


def translate(text):
    return translate_formatted(Upper(), text, "markdown")


def test_code_blocks_html_blocks_front_matter_and_definitions_come_back_byte_for_byte():
    out = translate(DOCUMENT)
    for kept in (
        "---\ntitle: Mon document\n---\n",
        '```python\nx = "ne pas traduire"  # ni ceci\n```\n',
        "    un bloc de code indenté\n",
        '<div class="garder">un bloc HTML</div>\n',
        "[ref]: http://example.com/ref\n",
    ):
        assert kept in out, kept


def test_headings_lists_quotes_tables_and_emphasis_keep_their_markers():
    out = translate(DOCUMENT).splitlines()
    assert "# LE *TITRE* PRINCIPAL" in out
    assert "- PREMIER ÉLÉMENT" in out and "- DEUXIÈME *ÉLÉMENT*" in out and "  1. SOUS-ÉLÉMENT NUMÉROTÉ" in out
    assert out[out.index("> UNE CITATION SUR") + 1] == "> DEUX LIGNES"  # wrapped again, behind its marks
    assert "| CHAT | CHIEN |" in out and "|------|------:|" in out and "| NOIR | BLANC |" in out
    assert "TITRE SOULIGNÉ" in out and "==============" in out


def test_code_spans_urls_and_link_targets_are_kept_and_a_wrapped_paragraph_is_wrapped_again():
    out = translate(DOCUMENT)
    paragraph = next(block for block in out.split("\n\n") if block.startswith("UN PARAGRAPHE")).split("\n")
    assert len(paragraph) >= 2 and all(len(line) <= 96 for line in paragraph)  # its widest source line
    joined = " ".join(paragraph)
    assert "**DU GRAS**" in joined and "`un_code`" in joined and '[LIEN](http://x.org/a_b?c=1 "titre")' in joined
    assert "<https://exemple.fr/page>" in out and '![une image](img.png "légende")' in out


def test_a_one_line_paragraph_stays_on_one_line():
    assert translate("Une *seule* ligne, même très longue, " * 5 + "reste seule.\n").count("\n") == 1


def test_a_reference_link_stays_a_reference_link():
    out = translate("Voir [la doc][ref] et [ceci][].\n\n[ref]: http://example.com/ref\n[ceci]: http://example.com/c\n")
    assert out.splitlines()[0] == "VOIR [LA DOC][ref] ET [CECI][]."


def test_emphasis_and_links_follow_their_words_where_the_translation_reorders_them():
    out = translate_formatted(Reverse(), "Le *chat* noir dort sur le [tapis](http://x.org) rouge.\n", "markdown")
    assert out == "ROUGE [TAPIS](http://x.org) LE SUR DORT NOIR *CHAT* LE.\n"


def test_a_link_after_many_brackets_tried_is_still_a_link_and_its_target_never_reaches_the_model():
    # each place a link could start is tried; scanning its label there too once used up markdown-it's
    # nesting depth, and the link further on came out as text.
    upper = Upper()
    out = translate_formatted(upper, "Voir: " * 20 + "[le site](http://x)\n", "markdown")
    assert out.endswith("[LE SITE](http://x)\n") and not any("http" in s for s in upper.seen)
    assert translate("Une ![image [en] ligne](i.png) ici.\n") == "UNE ![image [en] ligne](i.png) ICI.\n"
