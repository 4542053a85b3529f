"""python -m mt.bench [--quick] [--device auto|cpu|cuda] [--out FILE]

Measures training throughput (tokens/s and model FLOPs utilisation) for the character GPT and the
translation Transformer, and decoding speed (greedy and beam 5, with and without the KV cache), on
random weights and synthetic batches: no corpus and no trained model needed. Quality against time
comes from real runs (bench/lm.py, bench/decode.py, `mt.evaluate`). Prints a table and writes JSON.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path

import torch

from mt.config import load_config
from mt.decode import beam_search, greedy_or_sample
from mt.hardware import autocast, pick_device
from mt.model import build_model, token_loss
from mt.optim import make_optimizer

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


def gpt_setting(on_gpu: bool) -> dict:
    if on_gpu:  # recipes/shakespeare_char.yaml as shipped
        overrides = []
    else:  # nanoGPT's README CPU configuration
        overrides = ["model.n_layer=4", "model.n_head=4", "model.d_model=128", "data.block_size=64", "train.batch_size=12", "model.dropout=0.0"]
    cfg = load_config("recipes/shakespeare_char.yaml", overrides)
    model = build_model(cfg, 69)
    b, t = cfg.train.batch_size, cfg.data.block_size
    layers, d = cfg.model.n_layer, cfg.model.d_model
    # PaLM accounting: 6N per token for the matmuls, 12 L T D for attention scores and values.
    flops_per_step = b * t * (6 * matrix_params(model) + 12 * layers * t * d)

    def batch(device):
        x = torch.randint(4, 69, (b, t + 1), device=device)
        return (x[:, :-1],), x[:, 1:]

    return {"name": "char GPT", "cfg": cfg, "model": model, "batch": batch, "tokens": b * t, "flops": flops_per_step,
            "shape": f"{layers} layers, {d} dims, batch {b} x {t}"}


def transformer_setting(on_gpu: bool) -> dict:
    if on_gpu:  # Transformer base: 6+6 layers, 512 dims, ~25k-token batches
        sizes, (b, s) = ["model.enc_layers=6", "model.dec_layers=6", "model.d_model=512", "model.n_head=8", "model.d_ff=2048"], (800, 32)
    else:  # the 3+3-layer, 256-dim CPU configuration, 4096-token batches
        sizes, (b, s) = ["model.enc_layers=3", "model.dec_layers=3", "model.d_model=256", "model.n_head=4", "model.d_ff=1024"], (256, 16)
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

    return {"name": "translation Transformer", "cfg": cfg, "model": model, "batch": batch, "tokens": b * s,
            "flops": flops_per_step, "shape": f"{m.enc_layers}+{m.dec_layers} layers, {d} dims, vocab {vocab}, batch {b} x {s}"}


def measure_training(setting: dict, device: torch.device, steps: int) -> dict:
    model = setting["model"].to(device).train()
    optimizer = make_optimizer(model, setting["cfg"].train, device)
    inputs, targets = setting["batch"](device)

    def step():
        with autocast(device):
            loss = token_loss(model(*inputs), targets)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    for _ in range(3):  # warm-up: allocator, kernels
        step()
    sync(device)
    start = time.perf_counter()
    for _ in range(steps):
        step()
    sync(device)
    seconds = (time.perf_counter() - start) / steps
    peak = peak_flops(device)
    return {
        "model": setting["name"], "shape": setting["shape"], "params_M": round(sum(p.numel() for p in model.parameters()) / 1e6, 2),
        "step_ms": round(seconds * 1e3, 1), "tokens_per_s": round(setting["tokens"] / seconds),
        "tflops": round(setting["flops"] / seconds / 1e12, 3),
        "mfu": round(setting["flops"] / seconds / peak, 3) if peak else None,
    }


def measure_decoding(setting: dict, device: torch.device, sentences: int, src_len: int) -> list[dict]:
    model = setting["model"].to(device).eval()
    src = torch.randint(4, setting["cfg"].tokenizer.vocab_size, (sentences, src_len), device=device)
    src[:, -1] = 3  # <END>
    rows = []
    for name, run in [
        ("greedy", lambda cache: greedy_or_sample(model, src, use_cache=cache)),
        ("beam5", lambda cache: beam_search(model, src, 5, 1.0, use_cache=cache)),
    ]:
        for cache in (True, False):
            with autocast(device):
                run(cache)  # warm-up
                sync(device)
                start = time.perf_counter()
                outputs, _ = run(cache)
                sync(device)
            seconds = time.perf_counter() - start
            tokens = sum(len(o) + 1 for o in outputs)
            rows.append({"decoding": name, "kv_cache": cache, "sentences": sentences, "seconds": round(seconds, 3),
                         "sentences_per_s": round(sentences / seconds, 1), "tokens_per_s": round(tokens / seconds),
                         "mean_output_tokens": round(tokens / sentences, 1)})
    return rows


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m mt.bench", description=__doc__.split("\n\n")[1])
    p.add_argument("--quick", action="store_true", help="fewer steps and sentences (for CI)")
    p.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    p.add_argument("--out", default="bench/results/bench.json")
    args = p.parse_args(argv)
    device = pick_device(args.device)
    on_gpu = device.type == "cuda"
    torch.manual_seed(0)
    hardware = torch.cuda.get_device_name(device) if on_gpu else f"CPU {platform.machine()}, {torch.get_num_threads()} threads"
    precision = "bf16 autocast" if on_gpu else "fp32"
    steps = 3 if args.quick else 20
    training = [measure_training(s(on_gpu), device, steps) for s in (gpt_setting, transformer_setting)]
    decode_setting = transformer_setting(False)  # the CPU-sized model decodes everywhere
    decoding = measure_decoding(decode_setting, device, sentences=16 if args.quick else 64, src_len=16)
    print(f"mt.bench on {hardware}, torch {torch.__version__}, {precision}; random weights, synthetic batches\n")
    print(f"{'training':<26}{'shape':<52}{'step ms':>9}{'tokens/s':>11}{'TFLOP/s':>9}{'MFU':>7}")
    for r in training:
        mfu = f"{r['mfu']:.1%}" if r["mfu"] is not None else "n/a"
        print(f"{r['model']:<26}{r['shape']:<52}{r['step_ms']:>9}{r['tokens_per_s']:>11,}{r['tflops']:>9}{mfu:>7}")
    print(f"\n{'decoding (' + decode_setting['shape'].split(', batch')[0] + ')':<60}{'sent/s':>9}{'tokens/s':>10}{'out len':>9}")
    for r in decoding:
        label = f"{r['decoding']}, {r['sentences']} sentences, {'with' if r['kv_cache'] else 'without'} KV cache"
        print(f"{label:<60}{r['sentences_per_s']:>9}{r['tokens_per_s']:>10,}{r['mean_output_tokens']:>9}")
    result = {"hardware": hardware, "torch": torch.__version__, "precision": precision, "quick": args.quick,
              "training": training, "decoding": decoding}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2))
    print(f"\nwritten to {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
