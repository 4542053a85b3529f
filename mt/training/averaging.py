"""Checkpoint averaging: the element-wise mean of several checkpoints' weights, usually the last few
of one run. Averaged weights sit nearer the middle of the region the optimizer was wandering in.
Training keeps its last `train.average_last` evaluation snapshots in RUN_DIR/snapshots/ for this,
and `average_into_best` averages them when it stops."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from mt.checkpoint import BEST, load_checkpoint, save_checkpoint
from mt.config import Config
from mt.errors import UserError

SNAPSHOTS = "snapshots"


def snapshot_path(run_dir: Path, step: int) -> Path:
    """Where the weights at `step` are kept for averaging (the folder is made on first use)."""
    folder = Path(run_dir) / SNAPSHOTS
    folder.mkdir(exist_ok=True)
    return folder / f"step-{step:08d}.pt"


def snapshots(run_dir: Path) -> list[Path]:
    """The run's weight snapshots, oldest first."""
    return sorted((Path(run_dir) / SNAPSHOTS).glob("step-*.pt"))


def keep_last_snapshots(run_dir: Path, keep: int) -> None:
    for old in snapshots(run_dir)[:-keep] if keep > 0 else snapshots(run_dir):
        old.unlink(missing_ok=True)


def average_state_dicts(states: list[dict]) -> dict:
    """The mean of each floating-point tensor over `states` (accumulated in float64, returned in
    the original dtype); integer buffers are taken from the last state."""
    if not states:
        raise UserError("nothing to average: no checkpoints given")
    keys = states[0].keys()
    for i, state in enumerate(states[1:], 1):
        if state.keys() != keys or any(state[k].shape != states[0][k].shape for k in keys):
            raise UserError(f"checkpoint {i + 1} has other weights than checkpoint 1: are they from the same model?")
    averaged = {}
    for key in keys:
        if states[0][key].is_floating_point():
            total = sum(s[key].double() for s in states)
            averaged[key] = (total / len(states)).to(states[0][key].dtype)
        else:
            averaged[key] = states[-1][key].clone()
    return averaged


def average_checkpoints(paths: list[Path]) -> dict:
    """A checkpoint (weights, config, step) whose weights are the mean of `paths`' weights."""
    loaded = [load_checkpoint(p) for p in paths]
    for p, ckpt in zip(paths, loaded):
        if "model" not in ckpt or "config" not in ckpt:
            raise UserError(f"{p} is not a checkpoint written by mt.train (no model weights or config)")
    models = {repr(c["config"]["model"]) for c in loaded}
    if len(models) > 1:
        raise UserError("the checkpoints come from differently shaped models; average checkpoints of one run")
    return {
        "model": average_state_dicts([c["model"] for c in loaded]),
        "config": loaded[-1]["config"],
        "step": loaded[-1].get("step"),
        "averaged_from": [int(c.get("step") or 0) for c in loaded],
    }


def average_into_best(model, task, precision, cfg: Config, state, metrics_path: Path) -> None:
    """Average the run's last `train.average_last` snapshots, validate the average, and make it
    `best` when it scores better (`state`, the RunState, records it)."""
    paths = snapshots(cfg.run_dir)[-cfg.train.average_last :]
    if len(paths) < 2:
        return
    averaged = average_checkpoints(paths)
    model.load_state_dict(averaged["model"])
    model.eval()
    metrics = task.evaluate(model, precision)
    score = metrics[task.best_metric]
    wins = state.record(score, task.higher_is_better)
    row = {"step": averaged["step"], "averaged_from": averaged["averaged_from"], **metrics, "best": wins}
    with open(metrics_path, "a") as f:
        f.write(json.dumps(row) + "\n")
    steps = ", ".join(map(str, averaged["averaged_from"]))
    shown = "  ".join(f"{k} {v:.4f}" for k, v in metrics.items())
    print(
        f"average of steps {steps}: {shown}  ({'best: saved as best.pt' if wins else 'not better than best.pt'})",
        file=sys.stderr,
    )
    if wins:
        save_checkpoint(cfg.run_dir / BEST, {**averaged, **metrics})
