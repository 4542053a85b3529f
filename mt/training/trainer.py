"""Training: `train(cfg)` opens the run, builds the task, model and optimizer, runs the `Trainer`
loop (for each step: train, maybe log, maybe evaluate and save, ask the stop policy) and lets go
of everything in one order however it ends; `mt.train` then reports on the test sets. Under
`torchrun --nproc_per_node=N -m mt.train` each process trains on its share of every batch list
with DistributedDataParallel; rank 0 alone logs, evaluates and writes the run directory.
"""

from __future__ import annotations

import contextlib
import json
import sys
import time

import torch
from torch.nn.parallel import DistributedDataParallel
from tqdm import tqdm

from mt.checkpoint import BEST, LAST, save_checkpoint
from mt.config import Config
from mt.cpu.micro_batches import MicroBatchWorkers, add_in_order
from mt.model import build_model, set_dropout
from mt.runtime import Runtime
from mt.training import distributed, init_from
from mt.training.averaging import average_into_best, keep_last_snapshots, snapshot_path
from mt.training.board import Board
from mt.training.lm_task import LanguageModelTask
from mt.training.optim import lr_at, make_optimizer
from mt.training.plan import Plan, Planner, expected_last_step
from mt.training.run_dir import RunLock, RunState, open_run
from mt.training.stopping import StopFlag, StopPolicy
from mt.training.task import Task


def build_task(cfg: Config, runtime: Runtime, world: distributed.World, resume: bool) -> Task:
    """The task `cfg.model.arch` trains. Its tokenizer is the run directory's when resuming (and on
    every rank after the first, which rank 0 has made it for), else the starting run's
    (`train.init_from`), else learned from the corpus; rank 0 keeps a new one in the run directory."""
    own_tokenizer = resume or not world.is_main
    tokenizer_from = cfg.run_dir if own_tokenizer else init_from.run_dir(cfg)
    if cfg.model.arch == "transformer":
        from mt.training.translation_task import TranslationTask  # imports `datasets`, slow to load

        task = TranslationTask(cfg, runtime, tokenizer_from, world)
    else:
        task = LanguageModelTask(cfg, runtime, tokenizer_from, world)
    if world.is_main and not own_tokenizer:
        task.tokenizer.save(cfg.run_dir)
    return task


def train(cfg: Config, resume: bool = False) -> dict:
    """Train as `cfg` says; return the last evaluation's metrics.

    A training process lets go of what it holds in one place and one order, whichever way it ends
    (the step limit, the budget, patience, Ctrl-C, a user error, an exception): the trainer closes
    its data threads and then its writers, then the process group is destroyed, then the run lock
    is released, so that no second training can start in the directory before this one is done."""
    lock = RunLock(cfg.run_dir)
    # Decided once and handed down; before the process group, which an error would leave behind.
    runtime = Runtime.for_training(cfg, *distributed.placement())
    world = distributed.init(runtime.device)
    try:
        distributed.main_first(world, lock.acquire)
        trainer, interrupted = _train(cfg, resume, world, runtime)
        distributed.shutdown(world, wait_for_all=True)
        if world.is_main:  # rank 0 alone, no collectives left: averaging and the report
            _conclude(trainer, interrupted)
    finally:
        distributed.shutdown(world, wait_for_all=False)  # on an error path; done already otherwise
        lock.release()
    if interrupted:
        raise SystemExit(130)
    return trainer.metrics


def step_seed(seed: int, rank: int, step: int) -> int:
    """The seed of one step's dropout masks on one rank. Reseeding every step (microseconds) makes
    the masks a function of (seed, rank, step): a resumed run, on any number of processes, draws
    what an uninterrupted one would, with no generator state to save or gather from the ranks."""
    return ((seed * 1_000_003 + rank) * 1_000_033 + step) % 2**63


class Pace:
    """Wall seconds per step in this process (evaluations and logging included), counted after its
    first `skip` steps: those allocate and, under `train.compile`, compile once per new batch shape,
    which would make the pace, and so the plan, several times too slow."""

    def __init__(self, skip: int = 1):
        self.skip, self.steps, self.since = max(skip, 1), 0, 0.0

    def step_done(self) -> None:
        self.steps += 1
        if self.steps == self.skip:
            self.since = time.monotonic()

    def seconds_per_step(self) -> float | None:
        timed = self.steps - self.skip
        return (time.monotonic() - self.since) / timed if timed > 0 else None


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


