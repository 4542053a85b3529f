"""A glossary enforced by constrained beam search (mt/inference/constraints.py), against plain beam
search, on a term test built from validation data.

    python bench/glossary.py --model runs/fr_en [--valid multi30k] [--out bench/results/glossary.json]

The test: validation sentences whose reference uses a content word the model's own translation
lacks (the reference says "guy" where the model says "man"). The source word that word translates
is found by alignment (the model's cross-attention over the reference, read as markup placement
reads it), and the pair is the sentence's glossary: one term, whose source word occurs once in it.
Sentences with the same term are translated together, each group with its glossary, and plain beam
search translates the same groups. Function words (the 150 commonest of each language in the
training captions) are no terms. Reported, at the run's beam size:

- term success: the share of (sentence, term) pairs whose output holds the term's target word, for
  constrained and for plain beam search;
- BLEU of both against the references, on the sentences with terms;
- time of both on those sentences;
- the sentences the glossary matches nothing in: the share whose output is plain beam's, exactly.
"""

from __future__ import annotations

import argparse
import collections
import json
import re
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from mt.data.corpora import columns, load_pairs  # noqa: E402
from mt.glossary import Glossary  # noqa: E402
from mt.inference.attention_maps import cross_attention_batch, source_links  # noqa: E402
from mt.inference.metrics import corpus_scores  # noqa: E402
from mt.inference.translator import Translator  # noqa: E402

WORD = re.compile(r"[^\W\d_]{3,}")


def word_of_token(pieces: list[str]) -> list[int]:
    """The index of the word each subword piece belongs to (a piece starting with '▁' starts one)."""
    out, word = [], -1
    for p in pieces:
        word += p.startswith("\u2581") or word < 0
        out.append(word)
    return out


def common_words(pairs, top: int = 150) -> set[str]:
    """The commonest words of the training captions, both sides: function words, never terms."""
    counts = collections.Counter(w for fr, en in pairs for w in WORD.findall(f"{fr} {en}".lower()))
    return {w for w, _ in counts.most_common(2 * top)}


def terms_by_alignment(translator, sources, references, outputs, common) -> dict[int, tuple[str, str]]:
    """Per sentence, one (source word, reference word) pair: a content word of the reference that
    the output lacks, and the one source word that aligns to it (once in the source)."""
    found = {}
    src_ids = translator.encode(sources, warn_truncated=False)
    ref_ids = translator.tokenizer.encode_batch(references, "tgt")
    for start in range(0, len(sources), 64):
        rows = range(start, min(start + 64, len(sources)))
        weights = cross_attention_batch(translator.model, [src_ids[i] for i in rows], [ref_ids[i] for i in rows])
        for i, w in zip(rows, weights):
            s_pieces, r_pieces = translator.pieces(src_ids[i]), translator.pieces(ref_ids[i])
            s_words, r_words = word_of_token(s_pieces), word_of_token(r_pieces)
            s_text = "".join(s_pieces).replace("\u2581", " ").split()
            r_text = "".join(r_pieces).replace("\u2581", " ").split()
            into = collections.defaultdict(set)
            for s, t in source_links(w, len(src_ids[i]), len(ref_ids[i])):
                into[r_words[t]].add(s_words[s])
            output_words = set(WORD.findall(outputs[i].lower()))
            for r, word in enumerate(r_text):
                word = word.lower()
                if not WORD.fullmatch(word) or word in common or word in output_words or len(into[r]) != 1:
                    continue
                source = s_text[next(iter(into[r]))].lower()
                if WORD.fullmatch(source) and source not in common and sources[i].lower().split().count(source) == 1:
                    found[i] = (source, word)
                    break
    return found


def contains(text: str, word: str) -> bool:
    return re.search(rf"(?<!\w){re.escape(word)}(?!\w)", text, re.I) is not None


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="runs/fr_en")
    p.add_argument("--out", type=Path, default=Path("bench/results/glossary.json"))
    p.add_argument("--valid", help="the validation set to build the test from (default: the run's first)")
    args = p.parse_args(argv)
    translator = Translator.load(args.model)
    cfg, options = translator.cfg, translator.options
    valid = args.valid or next(iter(cfg.data.valid_sets), None)
    sources, references = columns(load_pairs(valid, "valid", cfg.data.src_lang, cfg.data.tgt_lang), "src", "tgt")
    plain = translator.translate(sources, options)
    train = load_pairs({"corpus": "multi30k"}, "train", cfg.data.src_lang, cfg.data.tgt_lang)
    terms = terms_by_alignment(translator, sources, references, plain, common_words(zip(*columns(train, "src", "tgt"))))
    groups = collections.defaultdict(list)
    for i, term in sorted(terms.items()):
        groups[term].append(i)
    runs = {"plain": {}, "constrained": {}}
    seconds = {"plain": 0.0, "constrained": 0.0}
    for term, rows in groups.items():
        glossary = Glossary.of([term])
        for name, o in (("plain", options), ("constrained", options.replace(glossary=glossary))):
            started = time.perf_counter()
            outs = translator.translate([sources[i] for i in rows], o)
            seconds[name] += time.perf_counter() - started
            runs[name].update(zip(rows, outs))
    tested = sorted(terms)
    success = {name: sum(contains(runs[name][i], terms[i][1]) for i in tested) / len(tested) for name in runs}
    bleu = {
        name: corpus_scores([runs[name][i] for i in tested], [references[i] for i in tested])["bleu"] for name in runs
    }
    everything = Glossary.of(sorted(set(terms.values())))
    without = [i for i, s in enumerate(sources) if not everything.find(s)]
    others = translator.translate([sources[i] for i in without], options.replace(glossary=everything))
    result = {
        "model": args.model,
        "decoding": options.name,
        "sentences_with_terms": len(tested),
        "distinct_terms": len(groups),
        "term_success": {name: round(v, 4) for name, v in success.items()},
        "bleu": {name: round(v, 2) for name, v in bleu.items()},
        "seconds": {name: round(v, 2) for name, v in seconds.items()},
        "time_ratio": round(seconds["constrained"] / seconds["plain"], 3),
        "sentences_without_terms": len(without),
        "identical_without_terms": round(sum(o == plain[i] for o, i in zip(others, without)) / max(len(without), 1), 4),
        "examples": [
            {
                "source": sources[i],
                "term": terms[i],
                "plain": runs["plain"][i],
                "glossary": runs["constrained"][i],
                "reference": references[i],
            }
            for i in tested[:12]
        ],
    }
    print(json.dumps({k: v for k, v in result.items() if k != "examples"}, indent=1))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2, ensure_ascii=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
