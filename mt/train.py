"""python -m mt.train RECIPE.yaml [section.key=value ...] [--resume]

Trains the model a recipe describes (mt/training/trainer.py does the work), with a progress bar,
an evaluation every `train.eval_every` steps and a self-contained run directory, then scores the
best checkpoint on the recipe's test sets (mt/training/report.py). With `distill.teacher`, the
teacher first translates the training sources (mt/training/distillation.py). Ctrl-C stops at
the end of the current step and saves `last`; `--resume` continues from it exactly. Under
`torchrun --nproc_per_node=N -m mt.train RECIPE` each process trains on its share of every batch.
"""

from __future__ import annotations

import argparse

from mt.config import load_config
from mt.errors import cli_entry
from mt.training import distributed
from mt.training.report import report
from mt.training.trainer import train


@cli_entry
def _main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m mt.train", description="Train a model from a YAML recipe.")
    parser.add_argument("recipe", help="path to a recipe, e.g. recipes/shakespeare_char.yaml")
    parser.add_argument("overrides", nargs="*", help="section.key=value, e.g. train.max_steps=200")
    parser.add_argument("--resume", action="store_true", help="continue the run in out_dir from its last checkpoint")
    args = parser.parse_intermixed_args(argv)  # `RECIPE --resume key=value` too, not only flags last
    cfg = load_config(args.recipe, args.overrides)
    if cfg.distill.teacher is not None:  # the teacher translates first (docs/distillation.md)
        from mt.training.distillation import distilled

        cfg = distilled(cfg, args.resume)
    train(cfg, resume=args.resume)
    if distributed.launched_rank() == 0:  # training has ended (Ctrl-C exits before this)
        report(cfg)


def main(argv=None):
    if distributed.launched():  # a torchrun worker: see mt.training.distributed on how it must end
        distributed.run_worker(lambda: _main(argv))
    _main(argv)


if __name__ == "__main__":
    main()