def _build_run(cfg: Config, world: distributed.World, runtime: Runtime, resume: bool, ckpt: dict | None):
    """Task, model, optimizer and run state, restored from `ckpt` when resuming."""
    torch.manual_seed(cfg.seed)
    # Rank 0 trains the tokenizer and fills the encoding cache; the others then reuse both.
    task = distributed.main_first(world, lambda: build_task(cfg, runtime, world, resume), then_the_others=True)
    model = build_model(cfg, task.vocab_size).to(runtime.device)  # the same start on every rank (DDP broadcasts it too)
    if not ckpt and cfg.train.init_from:
        init_from.load_weights(model, cfg, print if world.is_main else (lambda *a, **k: None))
    optimizer = make_optimizer(model, cfg.train)
    if not ckpt:
        return task, model, optimizer, RunState()
    model.load_state_dict(ckpt["model"])
    optimizer.load_state_dict(ckpt["optimizer"])
    task.load_state_dict(ckpt["task"])
    plan = Plan.from_checkpoint(ckpt)  # absent where no budget was planned
    return task, model, optimizer, RunState(ckpt["step"], ckpt["elapsed_s"], ckpt["best"], ckpt["bad_evals"], plan)


def _train(cfg: Config, resume: bool, world: distributed.World, runtime: Runtime) -> tuple[Trainer, bool]:
    """Open the run, build, train. Returns the trainer (its model, task and state) and whether
    Ctrl-C stopped it."""
    ckpt = open_run(cfg, resume, world)
    task, model, optimizer, state = _build_run(cfg, world, runtime, resume, ckpt)
    trainer = Trainer(cfg, world, runtime, task, model, optimizer, state)
    return trainer, trainer.run()


def _conclude(trainer: Trainer, interrupted: bool) -> None:
    """Rank 0, once training is over: average the last snapshots, say where the run ended, and
    hand training's memory back (the report, mt.train's next step, would only add to its peak)."""
    cfg, state = trainer.cfg, trainer.state
    if not interrupted and cfg.train.average_last >= 2:
        average_into_best(
            trainer.model,
            trainer.task,
            trainer.runtime.autocast(training=False),
            cfg,
            state,
            cfg.run_dir / "metrics.jsonl",
        )
    if state.best is not None:
        print(
            f"done: step {state.step}, best {trainer.task.best_metric} {state.best:.4f}, run directory {cfg.run_dir}",
            file=sys.stderr,
        )
    trainer.let_go()


