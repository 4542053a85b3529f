"""Tag fidelity: how well inline markup survives translation (mt/formats/spans.py), on validation data.

    python bench/markup.py --model runs/fr_en [--sweep] [--greedy] [--out bench/results/markup.json]

The test is built from the run's validation set. A dictionary of words whose translation is
unambiguous is learned from the training captions (French and English words that nearly always
occur in the same pairs: Dice >= 0.8). A validation sentence gets `<b>` around one such word, and
`<i>` around a second where it has one, when the plain translation holds the dictionary's English
word exactly once: that word is where the tag belongs. Where the translation orders the two words
the other way (`chien noir`, `black dog`), the pair is scored apart, since the right output then
has its tags in the other order. A second test tags French verbs (VERBS) that the translation
writes as 'is|are' and an -ing word. Reported, per way of reading the attention:

- tags kept: the share of outputs holding every tag of the input, no more;
- tag sequence: the share of outputs (words in source order) whose tags, in order, are the input's;
- right word: the share of tags whose text is the expected English word (punctuation aside), and
  the same over the reordered pairs;
- verbs: the share of verb tags around both words, around the -ing word, and around 'is|are' alone;
- BLEU of the outputs with their tags stripped, against the references, beside plain translation's.

--sweep compares the reading mt ships (each source token to the output token attending to it most,
averaged over all decoder layers, grown right onto output tokens that attend clearly to the same
source token) with others: the same ungrown, each output token to its most attended source token,
both, their intersection, one layer at a time, and the step that takes a token as input.
"""

import argparse
import collections
import json
import re
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from mt.data.corpora import columns, load_pairs  # noqa: E402
from mt.formats.html import translate_html  # noqa: E402
from mt.inference import attention_maps, markup  # noqa: E402
from mt.inference.metrics import corpus_scores  # noqa: E402
from mt.inference.translator import Translator  # noqa: E402

WORD = re.compile(r"[^\W\d_]{3,}")


def dictionary(pairs: list[tuple[str, str]], min_count: int = 20, min_dice: float = 0.8) -> dict[str, str]:
    """French word -> the English word it nearly always comes with (Dice coefficient over pairs)."""
    fr_count, en_count, both = collections.Counter(), collections.Counter(), collections.Counter()
    for fr, en in pairs:
        f, e = set(WORD.findall(fr.lower())), set(WORD.findall(en.lower()))
        fr_count.update(f)
        en_count.update(e)
        both.update((a, b) for a in f for b in e)
    best: dict[str, tuple[float, str]] = {}
    for (f, e), n in both.items():
        if n >= min_count:
            dice = 2 * n / (fr_count[f] + en_count[e])
            if dice >= min_dice and dice > best.get(f, (0.0, ""))[0]:
                best[f] = (dice, e)
    return {f: e for f, (_, e) in best.items() if f != e}


def _once(word: str, text: str) -> re.Match | None:
    found = list(re.finditer(rf"(?<!\w){re.escape(word)}(?!\w)", text, re.I))
    return found[0] if len(found) == 1 else None


def build_items(sources, plain, words) -> list[dict]:
    """Tagged sources: up to two dictionary words per sentence whose English word the plain
    translation holds exactly once, wrapped in <b> and <i> (in source order); `reordered` where
    the translation has them the other way round."""
    items = []
    for i, (src, out) in enumerate(zip(sources, plain)):
        chosen = []
        for f, e in words.items():
            found, there = _once(f, src), _once(e, out)
            if found and there and not any(found.start() < c[0].end() and c[0].start() < found.end() for c in chosen):
                chosen.append((found, e, there.start()))
        if not chosen or "<" in src or "&" in src:
            continue
        chosen = sorted(chosen[:2], key=lambda c: c[0].start())
        tagged, at = "", 0
        for (found, _, _), tag in zip(chosen, ("b", "i")):
            tagged += src[at : found.start()] + f"<{tag}>{found.group()}</{tag}>"
            at = found.end()
        reordered = len(chosen) == 2 and chosen[0][2] > chosen[1][2]
        items.append(
            {"index": i, "html": tagged + src[at:], "expect": [e for _, e, _ in chosen], "reordered": reordered}
        )
    return items


