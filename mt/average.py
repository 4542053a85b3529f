"""python -m mt.average RUN_DIR [--last N] [--out FILE] | python -m mt.average CKPT CKPT ... --out FILE

Checkpoint averaging by hand (mt/training/averaging.py does the work): the element-wise mean of
several checkpoints' weights, usually a run's last snapshots (train.average_last keeps them).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from mt.checkpoint import save_checkpoint
from mt.errors import UserError, cli_entry
from mt.files import output_file
from mt.training.averaging import SNAPSHOTS, average_checkpoints, snapshots


@cli_entry
def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m mt.average", description="Average the weights of several checkpoints.")
    p.add_argument("paths", nargs="+", help="a run directory (its last snapshots), or checkpoint files")
    p.add_argument(
        "--last", type=int, default=5, help="with a run directory: how many of its last snapshots (default 5)"
    )
    p.add_argument("--out", help="where to write the average (default RUN_DIR/averaged.pt)")
    args = p.parse_intermixed_args(argv)  # checkpoints before and after options alike
    if len(args.paths) == 1 and Path(args.paths[0]).is_dir():
        run_dir = Path(args.paths[0])
        paths = snapshots(run_dir)[-args.last :] if args.last > 0 else []
        if len(paths) < 2:
            raise UserError(
                f"{run_dir} holds {len(paths)} snapshot(s) in {SNAPSHOTS}/; train with train.average_last >= 2"
            )
        out = output_file(args.out, "--out") if args.out else run_dir / "averaged.pt"
    else:
        paths = [Path(x) for x in args.paths]
        missing = [str(x) for x in paths if not x.is_file()]
        if missing:
            raise UserError(f"no such checkpoint: {missing[0]}")
        if not args.out:
            raise UserError("give --out FILE for the averaged checkpoint")
        out = output_file(args.out, "--out")
    averaged = average_checkpoints(paths)
    save_checkpoint(out, averaged)
    steps = ", ".join(str(s) for s in averaged["averaged_from"])
    print(f"averaged {len(paths)} checkpoints (steps {steps}) into {out}", file=sys.stderr)


if __name__ == "__main__":
    main()
