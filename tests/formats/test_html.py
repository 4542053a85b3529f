"""Web pages (mt/formats/html.py), read back with BeautifulSoup: the same elements and attributes in
the same order, the text translated, and what must stay (scripts, code, the head, entities) kept."""

import pytest
from helpers import Reverse, Upper, xml_names

bs4 = pytest.importorskip("bs4", reason="the formats extra is not installed (pip install 'mt[formats]')")

from lxml import etree  # noqa: E402

from mt.inference.formatted import translate_formatted  # noqa: E402

PAGE = """<!DOCTYPE html>
<html lang="fr">
<head><meta charset="utf-8"><title>Le titre</title>
<style>p > b { color: red }</style><script>if (a < b && c) { go(); }</script></head>
<body>
<!-- un commentaire -->
<h1 id="top">Le <em>grand</em> titre</h1>
<p class="intro">Le <b class="x" data-n="1">chat</b> noir dort&nbsp;ici &copy; 2024 &amp;
<a href="/chien?a=1&amp;b=2" title="le chien">le chien</a>.<br>
Une ligne apr&egrave;s la pause.</p>
<ul><li>un <i>item</i><ul><li>deux</li></ul></li></ul>
<table><tr><td>cellule une</td><td>cellule deux</td></tr></table>
<p>Lancez <code>ls -l &gt; out</code> puis <kbd>Entrée</kbd>.</p>
<pre>  ne pas   traduire  </pre>
<div translate="no">pas ici</div><p class="notranslate big">non plus</p>
<img src="chat.png" alt="un chat"><input placeholder="votre nom" value="garder">
</body>
</html>
"""


def tree(html):
    """Every element's name and attributes, in document order, as BeautifulSoup reads them."""
    return [(el.name, list(el.attrs.items())) for el in bs4.BeautifulSoup(html, "html.parser").find_all(True)]


def translate(text, **kw):
    return translate_formatted(Upper(), text, "html", **kw)


def test_the_same_elements_and_attributes_in_order_come_back_around_translated_text():
    out = translate(PAGE)
    expected = [
        (name, [(k, v.upper() if k in ("alt", "title", "placeholder") else v) for k, v in attrs])
        for name, attrs in tree(PAGE)
    ]
    expected = [(n, a) for n, a in expected if n != "html"]
    got = [(n, a) for n, a in tree(out) if n != "html"]
    assert got == expected
    assert '<html lang="en">' in out  # the page now says what language it is in
    soup = bs4.BeautifulSoup(out, "html.parser")
    assert soup.find("b").get_text() == "CHAT" and soup.find("em").get_text() == "GRAND"
    assert soup.find("a").get_text() == "LE CHIEN" and soup.find("a")["href"] == "/chien?a=1&b=2"
    assert soup.title.get_text() == "LE TITRE" and [td.get_text() for td in soup.find_all("td")] == [
        "CELLULE UNE",
        "CELLULE DEUX",
    ]


def test_scripts_styles_code_pre_comments_and_no_translate_parts_are_kept_as_they_were():
    out = translate(PAGE)
    for kept in (
        "<style>p > b { color: red }</style>",
        "<script>if (a < b && c) { go(); }</script>",
        "<!-- un commentaire -->",
        "<code>ls -l &gt; out</code>",
        "<kbd>Entrée</kbd>",
        "<pre>  ne pas   traduire  </pre>",
        '<div translate="no">pas ici</div>',
        '<p class="notranslate big">non plus</p>',
        'value="garder"',
        '<meta charset="utf-8">',
    ):
        assert kept in out, kept


def test_the_doctype_and_the_entities_the_source_wrote_are_kept():
    out = translate(PAGE)
    assert out.startswith("<!DOCTYPE html>\n<html")
    assert "&nbsp;" in out and "&copy;" in out and "&amp;" in out  # as the source wrote them
    assert "APRÈS" in out  # "apr&egrave;s" upper-cased: a character the source wrote no entity for


def test_block_elements_are_sentence_boundaries_and_inline_ones_are_not():
    upper = Upper()
    translate_formatted(upper, "<p>Le <b>chat</b> <i>noir</i> dort.</p><div>Un chien.<p>Deux</p></div>", "html")
    assert upper.seen == ["Le chat noir dort.", "Un chien.", "Deux"]


def test_a_line_break_before_a_capital_ends_a_sentence_and_one_before_a_small_letter_wraps_it():
    upper = Upper()
    out = translate_formatted(upper, "<p>Un chat noir<br>Un chien blanc</p><p>Un chat<br>qui dort</p>", "html")
    assert upper.seen == ["Un chat noir", "Un chien blanc", "Un chat qui dort"]
    assert out == "<p>UN CHAT NOIR<br>UN CHIEN BLANC</p><p>UN CHAT<br>QUI DORT</p>"


