"""python -m mt.bench [--quick] [--device auto|cpu|cuda] [--precision auto|fp32|bf16] [--compile] [--no-quality]
                     [--out FILE]

Measures training throughput (tokens/s and model FLOPs utilisation) for the character GPT and the
translation Transformer and decoding speed (greedy and beam 5, several batch sizes, with and
without the KV cache, peak memory) on random weights and synthetic batches; then time to quality:
short real training runs whose validation loss (LM) and BLEU (translation) are read against wall
time. Those need the corpora (downloaded, or MT_DATA_MIRROR); without them the section says why
it was skipped. Prints tables and writes JSON.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import resource
import sys
import tempfile
import time
from pathlib import Path

import torch

from mt.config import load_config
from mt.errors import UserError, cli_entry
from mt.hardware import (
    describe,
    memory_efficient_attention_while,
    pick_device,
    require_cpp_compiler,
    uses_bf16,
)
from mt.inference.search import beam_search, greedy_or_sample
from mt.loss import token_loss
from mt.model import Transformer, build_model
from mt.runtime import Runtime
from mt.training.optim import make_optimizer

# Peak dense bf16 tensor-core FLOP/s by device name; MFU is reported only for these.
PEAK_BF16 = {"H100": 989e12, "H200": 989e12, "A100": 312e12}


def peak_flops(device: torch.device) -> float | None:
    if device.type != "cuda":
        return None
    name = torch.cuda.get_device_name(device)
    return next((peak for key, peak in PEAK_BF16.items() if key in name), None)


def matrix_params(model: torch.nn.Module) -> int:
    """Parameters that cost 2 FLOPs per token in a matmul: everything but embedding tables."""
    return sum(p.numel() for n, p in model.named_parameters() if p.dim() >= 2 and "embed" not in n)


# nanoGPT's README CPU configuration, and the 3+3-layer translation model measured on CPU.
CPU_GPT = [
    "model.n_layer=4",
    "model.n_head=4",
    "model.d_model=128",
    "data.block_size=64",
    "train.batch_size=12",
    "model.dropout=0.0",
]
CPU_TRANSFORMER = [
    "model.enc_layers=3",
    "model.dec_layers=3",
    "model.d_model=256",
    "model.n_head=4",
    "model.d_ff=1024",
    "tokenizer.vocab_size=8000",
]


def gpt_setting(on_gpu: bool) -> dict:
    # On a GPU recipes/shakespeare_char.yaml as shipped, on CPU nanoGPT's CPU configuration.
    cfg = load_config("recipes/shakespeare_char.yaml", [] if on_gpu else CPU_GPT)
    model = build_model(cfg, 69)
    b, t = cfg.train.batch_size, cfg.data.block_size
    layers, d = cfg.model.n_layer, cfg.model.d_model
    # PaLM accounting: 6N per token for the matmuls, 12 L T D for attention scores and values.
    flops_per_step = b * t * (6 * matrix_params(model) + 12 * layers * t * d)

    def batch(device):
        x = torch.randint(4, 69, (b, t + 1), device=device)
        return (x[:, :-1],), x[:, 1:]

    return {
        "name": "char GPT",
        "cfg": cfg,
        "model": model,
        "batch": batch,
        "tokens": b * t,
        "flops": flops_per_step,
        "shape": f"{layers} layers, {d} dims, batch {b} x {t}",
    }


def transformer_setting(on_gpu: bool) -> dict:
    if on_gpu:  # Transformer base: 6+6 layers, 512 dims, ~25k-token batches
        sizes, (b, s) = (
            ["model.enc_layers=6", "model.dec_layers=6", "model.d_model=512", "model.n_head=8", "model.d_ff=2048"],
            (800, 32),
        )
    else:  # the 3+3-layer, 256-dim CPU configuration, 4096-token batches
        sizes, (b, s) = CPU_TRANSFORMER, (256, 16)
    cfg = load_config("recipes/fr_en.yaml", sizes + ["model.dropout=0.0", "tokenizer.vocab_size=8000"])
    vocab = cfg.tokenizer.vocab_size
    model = build_model(cfg, vocab)
    m, d = cfg.model, cfg.model.d_model
    head = d * vocab
    enc = matrix_params(model.encoder) + matrix_params(model.ln_enc)
    dec = matrix_params(model) - enc - head
    flops_per_step = b * (
        s * (6 * enc + 12 * m.enc_layers * s * d)  # encoder over the source
        + s * (6 * (dec + head) + 12 * m.dec_layers * (s + s) * d)  # decoder: self- and cross-attention
    )

    def batch(device):
        src = torch.randint(4, vocab, (b, s), device=device)
        tgt = torch.randint(4, vocab, (b, s + 1), device=device)
        return (src, tgt[:, :-1]), tgt[:, 1:]

    return {
        "name": "translation Transformer",
        "cfg": cfg,
        "model": model,
        "batch": batch,
        "tokens": b * s,
        "flops": flops_per_step,
        "shape": f"{m.enc_layers}+{m.dec_layers} layers, {d} dims, vocab {vocab}, batch {b} x {s}",
    }


def measure_training(
    setting: dict, device: torch.device, precision: str, steps: int, compiled: bool = False, warmup: int = 3
) -> dict:
    model = setting["model"].to(device).train()
    optimizer = make_optimizer(model, setting["cfg"].train)
    inputs, targets = setting["batch"](device)
    forward = torch.compile(model) if compiled else model  # one shape: compiles once, in the warm-up
    translation = isinstance(model, Transformer)

    def step():
        with Runtime(device, bf16=uses_bf16(device, precision)).autocast():
            if translation:  # the loss as training takes it (mt.loss.head_loss)
                loss = forward(*inputs, targets=targets)
            else:
                loss = token_loss(forward(*inputs), targets)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    # each model timed with the attention kernels its training uses
    with memory_efficient_attention_while(device) if translation else contextlib.nullcontext():
        for _ in range(warmup):  # the allocator's and the kernels' first calls (--quick: one, a smoke test)
            step()
        sync(device)
        start = time.perf_counter()
        for _ in range(steps):
            step()
        sync(device)
    seconds = (time.perf_counter() - start) / steps
    peak = peak_flops(device)
    return {
        "model": setting["name"],
        "shape": setting["shape"] + (", compiled" if compiled else ""),
        "params_M": round(sum(p.numel() for p in model.parameters()) / 1e6, 2),
        "step_ms": round(seconds * 1e3, 1),
        "tokens_per_s": round(setting["tokens"] / seconds),
        "tflops": round(setting["flops"] / seconds / 1e12, 3),
        "mfu": round(setting["flops"] / seconds / peak, 3) if peak else None,
    }


def measure_decoding(
    setting: dict, device: torch.device, precision: str, sentences: int, batch_sizes: list[int], src_len: int
) -> list[dict]:
    """Decode `sentences` synthetic sources in batches of each size; outputs are identical with
    and without the cache, so the two rows of a pair time the same work."""
    model = setting["model"].to(device).eval()
    src = torch.randint(4, setting["cfg"].tokenizer.vocab_size, (sentences, src_len), device=device)
    src[:, -1] = 3  # <END>
    rows = []
    for name, run in [
        ("greedy", lambda x, cache: greedy_or_sample(model, x, use_cache=cache)),
        ("beam5", lambda x, cache: beam_search(model, x, 5, 1.0, use_cache=cache)),
    ]:
        for batch in batch_sizes:
            for cache in (True, False):
                with Runtime(device, bf16=uses_bf16(device, precision)).autocast():
                    run(src[:1], cache)  # warm-up: kernels, allocator
                    sync(device)
                    if device.type == "cuda":
                        torch.cuda.reset_peak_memory_stats(device)
                    start = time.perf_counter()
                    outputs = [o for i in range(0, sentences, batch) for o in run(src[i : i + batch], cache)[0]]
                    sync(device)
                seconds = time.perf_counter() - start
                tokens = sum(len(o) + 1 for o in outputs)
                peak = torch.cuda.max_memory_allocated(device) / 2**20 if device.type == "cuda" else None
                rows.append(
                    {
                        "decoding": name,
                        "batch": batch,
                        "kv_cache": cache,
                        "sentences": sentences,
                        "seconds": round(seconds, 3),
                        "sentences_per_s": round(sentences / seconds, 1),
                        "tokens_per_s": round(tokens / seconds),
                        "mean_output_tokens": round(tokens / sentences, 1),
                        "peak_memory_mb": round(peak) if peak is not None else None,
                    }
                )
    return rows


def quality_runs(on_gpu: bool, quick: bool, precision: str) -> list[tuple[str, str, list[str], str]]:
    """(name, recipe, overrides, metric) of the time-to-quality runs."""
    if quick:  # a smoke test of the machinery: tiny models, seconds of training
        lm = CPU_GPT + ["model.n_layer=2", "train.max_steps=100", "train.eval_every=50", "train.eval_batches=5"]
        mt = [
            "model.enc_layers=1",
            "model.dec_layers=1",
            "model.d_model=64",
            "model.d_ff=128",
            "model.n_head=4",
            "tokenizer.vocab_size=1000",
            "data.train=[multi30k:test_2017_flickr]",  # 1,000 pairs: the machinery, not the quality
            "data.held_out=false",  # it trains on a test set: nothing to hold out of a smoke test
            "train.max_steps=20",
            "train.eval_every=10",
            "train.warmup_steps=5",
        ]
    elif on_gpu:  # the shipped recipes against their targets: 60 s for the LM, 5 minutes for fr_en
        lm, mt = ["train.max_minutes=1", "train.eval_every=250"], ["train.max_minutes=5", "train.eval_every=500"]
    else:  # nanoGPT's CPU configuration for 2000 steps; the 3+3-layer translation model for 60 steps
        lm = CPU_GPT + ["train.max_steps=2000", "train.eval_every=250", "train.eval_batches=20"]
        mt = CPU_TRANSFORMER + ["train.max_steps=60", "train.eval_every=20", "train.warmup_steps=20", "train.lr=1.5e-3"]
    if quick or not on_gpu:  # a step count alone: a budget would add the evaluation that times its plan
        lm, mt = lm + ["train.max_minutes=null"], mt + ["train.max_minutes=null"]
    if not on_gpu:
        lm, mt = lm + ["train.device=cpu"], mt + ["model.dropout=0.0", "train.device=cpu"]
        mt = mt if quick else mt + ["data.train=[multi30k]"]
    # The curve is all these runs give; the end-of-training report would decode the test sets.
    lm, mt = (runs + [f"train.precision={precision}", "train.report=false"] for runs in (lm, mt))
    return [
        ("char GPT", "recipes/shakespeare_char.yaml", lm, "val_loss"),
        ("translation Transformer", "recipes/fr_en.yaml", mt, "val_bleu"),
    ]


def measure_quality(name: str, recipe: str, overrides: list[str], metric: str) -> dict:
    """Train briefly and return the validation metric against wall time (evaluations included)."""
    from mt.training.trainer import train  # imports the data stack only when this section runs

    with tempfile.TemporaryDirectory() as tmp:
        try:
            train(load_config(recipe, overrides + [f"out_dir={tmp}/run"]))
        except UserError as e:
            return {"model": name, "metric": metric, "skipped": str(e)}
        rows = [json.loads(line) for line in Path(tmp, "run", "metrics.jsonl").read_text().splitlines()]
    return {
        "model": name,
        "metric": metric,
        "recipe": recipe,
        "overrides": overrides,
        "curve": [{"elapsed_s": r["elapsed_s"], "step": r["step"], metric: r[metric]} for r in rows],
    }


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def parse_args(argv):
    p = argparse.ArgumentParser(prog="python -m mt.bench", description=__doc__.split("\n\n")[1])
    p.add_argument("--quick", action="store_true", help="fewer steps and sentences, seconds-long quality runs (for CI)")
    p.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    p.add_argument(
        "--precision",
        default="auto",
        choices=["auto", "fp32", "bf16"],
        help="auto: bf16 autocast on CUDA and on CPUs with bf16 units (AMX or AVX-512 BF16), else fp32",
    )
    p.add_argument("--compile", action="store_true", help="also time the training steps through torch.compile")
    p.add_argument("--no-quality", action="store_true", help="skip the time-to-quality training runs")
    p.add_argument("--out", default="bench/results/bench.json")
    return p.parse_args(argv)


def print_tables(result: dict, decode_shape: str) -> None:
    """The three tables: training speed, decoding speed, time to quality."""
    print(f"\nmt.bench on {result['hardware']}, torch {result['torch']}, {result['precision']}\n")
    print(f"{'training (random weights)':<26}{'shape':<62}{'step ms':>9}{'tokens/s':>11}{'TFLOP/s':>9}{'MFU':>7}")
    for r in result["training"]:
        mfu = f"{r['mfu']:.1%}" if r["mfu"] is not None else "n/a"
        print(f"{r['model']:<26}{r['shape']:<62}{r['step_ms']:>9}{r['tokens_per_s']:>11,}{r['tflops']:>9}{mfu:>7}")
    print(f"\n{'decoding (' + decode_shape + ')':<60}{'sent/s':>9}{'tokens/s':>10}{'out len':>9}{'peak MB':>9}")
    for r in result["decoding"]:
        label = f"{r['decoding']}, batch {r['batch']}, {'with' if r['kv_cache'] else 'without'} KV cache"
        peak = r["peak_memory_mb"] if r["peak_memory_mb"] is not None else "n/a"
        print(f"{label:<60}{r['sentences_per_s']:>9}{r['tokens_per_s']:>10,}{r['mean_output_tokens']:>9}{peak:>9}")
    if result["quality"]:
        print("\ntime to quality (wall time with evaluations; validation set)")
    for r in result["quality"]:
        if "skipped" in r:
            print(f"{r['model']:<26}skipped: {r['skipped']}")
            continue
        digits = 3 if r["metric"] == "val_loss" else 2
        points = "  ".join(f"{c['elapsed_s']:.0f}s {c[r['metric']]:.{digits}f}" for c in r["curve"])
        print(f"{r['model']:<26}{r['metric']:<10}{points}")
    print(f"\npeak resident memory of this process: {result['peak_rss_mb']:,} MB")


@cli_entry
def main(argv=None):
    args = parse_args(argv)
    device = pick_device(args.device)
    if args.compile:
        require_cpp_compiler(device, "--compile")
    on_gpu = device.type == "cuda"
    torch.manual_seed(0)
    steps, warmup = (2, 1) if args.quick else (20, 3)
    settings = (gpt_setting, transformer_setting)
    training = [measure_training(s(on_gpu), device, args.precision, steps, warmup=warmup) for s in settings]
    if args.compile:
        training += [measure_training(s(on_gpu), device, args.precision, steps, True, warmup) for s in settings]
    decode_setting = transformer_setting(False)  # the CPU-sized model decodes everywhere
    sentences, batch_sizes = (4, [1, 4]) if args.quick else (64, [1, 8, 64])
    decoding = measure_decoding(decode_setting, device, args.precision, sentences, batch_sizes, src_len=16)
    quality = (
        [] if args.no_quality else [measure_quality(*run) for run in quality_runs(on_gpu, args.quick, args.precision)]
    )
    cpu_peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: kB
    result = {
        "hardware": describe(device),
        "torch": torch.__version__,
        "precision": "bf16 autocast" if uses_bf16(device, args.precision) else "fp32",
        "quick": args.quick,
        "training": training,
        "decoding": decoding,
        "quality": quality,
        "peak_rss_mb": round(cpu_peak),
    }
    print_tables(result, decode_setting["shape"].split(", batch")[0])
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2))
    print(f"written to {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
