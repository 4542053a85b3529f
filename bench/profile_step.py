"""Where one training step's time goes: the recipe's own model, batches and optimizer, profiled
with torch.profiler, in fp32 and bf16, on the machine at hand.

    python bench/profile_step.py                          # recipes/fr_en.yaml, cpu block; fp32, bf16 where native
    python bench/profile_step.py recipes/fr_en_general.yaml --steps 20 --precision fp32
    python bench/profile_step.py --trace bench/results/trace      # also a Chrome trace per precision

For each precision: seconds per step, target tokens/s, the share of real (non-padding) tokens in the
batches, and the step split into phases (data, forward and loss, backward, gradient clipping,
optimizer) and, inside forward and backward, into kinds of operator (matmuls, attention, loss,
layer norms, embeddings, the rest) by their own time. What no operator accounts for is Python and
dispatch overhead. The process has the trainer's memory settings (freed blocks kept, oneDNN's
caches bounded) and keeps a step's bf16 weight copies over its micro-batches as the trainer does;
the micro-batches run one after another, where the trainer runs them side by side on a multi-core
CPU. Needs the corpora (downloaded, or MT_DATA_MIRROR). Writes bench/results/profile_step.json.
"""

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile, record_function

from mt.config import load_config
from mt.data.vocab import PAD
from mt.hardware import describe, pick_device, uses_bf16
from mt.model import build_model
from mt.runtime import Runtime
from mt.training.distributed import World
from mt.training.optim import make_optimizer
from mt.training.trainer import build_task