class Trainer:
    """The step loop: for each step train, maybe log, maybe evaluate and save, maybe stop."""

    def __init__(
        self, cfg: Config, world: distributed.World, runtime: Runtime, task: Task, model, optimizer, state: RunState
    ):
        self.cfg, self.tc, self.world, self.runtime, self.device = cfg, cfg.train, world, runtime, runtime.device
        device = runtime.device
        self.task, self.model, self.optimizer, self.state = task, model, optimizer, state
        # Train through the compiled (and DDP-wrapped) module; save the plain one, so checkpoints
        # carry no prefixes and load in a single process.
        self.train_model = torch.compile(model) if runtime.compile else model
        if world.size > 1:
            self.train_model = DistributedDataParallel(
                self.train_model, device_ids=[device.index] if device.type == "cuda" else None
            )
        self.micro_workers = MicroBatchWorkers(runtime.micro_batch_workers)
        self.log = print if world.is_main else (lambda *a, **k: None)
        n_params = sum(p.numel() for p in model.parameters())
        blocks = (cfg.device_block or "").split("+")
        block = f", recipe's {' and '.join(blocks)} block{'s' * (len(blocks) > 1)} applied" if cfg.device_block else ""
        self.log(
            f"{cfg.name}: {cfg.model.arch}, {n_params / 1e6:.2f}M parameters, vocab {task.vocab_size}, on {device}"
            + (f" x {world.size} processes" if world.size > 1 else "")
            + f", {runtime.precision}{block}",
            file=sys.stderr,
        )
        if runtime.emulated_bf16:
            self.log(
                "warning: train.precision=bf16 on a CPU without bf16 units (AMX or AVX-512 BF16) is emulated, "
                "some 30 times slower than fp32; train.precision=auto trains in fp32 here",
                file=sys.stderr,
            )
        self.metrics: dict = {}  # the last evaluation's
        self.started = time.monotonic()

    def let_go(self) -> None:
        """Drop the model, optimizer and data, and hand their memory (and what the allocator kept
        from the steps) back to the system; the trainer cannot train after this."""
        self.task = self.model = self.train_model = self.optimizer = None
        self.runtime.give_back()

    def elapsed(self) -> float:
        return self.state.elapsed_s + time.monotonic() - self.started

    def checkpoint_state(self) -> dict:
        s = self.state
        return {
            "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "task": self.task.state_dict(),
            "step": s.step,
            "elapsed_s": self.elapsed(),
            "best": s.best,
            "bad_evals": s.bad_evals,
            "plan": s.plan.to_dict() if s.plan else None,
            "config": self.cfg.to_dict(),
        }

    def train_step(self, batches, seed: int | None = None) -> tuple[torch.Tensor, int, torch.Tensor | None]:
        """One optimizer step over `train.grad_accum` micro-batches (or the plan's number: mt/training/plan.py);
        gradients are all-reduced once. Each micro-batch's mean
        loss weighs by its share of the step's tokens (over all ranks), so the gradient is the mean
        over every target token whatever the batches' sizes. On a CPU the micro-batches may run
        side by side (mt/cpu/micro_batches.py); `seed` seeds their dropout (default: the seed
        torch was last given, which the loop sets for each step)."""
        tc, world = self.tc, self.world
        plan = self.state.plan
        accum = plan.grad_accum if plan and plan.grad_accum else tc.grad_accum
        micro_batches = [next(batches) for _ in range(accum)]
        counts = [self.task.batch_tokens(b) for b in micro_batches]
        all_tokens = distributed.total(world, sum(counts)) if accum > 1 else sum(counts) * world.size
        weights = [n * world.size / all_tokens if accum > 1 else 1.0 for n in counts]  # DDP averages over ranks
        shares = [n / sum(counts) for n in counts]  # of this rank's logged loss
        if self.micro_workers.workers > 1 and accum > 1:
            seed = torch.initial_seed() if seed is None else seed
            loss_total = self._side_by_side(micro_batches, weights, shares, seed)
        else:
            loss_total = self._one_after_another(micro_batches, weights, shares)
        grad_norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), tc.grad_clip) if tc.grad_clip > 0 else None
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        return loss_total, all_tokens, grad_norm

    def _one_after_another(self, micro_batches: list, weights: list[float], shares: list[float]) -> torch.Tensor:
        """Each micro-batch's backward adds into `.grad`; under DDP the last one all-reduces."""
        loss_total = torch.zeros((), device=self.device)
        with self.runtime.weight_casts():
            for micro, batch in enumerate(micro_batches):
                last_micro = micro == len(micro_batches) - 1
                sync = (
                    self.train_model.no_sync() if self.world.size > 1 and not last_micro else contextlib.nullcontext()
                )
                with sync:
                    with self.runtime.autocast():
                        loss = self.task.loss(self.train_model, batch, self.tc.label_smoothing)
                    (loss * weights[micro]).backward()
                loss_total += loss.detach() * shares[micro]
        return loss_total

    def _side_by_side(self, micro_batches: list, weights: list[float], shares: list[float], seed: int) -> torch.Tensor:
        """The micro-batches in shares on the worker threads; their gradients summed into `.grad`."""
        params = [p for p in self.model.parameters() if p.requires_grad]

        def work(share: range) -> tuple[torch.Tensor, list]:
            loss_sum, grads = torch.zeros(()), [None] * len(params)
            with self.runtime.weight_casts():  # contexts of this thread's own
                for i in share:
                    with self.runtime.autocast():
                        loss = self.task.loss(self.train_model, micro_batches[i], self.tc.label_smoothing)
                    parts = torch.autograd.grad(loss * weights[i], params, allow_unused=True)
                    grads = add_in_order([grads, parts])
                    loss_sum += loss.detach() * shares[i]
            return loss_sum, grads

        results = self.micro_workers.run(work, len(micro_batches), seed)
        for p, g in zip(params, add_in_order([grads for _, grads in results])):
            p.grad = g
        return sum((loss for loss, _ in results), torch.zeros(()))

    def evaluate_and_save(self, lr: float, since_eval: Meter, metrics_file, compete: bool = True) -> tuple[dict, bool]:
        """Rank 0: validate, log a metrics row and, where the evaluation `compete`s (all but the one
        that times a budget's plan, at the end of warm-up), keep best.pt and a snapshot; the loop
        then saves last.pt, once the stop policy has seen the evaluation. Returns (metrics, improved)."""
        s, tc, run_dir = self.state, self.tc, self.cfg.run_dir
        tokens_per_s = since_eval.tokens_per_s()
        # Decoding asks for other sizes than the steps: the blocks glibc kept from the steps would
        # only add to its peak, and its own to training's after (a bf16 run peaked at evaluations).
        self.runtime.give_back()
        self.model.eval()
        metrics = {
            "step": s.step,
            "train_loss": since_eval.mean_loss(),
            **self.task.evaluate(self.model, self.runtime.autocast(training=False)),
            "lr": lr,
            "tokens_per_s": round(tokens_per_s, 1),
            "elapsed_s": round(self.elapsed(), 2),
        }
        self.model.train()
        self.runtime.give_back()
        # The evaluation that times the plan is of an early model: it would win ties for best.pt
        # (a metric stuck at 0 ties) and join the snapshots averaged at the end.
        improved = compete and s.record(metrics[self.task.best_metric], self.task.higher_is_better)
        weights = {"model": self.model.state_dict(), "config": self.cfg.to_dict(), "step": s.step}
        if improved:
            save_checkpoint(run_dir / BEST, {**weights, **metrics})
        if compete and tc.average_last >= 2:
            save_checkpoint(snapshot_path(run_dir, s.step), weights)
            keep_last_snapshots(run_dir, tc.average_last)
        metrics_file.write(json.dumps(metrics) + "\n")  # before last.pt: a resume trims what it does not cover
        metrics_file.flush()
        return metrics, improved

    def run(self) -> bool:
        """Train until the stop policy says so; returns whether Ctrl-C stopped it (then last.pt is
        saved at once: an evaluation could take minutes). On the way out, however it goes, the
        micro-batch workers stop first, then the batch stream (which stops and joins its prefetch
        thread), then the writers."""
        s, tc, world = self.state, self.tc, self.world
        first_step = s.step
        since_eval, since_log = Meter(self.device), Meter(self.device)
        with contextlib.ExitStack() as closing:  # closes in reverse: batches, then board and metrics file
            metrics_file, batches, flag, bar = self._open_loop(closing)
            planner = Planner(tc, world, s, self.task.batches_per_epoch)
            policy = StopPolicy(tc, world, flag, planner)
            pace = Pace(skip=(planner.at - first_step) // 2)  # the plan times warm-up's second half
            self.model.train()
            self._plan_dropout()  # a resumed run's, if its plan turned it on
            reason = policy.steps_done(s.step)  # None, or a resumed run that had already ended
            while reason is None:
                lr = lr_at(s.step, tc, policy.total_steps(), s.plan.anchor if s.plan else None)
                for group in self.optimizer.param_groups:
                    group["lr"] = lr
                torch.manual_seed(step_seed(self.cfg.seed, world.rank, s.step))  # dropout: resumable, per rank
                loss, n_tokens, grad_norm = self.train_step(batches)
                pace.step_done()
                s.step += 1
                self.runtime.after_step(s.step)
                since_eval.add(loss, n_tokens)
                since_log.add(loss, n_tokens)
                if s.step % tc.log_every == 0:
                    self._log(bar, lr, loss, grad_norm, since_log, pace, policy)
                reason = policy.after_step(s.step, self.elapsed(), pace.seconds_per_step())
                if reason == "interrupted":
                    return self._interrupted(bar)
                if policy.evaluation_due(s.step) or reason:
                    reason = self._evaluation(bar, lr, since_eval, metrics_file, policy, reason)
                    since_eval.reset()
                    since_log.reset()  # evaluation time is not training time
            bar.close()
            self.log(policy.message(reason), file=sys.stderr)
        return False

    def _plan_dropout(self) -> None:
        """The dropout a time budget's plan raised (mt/training/plan.py), once it has; the attention
        weights' too, unless the recipe sets model.attention_dropout."""
        plan = self.state.plan
        if plan is not None and plan.dropout is not None:
            p = max(plan.dropout, self.cfg.model.dropout)
            set_dropout(self.model, p, attention=self.cfg.model.attention_dropout is None)

    def _open_loop(self, closing: contextlib.ExitStack):
        """What the loop holds open, entered into `closing`, which closes it in reverse: the heap's
        guard, the metrics file (rank 0), the board, the batch stream, the micro-batch workers
        (so their threads stop before the batches), the Ctrl-C flag and the progress bar."""
        s, tc, world = self.state, self.tc, self.world
        closing.enter_context(self.runtime.loop_guard())  # what lives on through the loop
        metrics_file = closing.enter_context(open(self.cfg.run_dir / "metrics.jsonl", "a")) if world.is_main else None
        self.board = closing.enter_context(
            contextlib.closing(Board(self.cfg.run_dir, tc.tensorboard and world.is_main, s.step))
        )
        batches = closing.enter_context(contextlib.closing(self.task.train_batches()))
        closing.enter_context(contextlib.closing(self.micro_workers))
        flag = closing.enter_context(StopFlag())
        bar = closing.enter_context(
            tqdm(
                total=tc.max_steps,
                initial=s.step,
                unit="step",
                dynamic_ncols=True,
                file=sys.stderr,
                disable=not world.is_main,
            )
        )
        return metrics_file, batches, flag, bar

    def _evaluation(
        self, bar, lr: float, since_eval: Meter, metrics_file, policy: StopPolicy, reason: str | None
    ) -> str | None:
        """Evaluate (rank 0), tell the stop policy how long it took (a plan waits for it, or is
        checked by it), and save last.pt with the plan; returns why to stop, if anything says so."""
        s, world = self.state, self.world
        started, compete = time.monotonic(), s.step % self.tc.eval_every == 0 or reason is not None
        if world.is_main:
            self.metrics = self._evaluate(bar, lr, since_eval, metrics_file, compete)
        evaluation_s = time.monotonic() - started
        reason = policy.after_evaluation(s.step, s.bad_evals, self.elapsed(), evaluation_s) or reason
        self._plan_dropout()  # the plan may have turned it on
        if world.is_main:  # after the metrics row (a resume trims what last.pt does not cover)
            save_checkpoint(self.cfg.run_dir / LAST, self.checkpoint_state())
        return reason

    def _log(self, bar, lr: float, loss, grad_norm, since_log: Meter, pace: Pace, policy: StopPolicy) -> None:
        s = self.state
        self.board.scalars(
            "train",
            {
                "loss": loss.item(),
                "lr": lr,
                "tokens_per_s": since_log.tokens_per_s(),
                **({"grad_norm": grad_norm.item()} if grad_norm is not None else {}),
            },
            s.step,
        )
        bar.set_postfix(
            loss=f"{loss.item():.4f}", lr=f"{lr:.2e}", tok_s=f"{since_log.tokens_per_s():,.0f}", refresh=False
        )
        if s.plan is not None or policy.budget_s == float("inf"):
            bar.total = policy.total_steps()
        else:  # before the plan: the pace so far says where the budget will end
            left = policy.seconds_left(self.elapsed())
            bar.total = expected_last_step(s.step, pace.seconds_per_step(), left, self.tc.max_steps)
        bar.update(s.step - bar.n)
        since_log.reset()

    def _evaluate(self, bar, lr: float, since_eval: Meter, metrics_file, compete: bool) -> dict:
        metrics, improved = self.evaluate_and_save(lr, since_eval, metrics_file, compete)
        self.board.scalars("valid", {k: v for k, v in metrics.items() if k.startswith("val_")}, self.state.step)
        shown = "  ".join(f"{k} {v:.4f}" for k, v in metrics.items() if k.startswith(("train_", "val_")))
        bar.write(f"step {self.state.step}: {shown}{'  (best)' if improved else ''}", file=sys.stderr)
        bar.update(self.state.step - bar.n)
        return metrics

    def _interrupted(self, bar) -> bool:
        if self.world.is_main:
            save_checkpoint(self.cfg.run_dir / LAST, self.checkpoint_state())
        bar.close()
        self.log(
            f"interrupted at step {self.state.step}; saved {self.cfg.run_dir / LAST}; continue with --resume",
            file=sys.stderr,
        )
        return True
