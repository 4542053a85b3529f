"""python -m mt.train RECIPE.yaml [section.key=value ...] [--resume]

Builds the task, model and optimizer a recipe describes, trains with a progress bar, evaluates
every `train.eval_every` steps, and keeps a self-contained run directory. Ctrl-C stops at the end
of the current step and saves `last`; `--resume` continues from it exactly. Under
`torchrun --nproc_per_node=N -m mt.train RECIPE` each process trains on its share of every batch
list with DistributedDataParallel; rank 0 alone logs, evaluates and writes the run directory.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import torch
from torch.nn.parallel import DistributedDataParallel
from tqdm import tqdm

from mt import distributed
from mt.average import average_checkpoints, keep_last_snapshots, snapshot_path, snapshots
from mt.board import Board
from mt.checkpoint import BEST, LAST, load_checkpoint, save_checkpoint
from mt.config import Config, load_config, save_config
from mt.errors import UserError, cli_entry
from mt.files import RunLock, atomic_write
from mt.hardware import autocast, inference_precision, pick_device, uses_bf16
from mt.lm import LanguageModelTask
from mt.model import build_model
from mt.optim import lr_at, make_optimizer
from mt.report import language_model_report, translation_report
from mt.stopping import StopFlag, StopPolicy, expected_last_step
from mt.task import Task

# Recipe sections that must not change when a run is resumed (train.* and decode.* may), and
# the keys in them that may: they change how fast the data is prepared, not what it is.
FROZEN_ON_RESUME = ("data", "tokenizer", "model")
FREE_ON_RESUME = {"data.num_proc"}


def build_task(cfg: Config, run_dir: Path, device: torch.device, reuse_tokenizer: bool, world: distributed.World) -> Task:
    if cfg.model.arch == "transformer":
        from mt.translation import TranslationTask  # imports `datasets`, slow to load

        return TranslationTask(cfg, run_dir, device, reuse_tokenizer, world)
    return LanguageModelTask(cfg, run_dir, device, reuse_tokenizer, world)


def _check_resumable(cfg: Config, saved: dict, run_dir: Path) -> None:
    now = cfg.to_dict()
    if saved.get("seed", cfg.seed) != cfg.seed:  # it orders the epochs: a new seed would reshuffle mid-epoch
        raise UserError(f"cannot resume {run_dir}: seed was {saved['seed']}, the recipe now says {cfg.seed}; "
                        "restore it or train into another out_dir")
    for section in FROZEN_ON_RESUME:
        for key, value in now[section].items():
            if saved[section].get(key, value) != value and f"{section}.{key}" not in FREE_ON_RESUME:
                raise UserError(
                    f"cannot resume {run_dir}: {section}.{key} was {saved[section].get(key)!r}, the recipe now says "
                    f"{value!r}; restore it or train into another out_dir"
                )


def trim_metrics(path: Path, step: int) -> None:
    """Keep the metrics of evaluations up to `step`: a run killed after logging an evaluation but
    before its checkpoint evaluates that step again when resumed, and logs it again."""
    if not path.is_file():
        return
    rows = [line for line in path.read_text().splitlines() if line.strip()]
    kept = []
    for line in rows:
        try:
            if json.loads(line)["step"] <= step:
                kept.append(line)
        except (ValueError, KeyError):
            pass  # a line cut short by the kill
    if len(kept) != len(rows):
        atomic_write(path, lambda tmp: Path(tmp).write_text("".join(line + "\n" for line in kept)))


def train(cfg: Config, resume: bool = False) -> dict:
    """Train as `cfg` says; return the last evaluation's metrics.

    A training process lets go of what it holds in one place and one order, whichever way it ends
    (the step limit, the budget, patience, Ctrl-C, a user error, an exception): the trainer closes
    its data threads and then its writers, then the process group is destroyed, then the run lock
    is released, so that no second training can start in the directory before this one is done."""
    world, device = distributed.init(pick_device(cfg.train.device))
    lock = RunLock(cfg.run_dir)
    finished = False
    try:
        distributed.main_first(world, device, lock.acquire)
        trainer, interrupted = _train(cfg, resume, world, device)
        finished = True
        distributed.shutdown(world, wait_for_all=True)
        if world.is_main:  # rank 0 alone, no collectives left: averaging and the report
            _conclude(trainer, interrupted)
    finally:
        distributed.shutdown(world, wait_for_all=False)  # on an error path; done already otherwise
        lock.release()
    if interrupted:
        raise SystemExit(130)
    return trainer.metrics


@dataclass
class RunState:
    """Where a run has got to: saved in last.pt, restored by --resume."""

    step: int = 0
    elapsed_s: float = 0.0  # training time spent before this process took over
    best: float | None = None  # the best validation score so far
    bad_evals: int = 0  # evaluations since it last improved


def step_seed(seed: int, rank: int, step: int) -> int:
    """The seed of one step's dropout masks on one rank. Reseeding every step (microseconds) makes
    the masks a function of (seed, rank, step): a resumed run, on any number of processes, draws
    what an uninterrupted one would, with no generator state to save or gather from the ranks."""
    return ((seed * 1_000_003 + rank) * 1_000_033 + step) % 2**63


class Meter:
    """Tokens and training losses since the last reset: tokens/s and the mean loss. The losses stay
    on the device, so reading them (a sync) happens only when asked."""

    def __init__(self, device: torch.device):
        self.device = device
        self.reset()

    def reset(self) -> None:
        self.tokens, self.losses, self.started = 0, 0, time.monotonic()
        self.loss_sum = torch.zeros((), device=self.device)

    def add(self, loss: torch.Tensor, tokens: int) -> None:
        self.loss_sum, self.losses, self.tokens = self.loss_sum + loss, self.losses + 1, self.tokens + tokens

    def tokens_per_s(self) -> float:
        return self.tokens / max(time.monotonic() - self.started, 1e-9)

    def mean_loss(self) -> float:
        return self.loss_sum.item() / max(self.losses, 1)


def _open_run(cfg: Config, resume: bool, world: distributed.World) -> dict | None:
    """Check the run directory against `--resume`; return the checkpoint to resume from, if any."""
    run_dir, last_path = cfg.run_dir, cfg.run_dir / LAST
    if resume and not last_path.is_file():
        raise UserError(f"--resume: {last_path} does not exist; start the run without --resume")
    if not resume and last_path.is_file():
        raise UserError(f"{run_dir} already holds a run; continue it with --resume, or set out_dir=... (or delete it)")
    ckpt = load_checkpoint(last_path) if resume else None
    if ckpt:
        _check_resumable(cfg, ckpt["config"], run_dir)
    if world.is_main:
        run_dir.mkdir(parents=True, exist_ok=True)
        save_config(cfg, run_dir / "config.yaml")
        trim_metrics(run_dir / "metrics.jsonl", ckpt["step"] if ckpt else 0)  # what a killed run logged past it
    return ckpt


def _build(cfg: Config, world: distributed.World, device: torch.device, resume: bool, ckpt: dict | None):
    """Task, model, optimizer and run state, restored from `ckpt` when resuming."""
    torch.manual_seed(cfg.seed)
    # Rank 0 trains the tokenizer and fills the encoding cache; the others then reuse both.
    task = distributed.main_first(world, device, lambda: build_task(cfg, cfg.run_dir, device, resume, world))
    task = task or build_task(cfg, cfg.run_dir, device, True, world)
    model = build_model(cfg, task.vocab_size).to(device)  # the same start on every rank (DDP broadcasts it too)
    optimizer = make_optimizer(model, cfg.train)
    if not ckpt:
        return task, model, optimizer, RunState()
    model.load_state_dict(ckpt["model"])
    optimizer.load_state_dict(ckpt["optimizer"])
    task.load_state_dict(ckpt["task"])
    state = RunState(ckpt["step"], ckpt["elapsed_s"], ckpt["best"], ckpt["bad_evals"])
    return task, model, optimizer, state


def _train(cfg: Config, resume: bool, world: distributed.World, device: torch.device) -> tuple[Trainer, bool]:
    """Open the run, build, train. Returns the trainer (its model, task and state) and whether
    Ctrl-C stopped it."""
    ckpt = _open_run(cfg, resume, world)
    task, model, optimizer, state = _build(cfg, world, device, resume, ckpt)
    trainer = Trainer(cfg, world, device, task, model, optimizer, state)
    return trainer, trainer.run()


def _conclude(trainer: Trainer, interrupted: bool) -> None:
    """Rank 0, once training is over: average the last snapshots, say where the run ended, report."""
    cfg, state, task = trainer.cfg, trainer.state, trainer.task
    if not interrupted and cfg.train.average_last >= 2:
        state.best = average_into_best(trainer.model, task, trainer.eval_precision, cfg, state.best,
                                       metrics_path=cfg.run_dir / "metrics.jsonl") or state.best
    if state.best is not None:
        print(f"done: step {state.step}, best {task.best_metric} {state.best:.4f}, run directory {cfg.run_dir}", file=sys.stderr)
    if cfg.train.report and (cfg.run_dir / BEST).is_file():
        report(cfg, cfg.run_dir, trainer.device)


class Trainer:
    """The step loop: for each step train, maybe log, maybe evaluate and save, maybe stop."""

    def __init__(self, cfg: Config, world: distributed.World, device: torch.device, task: Task, model, optimizer,
                 state: RunState):
        self.cfg, self.tc, self.world, self.device = cfg, cfg.train, world, device
        self.task, self.model, self.optimizer, self.state = task, model, optimizer, state
        # Train through the compiled (and DDP-wrapped) module; save the plain one, so checkpoints
        # carry no prefixes and load in a single process.
        self.train_model = torch.compile(model) if self.tc.compile else model
        if world.size > 1:
            self.train_model = DistributedDataParallel(self.train_model, device_ids=[device.index] if device.type == "cuda" else None)
        self.precision = autocast(device, self.tc.precision)
        self.eval_precision = autocast(device, inference_precision(device) if device.type == "cpu" else self.tc.precision)
        self.log = print if world.is_main else (lambda *a, **k: None)
        n_params = sum(p.numel() for p in model.parameters())
        block = f", recipe's {cfg.device_block} block applied" if cfg.device_block else ""
        self.log(f"{cfg.name}: {cfg.model.arch}, {n_params / 1e6:.2f}M parameters, vocab {task.vocab_size}, on {device}"
                 + (f" x {world.size} processes" if world.size > 1 else "")
                 + f", {'bf16' if uses_bf16(device, self.tc.precision) else 'fp32'}{block}", file=sys.stderr)
        self.metrics: dict = {}  # the last evaluation's
        self.started = time.monotonic()

    def elapsed(self) -> float:
        return self.state.elapsed_s + time.monotonic() - self.started

    def checkpoint_state(self) -> dict:
        s = self.state
        return {
            "model": self.model.state_dict(), "optimizer": self.optimizer.state_dict(), "task": self.task.state_dict(),
            "step": s.step, "elapsed_s": self.elapsed(), "best": s.best, "bad_evals": s.bad_evals, "config": self.cfg.to_dict(),
        }

    def train_step(self, batches) -> tuple[torch.Tensor, int, torch.Tensor | None]:
        """One optimizer step over `train.grad_accum` micro-batches; gradients are all-reduced once.
        Each micro-batch's mean loss weighs by its share of the step's tokens (over all ranks), so
        the gradient is the mean over every target token whatever the batches' sizes."""
        tc, world = self.tc, self.world
        micro_batches = [next(batches) for _ in range(tc.grad_accum)]
        counts = [self.task.batch_tokens(b) for b in micro_batches]
        all_tokens = distributed.total(world, sum(counts), self.device) if tc.grad_accum > 1 else sum(counts) * world.size
        loss_total = torch.zeros((), device=self.device)
        for micro, (batch, n) in enumerate(zip(micro_batches, counts)):
            last_micro = micro == tc.grad_accum - 1
            sync = self.train_model.no_sync() if world.size > 1 and not last_micro else contextlib.nullcontext()
            with sync:
                with self.precision:
                    loss = self.task.loss(self.train_model, batch, tc.label_smoothing)
                weight = n * world.size / all_tokens if tc.grad_accum > 1 else 1.0  # DDP averages over ranks
                (loss * weight).backward()
            loss_total += loss.detach() * (n / sum(counts))
        grad_norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), tc.grad_clip) if tc.grad_clip > 0 else None
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        return loss_total, all_tokens, grad_norm

    def evaluate_and_save(self, lr: float, since_eval: Meter, metrics_file) -> tuple[dict, bool]:
        """Rank 0: validate, keep best/snapshot/last, log a metrics row. Returns (metrics, improved)."""
        s, tc, run_dir = self.state, self.tc, self.cfg.run_dir
        tokens_per_s = since_eval.tokens_per_s()
        self.model.eval()
        metrics = {"step": s.step, "train_loss": since_eval.mean_loss(), **self.task.evaluate(self.model, self.eval_precision),
                   "lr": lr, "tokens_per_s": round(tokens_per_s, 1), "elapsed_s": round(self.elapsed(), 2)}
        self.model.train()
        score = metrics[self.task.best_metric]
        improved = s.best is None or (score > s.best if self.task.higher_is_better else score < s.best)
        weights = {"model": self.model.state_dict(), "config": self.cfg.to_dict(), "step": s.step}
        if improved:
            s.best, s.bad_evals = score, 0
            save_checkpoint(run_dir / BEST, {**weights, **metrics})
        else:
            s.bad_evals += 1
        if tc.average_last >= 2:
            save_checkpoint(snapshot_path(run_dir, s.step), weights)
            keep_last_snapshots(run_dir, tc.average_last)
        metrics_file.write(json.dumps(metrics) + "\n")  # before last.pt: a resume trims what it does not cover
        metrics_file.flush()
        save_checkpoint(run_dir / LAST, self.checkpoint_state())
        return metrics, improved

    def run(self) -> bool:
        """Train until the stop policy says so; returns whether Ctrl-C stopped it (then last.pt is
        saved at once: an evaluation could take minutes). On the way out, however it goes, the
        batch stream is closed first (which stops and joins its prefetch thread), then the writers."""
        s, tc, world = self.state, self.tc, self.world
        first_step = s.step
        since_eval, since_log = Meter(self.device), Meter(self.device)
        with contextlib.ExitStack() as closing:  # closes in reverse: batches, then board and metrics file
            metrics_file = closing.enter_context(open(self.cfg.run_dir / "metrics.jsonl", "a")) if world.is_main else None
            self.board = closing.enter_context(contextlib.closing(Board(self.cfg.run_dir, tc.tensorboard and world.is_main, s.step)))
            batches = closing.enter_context(contextlib.closing(self.task.train_batches()))
            flag = closing.enter_context(StopFlag())
            bar = closing.enter_context(tqdm(total=tc.max_steps, initial=s.step, unit="step", dynamic_ncols=True,
                                             file=sys.stderr, disable=not world.is_main))
            policy = StopPolicy(tc, world, self.device, flag)
            self.model.train()
            reason = None if s.step < tc.max_steps else "done"
            while reason is None:
                lr = lr_at(s.step, tc, policy.fraction_spent(self.elapsed()))
                for group in self.optimizer.param_groups:
                    group["lr"] = lr
                torch.manual_seed(step_seed(self.cfg.seed, world.rank, s.step))  # dropout: resumable, per rank
                loss, n_tokens, grad_norm = self.train_step(batches)
                s.step += 1
                since_eval.add(loss, n_tokens)
                since_log.add(loss, n_tokens)
                if s.step % tc.log_every == 0:
                    self._log(bar, lr, loss, grad_norm, since_log, first_step, policy)
                reason = policy.after_step(s.step, self.elapsed())
                if reason == "interrupted":
                    return self._interrupted(bar)
                if s.step % tc.eval_every == 0 or reason:
                    if world.is_main:
                        self.metrics = self._evaluate(bar, lr, since_eval, metrics_file)
                    reason = policy.after_evaluation(s.bad_evals) or reason
                    since_eval.reset()
                    since_log.reset()  # evaluation time is not training time
            bar.close()
            self.log(policy.message(reason), file=sys.stderr)
        return False

    def _log(self, bar, lr: float, loss, grad_norm, since_log: Meter, first_step: int, policy: StopPolicy) -> None:
        s = self.state
        self.board.scalars("train", {"loss": loss.item(), "lr": lr, "tokens_per_s": since_log.tokens_per_s(),
                                     **({"grad_norm": grad_norm.item()} if grad_norm is not None else {})}, s.step)
        bar.set_postfix(loss=f"{loss.item():.4f}", lr=f"{lr:.2e}", tok_s=f"{since_log.tokens_per_s():,.0f}", refresh=False)
        bar.total = expected_last_step(s.step, first_step, time.monotonic() - self.started,
                                       policy.seconds_left(self.elapsed()), self.tc.max_steps)
        bar.update(s.step - bar.n)
        since_log.reset()

    def _evaluate(self, bar, lr: float, since_eval: Meter, metrics_file) -> dict:
        metrics, improved = self.evaluate_and_save(lr, since_eval, metrics_file)
        self.board.scalars("valid", {k: v for k, v in metrics.items() if k.startswith("val_")}, self.state.step)
        shown = "  ".join(f"{k} {v:.4f}" for k, v in metrics.items() if k.startswith(("train_", "val_")))
        bar.write(f"step {self.state.step}: {shown}{'  (best)' if improved else ''}", file=sys.stderr)
        bar.update(self.state.step - bar.n)
        return metrics

    def _interrupted(self, bar) -> bool:
        if self.world.is_main:
            save_checkpoint(self.cfg.run_dir / LAST, self.checkpoint_state())
        bar.close()
        self.log(f"interrupted at step {self.state.step}; saved {self.cfg.run_dir / LAST}; continue with --resume", file=sys.stderr)
        return True