def test_a_fragment_stays_a_fragment_and_malformed_markup_is_repaired_without_losing_text():
    assert translate("<p>Le <b>chat</b> noir.</p>") == "<p>LE <b>CHAT</b> NOIR.</p>"
    out = translate("<p>Le <b>chat <i>noir</b> dort <span>ici")
    soup = bs4.BeautifulSoup(out, "html.parser")
    assert soup.get_text() == "LE CHAT NOIR DORT ICI" and soup.find("i").find_parent("b") is not None
    assert [el.name for el in soup.find_all(True)] == ["p", "b", "i", "span"]


def test_xhtml_keeps_case_namespaces_and_self_closing_tags():
    page = (
        '<?xml version="1.0" encoding="utf-8"?>\n<html xmlns="http://www.w3.org/1999/xhtml" '
        'xmlns:epub="http://www.idpf.org/2007/ops"><head><title>T</title></head><body>'
        '<p epub:type="x">Le <b>chat</b><br/>dort.</p><svg viewBox="0 0 1 1"><text>garder</text></svg></body></html>'
    )
    out = translate_formatted(Upper(), page, "xhtml")
    assert out.startswith('<?xml version="1.0" encoding="utf-8"?>')
    assert 'epub:type="x"' in out and 'viewBox="0 0 1 1"' in out and "<text>garder</text>" in out
    assert "<b>CHAT</b><br/>DORT." in out


def test_an_empty_inline_element_stays_beside_its_sibling_not_inside_it():
    page = '<p><a href="/"><img src="logo.png"></a><a href="/a">Accueil</a></p>'
    assert translate(page) == '<p><a href="/"><img src="logo.png"></a><a href="/a">ACCUEIL</a></p>'


def test_a_void_keeps_its_place_and_its_spacing_beside_the_word_it_touches():
    assert translate("<p><img src=i.png><b>Le chat</b> dort</p>") == '<p><img src="i.png"><b>LE CHAT</b> DORT</p>'
    assert translate("<p>Voir <img src=x.png>la photo</p>") == '<p>VOIR <img src="x.png">LA PHOTO</p>'


def test_xhtml_declares_the_target_language_in_lang_and_xml_lang():
    page = (
        '<html xmlns="http://www.w3.org/1999/xhtml" lang="fr" xml:lang="fr"><head><title>T</title></head>'
        "<body><p>Le chat.</p></body></html>"
    )
    root = etree.fromstring(translate_formatted(Upper(), page, "xhtml").encode())
    assert root.get("lang") == "en" and root.get("{http://www.w3.org/XML/1998/namespace}lang") == "en"


def test_markup_follows_its_words_where_the_translation_reorders_them():
    def reversed_(page):
        return translate_formatted(Reverse(), page, "html")

    assert reversed_("<p>Le <b>chat</b> noir dort.</p>") == "<p>DORT NOIR <b>CHAT</b> LE.</p>"
    nested = reversed_('<p>Le <a href="/c"><b>chat</b> <i>noir</i></a> dort</p>')
    assert nested == '<p>DORT <a href="/c"><i>NOIR</i> <b>CHAT</b></a> LE</p>'
    assert reversed_("<p><img src=i.png><b>Le chat</b> dort</p>") == '<p>DORT <img src="i.png"><b>CHAT LE</b></p>'
    assert reversed_("<p>Voir <img src=x.png>la photo</p>") == '<p>PHOTO <img src="x.png">LA VOIR</p>'
    empty = reversed_('<p><a href="/"><img src="logo.png"></a><a href="/a">Accueil du site</a></p>')
    assert empty == '<p><a href="/"><img src="logo.png"></a><a href="/a">SITE DU ACCUEIL</a></p>'


def test_an_xhtml_page_keeps_every_namespace_it_had():
    page = (
        '<?xml version="1.0" encoding="utf-8"?>\n<!DOCTYPE html>\n<html xmlns="http://www.w3.org/1999/xhtml" '
        'xmlns:epub="http://www.idpf.org/2007/ops" xmlns:m="http://www.w3.org/1998/Math/MathML" lang="fr">'
        '<head><title>Le titre</title><script src="a.js"></script></head><body><section epub:type="chapter">'
        '<p>Le <b>chat</b> <span epub:type="noteref">noir</span> dort<m:math><m:mi>x</m:mi></m:math>.</p>'
        '<svg xmlns="http://www.w3.org/2000/svg" xmlns:xlink="http://www.w3.org/1999/xlink">'
        '<use xlink:href="#a"/></svg></section></body></html>'
    )
    for translator in (Upper(), Reverse()):
        out = translate_formatted(translator, page, "xhtml")
        assert xml_names(out.encode()) == xml_names(page.encode())
        root = etree.fromstring(out.encode())
        assert root.nsmap == etree.fromstring(page.encode()).nsmap
        assert out.startswith('<?xml version="1.0" encoding="utf-8"?>\n<!DOCTYPE html>\n<html')
        assert '<script src="a.js"></script>' in out  # an empty element a browser needs closed
    assert "DORT<m:math><m:mi>x</m:mi></m:math>" in out and '<span epub:type="noteref">NOIR</span>' in out