# French verbs of the captions in the present, each with the -ing words it comes out as; French
# has no progressive, so 'court' becomes 'is running' and a tag on 'court' belongs on both words.
VERBS = {
    "running": "court courent", "playing": "joue jouent", "walking": "marche marchent",
    "looking": "regarde regardent", "watching": "regarde regardent", "wearing": "porte portent",
    "carrying": "porte portent", "jumping": "saute sautent", "swimming": "nage nagent",
    "eating": "mange mangent", "drinking": "boit boivent", "singing": "chante chantent",
    "dancing": "danse dansent", "reading": "lit lisent", "talking": "parle parlent",
    "holding": "tient tiennent", "working": "travaille travaillent", "smiling": "sourit sourient",
    "waiting": "attend attendent", "crossing": "traverse traversent", "climbing": "grimpe grimpent escalade",
    "riding": "monte montent", "sleeping": "dort dorment", "cooking": "cuisine cuisinent",
}  # fmt: skip


def verb_items(sources, plain) -> list[dict]:
    """Tagged sources whose French verb (VERBS) the plain translation writes as 'is|are' and its
    -ing word, once: the tag belongs around both words."""
    items = []
    for i, (src, out) in enumerate(zip(sources, plain)):
        found = [m for m in re.finditer(r"\b(?:is|are) (\w+ing)\b", out) if m.group(1).lower() in VERBS]
        if len(found) != 1 or "<" in src or "&" in src:
            continue
        verbs = [m for v in VERBS[found[0].group(1).lower()].split() if (m := _once(v, src))]
        if len(verbs) == 1:
            at = verbs[0]
            tagged = src[: at.start()] + f"<b>{at.group()}</b>" + src[at.end() :]
            items.append({"index": i, "html": tagged, "expect": found[0].group(0).lower()})
    return items


def score_verbs(items, outputs) -> dict:
    """The shares of verb tags around the auxiliary and the -ing word, around the -ing word (with or
    without the auxiliary), and around the auxiliary alone."""
    from bs4 import BeautifulSoup

    texts = []
    for out in outputs:
        b = BeautifulSoup(out, "html.parser").b
        texts.append(re.sub(r"[^\w]+", " ", b.get_text()).strip().lower() if b else "")
    whole = sum(t == item["expect"] for item, t in zip(items, texts))
    held = sum(item["expect"].split()[1] in t.split() for item, t in zip(items, texts))
    alone = sum(t in ("is", "are") for t in texts)
    n = max(len(items), 1)
    shares = {"verb_whole": whole, "verb_held": held, "verb_auxiliary_alone": alone}
    return {name: round(count / n, 4) for name, count in shares.items()}


def score(items, outputs) -> dict:
    from bs4 import BeautifulSoup

    same = right = tags = reordered_right = reordered_tags = kept = 0
    for item, out in zip(items, outputs):
        found = BeautifulSoup(out, "html.parser").find_all(True)
        kept += sorted(el.name for el in found) == sorted(["b", "i"][: len(item["expect"])])
        by_name = {el.name: el for el in found}
        hits = sum(
            re.sub(r"[^\w]+", " ", by_name[tag].get_text()).strip().lower() == expected if tag in by_name else False
            for tag, expected in zip(("b", "i"), item["expect"])
        )
        if item["reordered"]:
            reordered_right, reordered_tags = reordered_right + hits, reordered_tags + 2
            continue
        same += [el.name for el in found] == ["b", "i"][: len(item["expect"])]
        right, tags = right + hits, tags + len(item["expect"])
    ordered = sum(not item["reordered"] for item in items)
    return {
        "tags_kept": round(kept / len(items), 4),
        "tag_sequence": round(same / max(ordered, 1), 4),
        "right_word": round(right / max(tags, 1), 4),
        "right_word_reordered": round(reordered_right / max(reordered_tags, 1), 4),
        "tags": tags,
        "reordered_tags": reordered_tags,
    }


class Remembering:
    """A translator that decodes each list of sentences once: the settings compared differ only in
    how the markup is placed, not in the translations."""

    def __init__(self, translator):
        self.inner, self.seen = translator, {}

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def translate(self, sentences, options=None, **kw):
        key = (tuple(sentences), options, tuple(sorted(kw.items())))
        if key not in self.seen:
            self.seen[key] = self.inner.translate(sentences, options, **kw)
        return self.seen[key]


def _target_links(w, n_src, n_tgt, shift=False):
    rows = (w[1 : n_tgt + 1] if shift else w[:n_tgt])[:, :n_src]
    return [(int(s), t) for t, s in enumerate(rows.argmax(dim=1).tolist())] if n_src and n_tgt else []