def report(cfg: Config, run_dir: Path, device: torch.device) -> None:
    """The end-of-training report. The run is complete without it, so a failure here (a test set
    that cannot be read) is a warning, not an error."""
    if cfg.model.arch != "transformer":
        language_model_report(run_dir)
        return
    print("end-of-training report (train.report=false skips it)", file=sys.stderr)
    try:
        translation_report(cfg, run_dir, device.type)
    except UserError as e:
        print(f"warning: no end-of-training report: {e}", file=sys.stderr)


def average_into_best(model, task, precision, cfg: Config, best: float | None, metrics_path: Path) -> float | None:
    """Average the run's last `train.average_last` snapshots, validate the average, and make it
    `best` when it scores better. Returns the new best score, or None when it did not win."""
    paths = snapshots(cfg.run_dir)[-cfg.train.average_last :]
    if len(paths) < 2:
        return None
    averaged = average_checkpoints(paths)
    model.load_state_dict(averaged["model"])
    model.eval()
    metrics = task.evaluate(model, precision)
    score = metrics[task.best_metric]
    wins = best is None or (score > best if task.higher_is_better else score < best)
    row = {"step": averaged["step"], "averaged_from": averaged["averaged_from"], **metrics, "best": wins}
    with open(metrics_path, "a") as f:
        f.write(json.dumps(row) + "\n")
    steps = ", ".join(map(str, averaged["averaged_from"]))
    shown = "  ".join(f"{k} {v:.4f}" for k, v in metrics.items())
    print(f"average of steps {steps}: {shown}  ({'best: saved as best.pt' if wins else 'not better than best.pt'})", file=sys.stderr)
    if wins:
        save_checkpoint(cfg.run_dir / BEST, {**averaged, **metrics})
        return score
    return None


@cli_entry
def _main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m mt.train", description="Train a model from a YAML recipe.")
    parser.add_argument("recipe", help="path to a recipe, e.g. recipes/shakespeare_char.yaml")
    parser.add_argument("overrides", nargs="*", help="section.key=value, e.g. train.max_steps=200")
    parser.add_argument("--resume", action="store_true", help="continue the run in out_dir from its last checkpoint")
    args = parser.parse_args(argv)
    cfg = load_config(args.recipe, args.overrides)
    train(cfg, resume=args.resume)


def main(argv=None):
    if distributed.launched():  # a torchrun worker: see mt.distributed on how it must end
        distributed.run_worker(lambda: _main(argv))
    _main(argv)


if __name__ == "__main__":
    main()
