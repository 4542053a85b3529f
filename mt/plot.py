"""python -m mt.plot RUN_DIR [--out FILE]

Draws a run's learning curves from RUN_DIR/metrics.jsonl into RUN_DIR/curves.png: training and
validation loss against steps, and validation BLEU beside them for translation runs, with the
best evaluation marked. Needs matplotlib (the plot extra).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from mt.errors import UserError, cli_entry, require_extra
from mt.files import output_file


def read_metrics(run_dir: Path) -> list[dict]:
    """The evaluation rows of metrics.jsonl, in order (the final row of an average is left out)."""
    path = run_dir / "metrics.jsonl"
    if not path.is_file():
        raise UserError(f"{run_dir} has no metrics.jsonl; is it a run directory made by mt.train?")
    rows = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            raise UserError(f"{path}:{number} is not a JSON object; the file is damaged") from None
        if isinstance(row, dict) and "step" in row and "averaged_from" not in row:
            rows.append(row)
    if not rows:
        raise UserError(f"{path} holds no evaluations yet; plot again after the first train.eval_every steps")
    return rows


def plot_curves(rows: list[dict], out: Path, title: str) -> None:
    matplotlib = require_extra("matplotlib", "plot", "pictures")
    matplotlib.use("Agg")  # files, no window
    import matplotlib.pyplot as plt

    steps = [r["step"] for r in rows]
    has_bleu = "val_bleu" in rows[0]
    fig, axes = plt.subplots(1, 2 if has_bleu else 1, figsize=(11 if has_bleu else 6, 4), squeeze=False)
    loss_ax = axes[0][0]
    for key, label in (("train_loss", "training loss"), ("val_loss", "validation loss")):
        if key in rows[0]:
            loss_ax.plot(steps, [r[key] for r in rows], marker="o", markersize=3, label=label)
    loss_ax.set(xlabel="step", ylabel="cross-entropy (nats per token)", title="loss")
    loss_ax.legend()
    loss_ax.grid(alpha=0.3)
    if has_bleu:
        bleu_ax = axes[0][1]
        bleu = [r["val_bleu"] for r in rows]
        bleu_ax.plot(steps, bleu, marker="o", markersize=3, color="tab:green", label="validation BLEU (greedy)")
        best = max(range(len(bleu)), key=bleu.__getitem__)
        bleu_ax.annotate(
            f"best {bleu[best]:.2f}", (steps[best], bleu[best]), textcoords="offset points", xytext=(-30, -15)
        )
        bleu_ax.set(xlabel="step", ylabel="BLEU", title="validation BLEU")
        bleu_ax.legend(loc="lower right")
        bleu_ax.grid(alpha=0.3)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)


@cli_entry
def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m mt.plot", description="Draw a run's training and validation curves.")
    p.add_argument("run_dir", help="a run directory made by mt.train")
    p.add_argument("--out", help="image file to write (default RUN_DIR/curves.png)")
    args = p.parse_args(argv)
    run_dir = Path(args.run_dir)
    out = output_file(args.out, "--out") if args.out else run_dir / "curves.png"
    rows = read_metrics(run_dir)
    plot_curves(rows, out, f"{run_dir.name}: {len(rows)} evaluations, last at step {rows[-1]['step']}")
    print(f"curves in {out}")


if __name__ == "__main__":
    main()
