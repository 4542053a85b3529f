"""Benchmark the character-level GPT: training tokens/s and the validation loss a run reaches.

    python bench/lm.py                  # nanoGPT's README CPU configuration, 2000 steps
    python bench/lm.py --recipe-size    # recipes/shakespeare_char.yaml as shipped (meant for a GPU)
    python bench/lm.py --quick          # 200 steps, for a smoke test

Prints one line per setting and writes bench/results/lm.json. Needs the tinyshakespeare corpus
(downloaded, or MT_DATA_MIRROR). tokens/s counts training steps only, not evaluation.
"""

import argparse
import json
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

from mt.config import load_config
from mt.train import train

# nanoGPT README, "I only have a macbook": 4 layers, 4 heads, 128 dims, block 64, batch 12, no dropout.
CPU_CONFIG = [
    "model.n_layer=4", "model.n_head=4", "model.d_model=128", "data.block_size=64", "train.batch_size=12",
    "model.dropout=0.0", "train.max_steps=2000", "train.eval_every=250", "train.eval_batches=20",
    "train.device=cpu",
]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--recipe-size", action="store_true", help="run the shipped recipe unchanged")
    p.add_argument("--quick", action="store_true", help="200 steps")
    p.add_argument("--out", default="bench/results/lm.json")
    args = p.parse_args()
    overrides = [] if args.recipe_size else list(CPU_CONFIG)
    if args.quick:
        overrides += ["train.max_steps=200", "train.eval_every=100"]
    with tempfile.TemporaryDirectory() as tmp:
        cfg = load_config("recipes/shakespeare_char.yaml", overrides + [f"out_dir={tmp}/run"])
        t0 = time.monotonic()
        train(cfg)
        wall = time.monotonic() - t0
        rows = [json.loads(line) for line in Path(tmp, "run", "metrics.jsonl").read_text().splitlines()]
    device = "cuda: " + torch.cuda.get_device_name() if torch.cuda.is_available() and cfg.train.device != "cpu" else \
        f"cpu: {platform.processor() or platform.machine()}, {torch.get_num_threads()} threads"
    result = {
        "config": overrides or "recipes/shakespeare_char.yaml",
        "device": device,
        "torch": torch.__version__,
        "steps": rows[-1]["step"],
        "tokens_per_s_median": statistics.median(r["tokens_per_s"] for r in rows),
        "final_val_loss": rows[-1]["val_loss"],
        "best_val_loss": min(r["val_loss"] for r in rows),
        "train_time_s": rows[-1]["elapsed_s"],
        "wall_s_including_setup": round(wall, 1),
        "curve": [{k: r[k] for k in ("step", "val_loss", "elapsed_s")} for r in rows],
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2))
    print(
        f"{result['steps']} steps on {device}: {result['tokens_per_s_median']:,.0f} tokens/s (median over evaluation "
        f"intervals), val loss {result['final_val_loss']:.4f} (best {result['best_val_loss']:.4f}), "
        f"{result['train_time_s']:.0f} s training, {wall:.0f} s wall",
        file=sys.stderr,
    )


if __name__ == "__main__":
    main()
