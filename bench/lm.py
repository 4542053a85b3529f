"""Benchmark the character-level GPT: training tokens/s and the validation loss a run reaches.

    python bench/lm.py                  # nanoGPT's README CPU configuration, 2000 steps
    python bench/lm.py --recipe-size    # recipes/shakespeare_char.yaml as shipped (meant for a GPU)
    python bench/lm.py --quick          # 200 steps, for a smoke test
    python bench/lm.py --precision bf16 # bf16 autocast (pays on CPUs with AMX)
    python bench/lm.py --recipe-size train.compile=true   # any further section.key=value overrides

Prints one line per setting and writes bench/results/lm.json. Needs the tinyshakespeare corpus
(downloaded, or MT_DATA_MIRROR). Throughput is given two ways: tokens over the wall time between
evaluations (progress-bar updates included), and from the median step, as nanoGPT reports it
(on a GPU the step times are only those the host sees).
"""

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

from mt.bench import CPU_GPT
from mt.config import load_config
from mt.cpu import allocator
from mt.data.plain_text import read_corpus_text, split_text
from mt.hardware import describe, pick_device
from mt.inference.loading import load_run
from mt.loss import token_loss
from mt.training.lm_task import LanguageModelTask
from mt.training.trainer import train

# nanoGPT README, "I only have a macbook": 4 layers, 4 heads, 128 dims, block 64, batch 12, no dropout.
CPU_CONFIG = [
    *CPU_GPT,
    "train.max_steps=2000",
    "train.eval_every=250",
    "train.eval_batches=20",
    "train.device=cpu",
    "train.max_minutes=null",  # steps alone, as nanoGPT runs: no evaluation to time a budget's plan
]


class StepClock:
    """Times each training step as the gap between two batch requests (the loop asks for one
    batch a step); gaps that hold an evaluation are left out."""

    def __init__(self, eval_every: int):
        self.eval_every, self.stamps = eval_every, []
        self.plain = LanguageModelTask.train_batches

    def __enter__(self):
        clock = self

        def timed(task):
            for batch in clock.plain(task):
                clock.stamps.append(time.perf_counter())
                yield batch

        LanguageModelTask.train_batches = timed
        return self

    def __exit__(self, *exc):
        LanguageModelTask.train_batches = self.plain

    def median_step_s(self) -> float:
        gaps = [b - a for i, (a, b) in enumerate(zip(self.stamps, self.stamps[1:])) if (i + 1) % self.eval_every]
        return statistics.median(gaps)


@torch.no_grad()
def full_validation_loss(run_dir: Path) -> float:
    """The best checkpoint's loss over the whole validation text in consecutive blocks: unlike
    the 20-batch estimate the run logs, it does not depend on which blocks were drawn."""
    cfg, tokenizer, model = load_run(run_dir)
    _, val = split_text(torch.tensor(tokenizer.encode(read_corpus_text(cfg.data.corpus))))
    t = cfg.data.block_size
    n = (len(val) - 1) // t
    x, y = val[: n * t].view(n, t), val[1 : n * t + 1].view(n, t)
    total = sum(token_loss(model(xb), yb).item() * len(xb) for xb, yb in zip(x.split(256), y.split(256)))
    return total / n


def main():
    allocator.restart_script_on_tcmalloc()  # mt's commands train on tcmalloc where it is installed
    p = argparse.ArgumentParser()
    p.add_argument("--recipe-size", action="store_true", help="run the shipped recipe unchanged")
    p.add_argument("--quick", action="store_true", help="200 steps")
    p.add_argument("--precision", default="auto", choices=["auto", "fp32", "bf16"])
    p.add_argument("--seed", type=int, default=1337)
    p.add_argument("--out", default="bench/results/lm.json")
    p.add_argument("overrides", nargs="*", help="more section.key=value overrides, e.g. train.compile=true")
    args = p.parse_args()
    overrides = ([] if args.recipe_size else list(CPU_CONFIG)) + [
        f"train.precision={args.precision}",
        f"seed={args.seed}",
    ]
    if args.quick:
        overrides += ["train.max_steps=200", "train.eval_every=100"]
    overrides += args.overrides
    with tempfile.TemporaryDirectory() as tmp:
        cfg = load_config("recipes/shakespeare_char.yaml", overrides + [f"out_dir={tmp}/run"])
        t0 = time.monotonic()
        with StepClock(cfg.train.eval_every) as clock:
            train(cfg)
        wall = time.monotonic() - t0
        rows = [json.loads(line) for line in Path(tmp, "run", "metrics.jsonl").read_text().splitlines()]
        full_val = full_validation_loss(Path(tmp, "run"))
    device = describe(pick_device(cfg.train.device))
    result = {
        "config": ["recipes/shakespeare_char.yaml"] + overrides,
        "device": device,
        "precision": cfg.train.precision,
        "torch": torch.__version__,
        "steps": rows[-1]["step"],
        "tokens_per_s_median": statistics.median(r["tokens_per_s"] for r in rows),
        "median_step_ms": round(clock.median_step_s() * 1e3, 2),
        "tokens_per_s_median_step": round(cfg.train.batch_size * cfg.data.block_size / clock.median_step_s()),
        "final_val_loss": rows[-1]["val_loss"],
        "best_val_loss": min(r["val_loss"] for r in rows),
        "full_val_loss": round(full_val, 4),
        "train_time_s": rows[-1]["elapsed_s"],
        "wall_s_including_setup": round(wall, 1),
        "curve": [{k: r[k] for k in ("step", "val_loss", "elapsed_s")} for r in rows],
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2))
    print(
        f"{result['steps']} steps on {device}, {cfg.train.precision}: {result['tokens_per_s_median']:,.0f} tokens/s "
        f"(median over evaluation intervals), median step {result['median_step_ms']} ms = "
        f"{result['tokens_per_s_median_step']:,} tokens/s, val loss {result['final_val_loss']:.4f} "
        f"(best {result['best_val_loss']:.4f}; "
        f"whole validation text {full_val:.4f}), "
        f"{result['train_time_s']:.0f} s training, {wall:.0f} s wall",
        file=sys.stderr,
    )


if __name__ == "__main__":
    main()
