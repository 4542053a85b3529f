"""Training tokens/s of the plain command at several revisions, back to back on this machine: each
revision's own code and recipe (its `cpu:` block on a CPU), run as `python -m mt.train RECIPE` for
a fixed number of steps, the revisions alternated round after round.

    python bench/train_speed.py --rev 486655e --rev .              # an old commit against the working tree
    python bench/train_speed.py --rev HEAD --rev . --rounds 3 train.precision=fp32
    python bench/train_speed.py --rev "ONEDNN_PRIMITIVE_CACHE_CAPACITY=64 ." --rev .   # settings, as a shell sets them

For each run: the median of the progress bar's tokens/s readings (one every train.log_every steps)
from step --skip on, so the first steps' kernel and allocator warm-up count in neither, and the
peak resident memory of the training process. Then per revision the median over rounds and its
ratio to the first revision. A revision other than "." (the working tree) is checked out into a
temporary git worktree. NAME=VALUE words before a revision set environment variables for its runs,
so one tree can be compared with itself under other settings. Needs the corpora (downloaded, or
MT_DATA_MIRROR). Writes bench/results/train_speed.json.
"""

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from mt.hardware import describe, pick_device

REPO = Path(__file__).resolve().parent.parent
READING = re.compile(r"\s(\d+)/\d+ \[.*?tok_s=([\d,]+)")  # a tqdm line: "  70/70 [..., tok_s=1,805]"


def readings(progress: str, skip: int) -> list[float]:
    """Tokens/s readings of a progress bar's output, at steps >= skip."""
    found = (READING.search(line) for line in re.split(r"[\r\n]", progress))
    return [float(m[2].replace(",", "")) for m in found if m and int(m[1]) >= skip]


def split_spec(spec: str) -> tuple[str, dict[str, str]]:
    """'REV' or 'NAME=VALUE ... REV': the revision, and the environment settings for its runs."""
    words = spec.split()
    if not words or "=" in words[-1] or not all("=" in word for word in words[:-1]):
        sys.exit(f"--rev {spec!r}: expected NAME=VALUE words before one revision")
    return words[-1], dict(word.split("=", 1) for word in words[:-1])


def run_once(tree: Path, args, out_dir: Path, settings: dict[str, str] | None = None) -> dict:
    """One training run of the tree's own code; its tokens/s and peak RSS (MB)."""
    command = [sys.executable, "-m", "mt.train", args.recipe, f"train.max_steps={args.steps}"]
    command += ["train.eval_every=1000000", "train.report=false", f"out_dir={out_dir}", *args.overrides]
    env = {**os.environ, **(settings or {}), "PYTHONPATH": str(tree)}  # the tree's mt, not the installed one
    with tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen(command, cwd=tree, env=env, stdout=subprocess.DEVNULL, stderr=err)
        _, status, usage = os.wait4(proc.pid, 0)  # reaps the child with its own rusage (peak RSS)
        proc.returncode = os.waitstatus_to_exitcode(status)  # so Popen knows it was reaped
        err.seek(0)
        progress = err.read()
    if proc.returncode != 0:
        sys.exit(f"{tree}: training failed (exit {proc.returncode}):\n{progress[-2000:]}")
    found = readings(progress, args.skip)
    if not found:
        sys.exit(f"{tree}: no tokens/s reading at or after step {args.skip}; raise --steps")
    return {"tokens_per_s": statistics.median(found), "peak_rss_mb": round(usage.ru_maxrss / 1024)}


def checkout(rev: str, tmp: Path) -> Path:
    if rev == ".":
        return REPO
    tree = tmp / f"tree-{rev.replace('/', '_')}"
    subprocess.run(["git", "-C", str(REPO), "worktree", "add", "-q", "--detach", str(tree), rev], check=True)
    return tree


def summarise(runs: dict[str, list[dict]], revs: list[str]) -> list[dict]:
    """Per revision the median tokens/s over rounds and its ratio to the first; printed too."""
    base = statistics.median(r["tokens_per_s"] for r in runs[revs[0]])
    summary = []
    for rev in revs:
        speed = statistics.median(r["tokens_per_s"] for r in runs[rev])
        peak = max(r["peak_rss_mb"] for r in runs[rev])
        summary.append({"rev": rev, "tokens_per_s": speed, "ratio": round(speed / base, 3), "runs": runs[rev]})
        print(f"{rev:>12}: {speed:>8,.0f} target tokens/s  {speed / base:.2f}x  peak RSS {peak:,} MB")
    return summary


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("overrides", nargs="*", help="recipe overrides for every run, key=value")
    p.add_argument(
        "--rev",
        action="append",
        help="a git revision, or . for the working tree, optionally after NAME=VALUE settings (repeatable)",
    )
    p.add_argument("--recipe", default="recipes/fr_en.yaml")
    p.add_argument("--steps", type=int, default=70)
    p.add_argument("--skip", type=int, default=20, help="ignore readings before this step")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--out", type=Path, default=REPO / "bench/results/train_speed.json")
    args = p.parse_args(argv)
    revs = args.rev or ["."]
    hardware = describe(pick_device("cpu"))
    print(f"{args.recipe}, {args.steps} steps a run: {hardware}", file=sys.stderr)
    runs = {rev: [] for rev in revs}
    specs = {spec: split_spec(spec) for spec in revs}
    with tempfile.TemporaryDirectory() as tmp:
        trees = {rev: checkout(rev, Path(tmp)) for rev in {rev for rev, _ in specs.values()}}
        try:
            for round_ in range(args.rounds):
                for i, spec in enumerate(revs):
                    rev, settings = specs[spec]
                    runs[spec].append(run_once(trees[rev], args, Path(tmp) / f"run-{i}-{round_}", settings))
                    print(f"round {round_ + 1}, {spec}: {runs[spec][-1]}", file=sys.stderr)
        finally:
            for tree in trees.values():
                if tree != REPO:
                    subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", str(tree)], check=False)
    summary = summarise(runs, revs)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    record = {"recipe": args.recipe, "hardware": hardware, "steps": args.steps, "overrides": args.overrides}
    args.out.write_text(json.dumps({**record, "revisions": summary}, indent=2))


if __name__ == "__main__":
    main()
