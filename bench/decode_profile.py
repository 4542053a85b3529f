"""Where decoding's time goes on a CPU: the encoder, the decoder layers, the output layer with its
softmax, the top-k (greedy: the argmax), the caches' moves and the rest (the search's bookkeeping,
tokenising), with the whole vocabulary and (where the run has one) with its shortlist. The output
layer's and the top-k's shares together bound what any shortlist can win.

    python bench/decode_profile.py --model runs/fr_en_student --quantize int8

One thread, one batch at a time, so that each part's time is the wall time it took and the shares
add up to the whole: the per-core picture of the default decoding, which runs one batch per
thread. Each part is timed by wrapping the `Decoder` method (or function) that does it, in this
process only. The run's first validation set (`--valid` to change it) is translated once to warm
up, then once per way.
"""

from __future__ import annotations

import argparse
import collections
import functools
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from mt.data.corpora import columns, load_pairs  # noqa: E402
from mt.errors import UserError, cli_entry  # noqa: E402
from mt.inference import search  # noqa: E402
from mt.inference.translator import Translator  # noqa: E402

PARTS = {  # what is timed: (owner, attribute) -> the part's name
    (search.Decoder, "__init__"): "encoder",  # a batch's encoding, its empty caches, a shortlist's rows
    (search.Decoder, "_states"): "decoder layers",
    (search.Decoder, "_scores"): "output layer + softmax",
    (search, "topk_rows"): "top-k",
    (search, "argmax_rows"): "top-k",
    (search.Decoder, "keep"): "cache moves",
}


def time_parts(spent: collections.Counter) -> None:
    """Wrap every part of PARTS so that its calls add their seconds to `spent[name]`; a part called
    inside another is an error, since its time would be counted twice."""
    running = []

    for (owner, attribute), name in PARTS.items():
        original = getattr(owner, attribute)

        def timed(*args, _original=original, _name=name, **kwargs):
            if running:
                raise RuntimeError(f"{_name} runs inside {running[0]}: its time would count twice")
            running.append(_name)
            start = time.perf_counter()
            try:
                return _original(*args, **kwargs)
            finally:
                spent[_name] += time.perf_counter() - start
                running.pop()

        setattr(owner, attribute, functools.wraps(original)(timed))


def parse_args(argv):
    p = argparse.ArgumentParser(prog="bench/decode_profile.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="runs/fr_en", help="a run directory")
    p.add_argument("--valid", help="the corpus spec to translate (default: the run's first validation set)")
    p.add_argument("--limit", type=int, default=1000, help="its first N sentences (0: all; default 1000)")
    p.add_argument("--beam", type=int, default=5, help="beam size (1: greedy; default 5)")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--quantize", choices=["int8"], help="int8 weights")
    p.add_argument("--out", help="write each way's seconds per part as JSON here")
    return p.parse_args(argv)


@cli_entry
def main(argv=None):
    args = parse_args(argv)
    torch.set_num_threads(1)
    translator = Translator.load(args.model, "cpu", args.quantize)
    cfg = translator.cfg
    spec = args.valid or next(iter(cfg.data.valid_sets), None)
    if spec is None:
        raise UserError(f"{args.model} names no validation set; give --valid")
    sources = columns(load_pairs(spec, "valid", cfg.data.src_lang, cfg.data.tgt_lang), "src")[0]
    sources = sources[: args.limit] if args.limit else sources
    spent: collections.Counter = collections.Counter()
    time_parts(spent)
    ways = [("warm-up", False), ("whole vocabulary", False)]
    if translator.shortlist is not None:
        ways.append(("shortlist", True))
    print(f"{args.model} ({args.quantize or 'fp32'}), {len(sources)} sentences of {spec}, beam {args.beam}, 1 thread")
    rows = {}
    for way, on in ways:
        options = translator.options.replace(beam=args.beam, temperature=0.0, shortlist=on)
        spent.clear()
        spent.update(dict.fromkeys(PARTS.values(), 0.0))  # a part that never ran is there, at 0
        start = time.perf_counter()
        translator.translate(sources, options, batch_size=args.batch_size, warn_truncated=False, workers=1)
        total = time.perf_counter() - start
        spent["the rest"] = total - sum(spent.values())
        if way != "warm-up":
            rows[way] = {"seconds": total, "parts": dict(spent)}
        shares = ", ".join(f"{name} {seconds / total:.1%}" for name, seconds in spent.items())
        print(f"{way}: {total:.2f} s; {shares}", flush=True)
    if args.out:
        meta = {"model": args.model, "quantize": args.quantize, "valid": str(spec), "beam": args.beam}
        Path(args.out).write_text(json.dumps({**meta, "sentences": len(sources), "ways": rows}, indent=2))


if __name__ == "__main__":
    main()
