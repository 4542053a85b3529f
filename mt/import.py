"""python -m mt.import marian SOURCE [--out RUN_DIR]

SOURCE is a directory holding a MarianMT model as `transformers` saves it (config.json, the
weights, source.spm, target.spm, vocab.json) or, with internet and the `import` extra, a hub name
such as Helsinki-NLP/opus-mt-fr-en. The result is an ordinary run directory: translate, evaluate,
score, serve, export and fine-tune (train.init_from) take it as they take a trained one.
"""

from __future__ import annotations

import argparse

from mt.errors import cli_entry


@cli_entry
def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m mt.import", description="Import a pretrained model as a run directory.")
    p.add_argument("format", choices=["marian"], help="the checkpoint's kind: marian (OPUS-MT, MarianMT)")
    p.add_argument("source", help="a model directory, or a hub name such as Helsinki-NLP/opus-mt-fr-en")
    p.add_argument("--out", help="a new run directory (default runs/<the source's last name>)")
    p.add_argument("--src-lang", help="source language code (default: from the model's name or tokenizer config)")
    p.add_argument("--tgt-lang", help="target language code")
    args = p.parse_args(argv)
    if bool(args.src_lang) != bool(args.tgt_lang):
        p.error("give both --src-lang and --tgt-lang, or neither")
    from mt.importers.marian import import_marian

    out = import_marian(args.source, args.out, (args.src_lang, args.tgt_lang) if args.src_lang else None)
    print(f'imported {args.source} into {out}; try: python -m mt.translate --model {out} "bonjour"')


if __name__ == "__main__":
    main()