def _shifted_source_links(w, n_src, n_tgt):
    return attention_maps.source_links(w[1:], n_src, n_tgt) if n_src and n_tgt else []


def readings(layers: int) -> dict:
    """Ways of reading the attention: name -> (weights of a batch, links from one pair's weights)."""
    every, source = attention_maps.cross_attention_batch, attention_maps.source_links
    out = {
        "source tokens grown right, all layers (shipped)": (every, attention_maps.grown_links),
        "source tokens, all layers": (every, source),
        "output tokens, all layers": (every, _target_links),
        "both, all layers": (every, lambda w, s, t: sorted(set(source(w, s, t)) | set(_target_links(w, s, t)))),
        "intersection, all layers": (
            every,
            lambda w, s, t: sorted(set(source(w, s, t)) & set(_target_links(w, s, t))) or _target_links(w, s, t),
        ),
        "source tokens, read a step later": (every, _shifted_source_links),
    }
    for layer in range(layers):
        out[f"source tokens, layer {layer + 1} of {layers}"] = (
            lambda model, src, tgt, layer=layer: attention_maps.cross_attention_batch(model, src, tgt, [layer]),
            source,
        )
    return out


def translate_fragments(fragments: list[str], translate) -> list[str]:
    """Fragments translated in one call, so that their sentences are batched together: each is a
    paragraph of one page, and comes back as that paragraph's content."""
    from bs4 import BeautifulSoup

    page = "".join(f"<p>{fragment}</p>" for fragment in fragments)
    paragraphs = BeautifulSoup(translate_html(page, translate), "html.parser").find_all("p", recursive=False)
    return [p.decode_contents() for p in paragraphs]


def run_setting(translator, items, verbs, refs, options, name: str, reading) -> dict:
    markup.cross_attention_batch, markup.grown_links = reading
    started = time.perf_counter()
    translate = lambda segments: markup.translate_segments(translator, segments, options)  # noqa: E731
    outputs = translate_fragments([item["html"] for item in items], translate)
    seconds = time.perf_counter() - started
    verbs_out = translate_fragments([item["html"] for item in verbs], translate)
    from bs4 import BeautifulSoup

    stripped = [BeautifulSoup(o, "html.parser").get_text() for o in outputs]
    result = {"reading": name} | score(items, outputs) | score_verbs(verbs, verbs_out) | {"seconds": round(seconds, 1)}
    result["bleu_stripped"] = round(corpus_scores(stripped, refs)["bleu"], 2)
    return result


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="runs/fr_en")
    p.add_argument("--sweep", action="store_true", help="compare other ways of reading the attention")
    p.add_argument("--greedy", action="store_true", help="greedy decoding (default: the run's beam)")
    p.add_argument("--limit", type=int, default=0, help="at most this many tagged sentences (0: all)")
    p.add_argument("--out", type=Path, default=Path("bench/results/markup.json"))
    args = p.parse_args(argv)
    translator = Remembering(Translator.load(args.model))
    cfg = translator.cfg
    options = translator.options.replace(beam=1) if args.greedy else translator.options
    train = load_pairs({"corpus": "multi30k"}, "train", cfg.data.src_lang, cfg.data.tgt_lang)
    words = dictionary(list(zip(*columns(train, "src", "tgt"))))
    sources, references = columns(
        load_pairs(cfg.data.valid, "valid", cfg.data.src_lang, cfg.data.tgt_lang), "src", "tgt"
    )
    plain = translator.translate(sources, options)
    items = build_items(sources, plain, words)[: args.limit or None]
    verbs = verb_items(sources, plain)[: args.limit or None]
    refs = [references[item["index"]] for item in items]
    plain_bleu = round(corpus_scores([plain[item["index"]] for item in items], refs)["bleu"], 2)
    print(f"{len(words)} dictionary words; {len(items)} tagged sentences, {sum(len(i['expect']) for i in items)} tags; "
          f"plain BLEU {plain_bleu}; {len(verbs)} tagged verbs")  # fmt: skip
    choices = readings(len(translator.model.decoder))
    rows = []
    for name, reading in list(choices.items())[: None if args.sweep else 1]:
        rows.append(run_setting(translator, items, verbs, refs, options, name, reading))
        print(json.dumps(rows[-1]))
    result = {"model": args.model, "decoding": options.name, "sentences": len(items), "verbs": len(verbs)}
    result["plain_bleu"] = plain_bleu
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result | {"settings": rows}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
