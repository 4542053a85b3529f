"""Benchmark translation decoding: sentences/s and target tokens/s for greedy and beam search, at
several batch sizes, with and without the KV cache, and the BLEU of each output.

    python bench/decode.py --model runs/fr_en_cpu             # Multi30k test_2016_flickr, 1000 sentences
    python bench/decode.py --model runs/fr_en_cpu --long      # sentences joined in threes: 30+ token outputs
    python bench/decode.py --model runs/fr_en_cpu --quick     # 100 sentences, fewer settings
    python bench/decode.py --model runs/fr_en_cpu --quantize int8

Writes bench/results/decode[-long].json. Needs the corpus (downloaded, or MT_DATA_MIRROR).
"""

import argparse
import json
import resource
import sys
import time
from pathlib import Path

import sacrebleu
import torch

from mt.hardware import describe
from mt.parallel_data import columns, load_pairs
from mt.translator import Translator


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--model", default="runs/fr_en")
    p.add_argument("--test", default="multi30k:test_2016_flickr")
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    p.add_argument("--long", action="store_true", help="join consecutive sentences in threes")
    p.add_argument("--quick", action="store_true")
    p.add_argument("--quantize", choices=["int8"], help="int8 dynamic quantization (CPU)")
    args = p.parse_args()
    translator = Translator.load(args.model, args.device, args.quantize)
    cfg = translator.cfg
    src, ref = columns(load_pairs(args.test, "test", cfg.data.src_lang, cfg.data.tgt_lang), "src", "tgt")
    if args.long:
        src = [" ".join(src[i : i + 3]) for i in range(0, len(src) - 2, 3)]
        ref = [" ".join(ref[i : i + 3]) for i in range(0, len(ref) - 2, 3)]
    settings = [(1, 64, True), (1, 64, False), (5, 64, True), (5, 64, False), (1, 1, True), (1, 16, True), (5, 16, True)]
    if args.quick:
        src, ref = src[:100], ref[:100]
        settings = settings[:4]
    device = describe(torch.device(args.device))
    rows = []
    for beam, batch_size, cache in settings:
        if args.device == "cuda":
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
        start = time.perf_counter()
        hyp = translator.translate(src, beam=beam, batch_size=batch_size, use_cache=cache)
        if args.device == "cuda":
            torch.cuda.synchronize()
        seconds = time.perf_counter() - start
        tokens = sum(len(ids) + 1 for ids in translator.tokenizer.encode_batch(hyp))  # + <END>
        row = {
            "decoding": "greedy" if beam == 1 else f"beam{beam}", "batch_size": batch_size, "kv_cache": cache,
            "sentences": len(src), "seconds": round(seconds, 2), "sentences_per_s": round(len(src) / seconds, 1),
            "tokens_per_s": round(tokens / seconds, 1), "mean_output_tokens": round(tokens / len(src), 1),
            "bleu": round(sacrebleu.corpus_bleu(hyp, [ref]).score, 2),
            "peak_memory_mb": round((torch.cuda.max_memory_allocated() if args.device == "cuda" else
                                     resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024) / 2**20),
        }
        rows.append(row)
        print(f"{row['decoding']:>6}  batch {batch_size:>3}  cache {'yes' if cache else 'no ':3}  "
              f"{row['seconds']:7.1f} s  {row['sentences_per_s']:7.1f} sent/s  {row['tokens_per_s']:8.1f} tok/s  "
              f"BLEU {row['bleu']:5.2f}", file=sys.stderr)
    out = Path("bench/results") / f"decode{'-long' if args.long else ''}{'-' + args.quantize if args.quantize else ''}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"model": args.model, "test": args.test, "device": device, "quantize": args.quantize, "rows": rows}, indent=2))


if __name__ == "__main__":
    main()