PHASES = ["data", "forward+loss", "backward", "clip", "optimizer"]
# Operator kinds, matched against an operator's name and then its callers' (so the elementwise work
# inside attention's or the loss's backward counts there), lower-cased without underscores; the
# first kind that matches wins, anything else is "elementwise and other".
KINDS = [
    ("matmul", ("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "addmmactivation")),
    ("loss", ("logsoftmax", "nllloss", "crossentropy")),
    ("attention", ("scaleddotproduct", "flashattention", "softmax")),
    ("layer norm", ("layernorm",)),
    ("embedding", ("embedding",)),
]


def kind_of(event) -> str:
    """The kind of a profiler event's operator, by its own name first, then its callers'."""
    while event is not None and event.name not in PHASES:
        name = event.name.lower().replace("_", "")
        kind = next((kind for kind, needles in KINDS if any(n in name for n in needles)), None)
        if kind:
            return kind
        event = event.cpu_parent
    return "elementwise and other"


def breakdown(prof, steps: int, wall_s: float) -> dict:
    """Milliseconds per step: each phase (inclusive), each operator kind inside forward and backward
    (self time), and what is left of forward and backward once the operators are counted."""
    averages = prof.key_averages()
    per_step = {e.key: e.cpu_time_total / 1e3 / steps for e in averages}
    phases = {p: round(per_step.get(p, 0.0), 2) for p in PHASES}
    kinds: dict[str, float] = {}
    # Self time of every operator run below the forward and backward phases (not data or optimizer).
    for event in prof.events():
        if event.name in PHASES or not _under(event, ("forward+loss", "backward")):
            continue
        kind = kind_of(event)
        kinds[kind] = kinds.get(kind, 0.0) + event.self_cpu_time_total / 1e3 / steps
    in_ops = sum(kinds.values())
    kinds = {k: round(v, 2) for k, v in sorted(kinds.items(), key=lambda kv: -kv[1])}
    compute = phases["forward+loss"] + phases["backward"]
    return {
        "step_ms": round(wall_s * 1e3 / steps, 1),
        "phases_ms": phases,
        "forward_backward_kinds_ms": kinds,
        "forward_backward_outside_operators_ms": round(max(compute - in_ops, 0.0), 2),
    }


def _under(event, names: tuple[str, ...]) -> bool:
    """Whether a profiler event runs inside one of the named record_function regions."""
    parent = event.cpu_parent
    while parent is not None:
        if parent.name in names:
            return True
        parent = parent.cpu_parent
    return False


def profile_precision(cfg, task, device, precision: str, steps: int, trace: Path | None) -> dict:
    """Warm up, then profile `steps` training steps as the trainer runs them (minus logging)."""
    torch.manual_seed(cfg.seed)
    model = build_model(cfg, task.vocab_size).to(device).train()
    optimizer = make_optimizer(model, cfg.train)
    batches = task.train_batches()
    tc = cfg.train
    runtime = Runtime(device, bf16=uses_bf16(device, precision))
    real = padded = tokens = 0

    def step(count: bool):
        nonlocal real, padded, tokens
        with runtime.weight_casts():  # bf16 weight copies kept over the step, as the trainer keeps them
            for _ in range(tc.grad_accum):  # the step's micro-batches (equal weights here; the same work)
                with record_function("data"):
                    batch = next(batches)
                if count:
                    tokens += batch["n_tokens"]
                    real += int((batch["src"] != PAD).sum()) + batch["n_tokens"]
                    padded += batch["src"].numel() + batch["tgt_out"].numel()
                with record_function("forward+loss"), runtime.autocast():
                    loss = task.loss(model, batch, tc.label_smoothing)
                with record_function("backward"):
                    (loss / tc.grad_accum).backward()
        with record_function("clip"):
            torch.nn.utils.clip_grad_norm_(model.parameters(), tc.grad_clip)
        with record_function("optimizer"):
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)

    try:
        for _ in range(3):  # allocator, thread pools, first-call costs
            step(count=False)
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            start = time.perf_counter()
            for _ in range(steps):
                step(count=True)
            wall = time.perf_counter() - start
    finally:
        batches.close()  # stops the prefetch thread
    if trace is not None:
        trace.mkdir(parents=True, exist_ok=True)
        prof.export_chrome_trace(str(trace / f"step_{precision}.json"))
    result = {"precision": precision, "steps": steps, **breakdown(prof, steps, wall)}
    result["target_tokens_per_s"] = round(tokens / wall)
    result["real_token_share"] = round(real / max(padded, 1), 3)
    return result


def settle_memory(cfg, device, precision: str) -> Runtime:
    """The trainer's process-wide settings (heap, oneDNN caches) for training in `precision`."""
    cfg.train.precision = precision
    return Runtime.for_training(cfg)


def print_table(rows: list[dict]) -> None:
    for r in rows:
        print(
            f"\n{r['precision']}: {r['step_ms']} ms/step, {r['target_tokens_per_s']:,} target tokens/s, "
            f"{r['real_token_share']:.1%} of batch positions are real tokens (profiler on)"
        )
        for name, ms in r["phases_ms"].items():
            print(f"  {name:<28}{ms:>10.1f} ms  {ms / r['step_ms']:>6.1%}")
        print("  forward and backward, by operator kind (self time):")
        for name, ms in r["forward_backward_kinds_ms"].items():
            print(f"    {name:<26}{ms:>10.1f} ms  {ms / r['step_ms']:>6.1%}")
        rest = r["forward_backward_outside_operators_ms"]
        print(f"    {'outside operators':<26}{rest:>10.1f} ms  {rest / r['step_ms']:>6.1%}")


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("recipe", nargs="?", default="recipes/fr_en.yaml")
    p.add_argument("overrides", nargs="*", help="recipe overrides, key=value")
    p.add_argument(
        "--precision",
        nargs="+",
        choices=["fp32", "bf16"],
        help="default: fp32, and bf16 where it runs natively (a GPU, or a CPU with bf16 units: "
        "emulated bf16 took 74 s a step for fr_en on a CPU without them)",
    )
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--trace", type=Path, help="write a Chrome trace per precision into this folder")
    p.add_argument("--out", type=Path, default=Path("bench/results/profile_step.json"))
    args = p.parse_args(argv)
    cfg = load_config(args.recipe, args.overrides)
    device = pick_device(cfg.train.device)
    precisions = args.precision or ["fp32"] + (["bf16"] if uses_bf16(device, "auto") else [])
    runtime = settle_memory(cfg, device, "bf16" if "bf16" in precisions else "fp32")
    print(f"{cfg.name}: {describe(device)}", file=sys.stderr)
    with tempfile.TemporaryDirectory() as run_dir:
        cfg.out_dir = run_dir
        task = build_task(cfg, runtime, World(device=device), resume=False)
        rows = [profile_precision(cfg, task, device, pr, args.steps, args.trace) for pr in precisions]
    print_table(rows)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"recipe": args.recipe, "hardware": describe(device), "rows": rows}, indent=2))
    print(f"\nwrote {args.out}")


if __name__ == "__main__":
    main()
