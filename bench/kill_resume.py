"""Kill training with SIGKILL at random moments, resume it until it finishes, and check that the
final weights, optimizer state, data position and metrics equal an uninterrupted run's, bit for bit.

    python bench/kill_resume.py --task lm --kills 20
    python bench/kill_resume.py --task translation --kills 20
    python bench/kill_resume.py --task sampling --kills 20      # translation with subword sampling
    python bench/kill_resume.py --task finetune --kills 20      # translation from another run (train.init_from)
    python bench/kill_resume.py --task mix --kills 20           # translation from two corpora mixed by weight
    python bench/kill_resume.py --task lm --processes 2         # two torchrun processes (gloo), killed together
    python bench/kill_resume.py --task lm --budget 0.1          # under a time budget, which becomes a step plan

Each kill lands wherever the run happens to be: in a step, in an evaluation, in a checkpoint write,
or while starting up. Tiny models on synthetic data in a temporary folder; CPU, a few minutes.
Exits 1 and says what differs when the runs do not match.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import torch  # noqa: E402

from mt.checkpoint import load_checkpoint  # noqa: E402

COMMON = [
    "train.device=cpu",
    "train.precision=fp32",
    "train.max_minutes=null",
    "train.plan.few_epochs=null",  # steps alone cannot give the straight run the plan's rule (test_plan.py)
    "train.plan.many_epochs=null",
    "train.log_every=1",
    "train.report=false",
    "train.warmup_steps=3",
    "model.dropout=0.1",
    "model.n_head=2",
    "model.d_model=16",
    "data.held_out=false",  # the recipe's test sets are not this harness's data
]
TIMING = {"elapsed_s", "tokens_per_s"}


def task_args(task: str, folder: Path) -> list[str]:
    rng = random.Random(0)
    if task == "lm":
        (folder / "text.txt").write_text("".join(rng.choice("abcdefgh ijklmn\nopqrstu") for _ in range(20_000)))
        return [
            "recipes/shakespeare_char.yaml",
            *COMMON,
            f"data.corpus={folder / 'text.txt'}",
            "model.n_layer=1",
            "data.block_size=16",
            "train.batch_size=8",
            "train.max_steps=40",
            "train.eval_every=3",
            "train.eval_batches=4",
        ]
    words = ["chat", "chien", "noir", "blanc", "petit", "grand", "dort", "mange", "court", "vite"]
    fr = [" ".join(rng.choice(words) for _ in range(rng.randint(2, 9))) for _ in range(300)]
    (folder / "c.fr").write_text("\n".join(fr) + "\n")
    (folder / "c.en").write_text("\n".join(line.upper() for line in fr) + "\n")
    spec = f"{{path: text, data_files: {{fr: {folder / 'c.fr'}, en: {folder / 'c.en'}}}}}"
    train = f"[{spec}]"
    (folder / "v.fr").write_text("\n".join(fr[:40]) + "\n")  # evaluations decode it: kept small, they come often
    (folder / "v.en").write_text("\n".join(line.upper() for line in fr[:40]) + "\n")
    valid = f"{{path: text, data_files: {{fr: {folder / 'v.fr'}, en: {folder / 'v.en'}}}}}"
    if task == "mix":  # two corpora mixed 1:3, the small one cycled
        (folder / "d.fr").write_text("\n".join(fr[:40]) + "\n")
        (folder / "d.en").write_text("\n".join(line.title() for line in fr[:40]) + "\n")
        other = f"{{path: text, data_files: {{fr: {folder / 'd.fr'}, en: {folder / 'd.en'}}}, weight: 3}}"
        train = f"[{spec[:-1]}, weight: 1}}, {other}]"
    tokens = (
        ["tokenizer.kind=sentencepiece", "tokenizer.vocab_size=40", "tokenizer.sampling_alpha=0.3"]
        if task == "sampling"
        else ["tokenizer.kind=char"]
    )
    return [
        "recipes/multi30k.yaml",  # a base without cleaning: the harness's corpora repeat on purpose
        *COMMON,
        *tokens,
        f"data.train={train}",
        f"data.valid={valid}",
        "model.enc_layers=1",
        "model.dec_layers=1",
        "model.d_ff=32",
        "data.max_tokens=200",
        "data.max_len=40",
        "train.max_steps=48",
        "train.eval_every=4",
    ]


def fine_tuning(train_args: list[str], base: Path, env: dict) -> list[str]:
    """Train a short base run, then return arguments that fine-tune it on the same recipe."""
    short = [a for a in train_args if not a.startswith("train.max_steps=")] + ["train.max_steps=20"]
    proc = start(short, base, env)
    if proc.wait() != 0:
        raise SystemExit(f"the base run failed:\n{output(proc)[-2000:]}")
    return [*train_args, f"train.init_from={base}", "train.lr=5e-4"]


def kill_tree(pid: int) -> None:
    """SIGKILL a process and every process under it. torchrun starts its workers in sessions of
    their own, so killing the launcher's group would leave them running; the launcher is stopped
    first so it cannot start another while the tree is listed."""
    os.kill(pid, signal.SIGSTOP)
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            parent = int(stat.read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue  # a process that ended while we looked
        children.setdefault(parent, []).append(int(stat.parent.name))
    todo, tree = [pid], []
    while todo:
        tree.append(todo.pop())
        todo += children.get(tree[-1], [])
    for p in tree:
        try:
            os.kill(p, signal.SIGKILL)
        except ProcessLookupError:
            pass


def start(args: list[str], out: Path, env: dict, processes: int = 1) -> subprocess.Popen:
    """mt.train, or torchrun with `processes` workers, in a session of its own (so a kill reaches them all)."""
    resume = ["--resume"] if (out / "last.pt").is_file() else []
    launcher = ["-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={processes}"] if processes > 1 else []
    log = tempfile.TemporaryFile("w+")  # not a pipe: nobody reads it while the run goes, and a full pipe would block it
    proc = subprocess.Popen(
        [sys.executable, *launcher, "-m", "mt.train", *args, f"out_dir={out}", *resume],
        cwd=REPO,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=log,
        text=True,
        start_new_session=True,
    )
    proc.log = log
    return proc


def output(proc: subprocess.Popen) -> str:
    """What a finished run from `start` printed to stderr."""
    proc.log.seek(0)
    return proc.log.read()


def run_killed(
    args: list[str],
    out: Path,
    kills: int,
    window: tuple[float, float],
    env: dict,
    rng: random.Random,
    processes: int = 1,
) -> tuple[int, int]:
    """Start, kill at a random moment `window` seconds after the start, resume, ... `kills` times;
    then resume to the end. Returns how many kills landed before their run finished, and how many
    of those found a checkpoint already written (the rest stopped a run that would start over)."""
    landed = saved = 0
    for _ in range(kills):
        proc = start(args, out, env, processes)
        try:
            proc.wait(timeout=rng.uniform(*window))
        except subprocess.TimeoutExpired:
            saved += (out / "last.pt").is_file()
            kill_tree(proc.pid)  # the launcher and every worker at once, as a power cut would
            proc.wait()
            landed += 1
            continue
        if proc.returncode != 0:
            raise SystemExit(f"a run between kills failed:\n{output(proc)[-2000:]}")
        if not (out / "last.pt").is_file() or finished(out / "last.pt", args):
            break
    proc = start(args, out, env, processes)
    if proc.wait() != 0:
        raise SystemExit(f"the final resume failed:\n{output(proc)[-2000:]}")
    return landed, saved


def start_up_seconds(args: list[str], out: Path, env: dict, processes: int = 1) -> float:
    """Seconds a run takes to start, take a step, evaluate and save it. A budget counts training
    time alone, so a budgeted run's kills are spread over this and the budget: over the budget
    alone, every kill landed before the first step (imports and data take seconds)."""
    one_step = [a for a in args if not a.startswith("train.max_steps=")] + ["train.max_steps=1"]
    began = time.monotonic()
    proc = start(one_step, out, env, processes)
    if proc.wait() != 0:
        raise SystemExit(f"the one-step run failed:\n{output(proc)[-2000:]}")
    return time.monotonic() - began


def finished(last: Path, args: list[str]) -> bool:
    """Whether the run in `last` has reached its end: max_steps, or the step plan of its time budget."""
    state = load_checkpoint(last)
    plan = state.get("plan") or {}
    return state["step"] >= min(int(_arg(args, "train.max_steps")), plan.get("steps") or 10**9)


def _arg(args: list[str], key: str) -> str:
    return next(a.split("=", 1)[1] for a in args if a.startswith(key + "="))


def differences(a: Path, b: Path) -> list[str]:
    ca, cb = load_checkpoint(a / "last.pt"), load_checkpoint(b / "last.pt")
    found = [f"step {ca['step']} != {cb['step']}"] if ca["step"] != cb["step"] else []
    found += [f"weights {k}" for k in ca["model"] if not torch.equal(ca["model"][k], cb["model"][k])]
    for (ka, va), (_, vb) in zip(ca["optimizer"]["state"].items(), cb["optimizer"]["state"].items()):
        found += [f"optimizer state {ka}.{n}" for n in va if not torch.equal(va[n], vb[n])]
    if ca["task"].keys() != cb["task"].keys() or any(
        not torch.equal(v, cb["task"][k]) if torch.is_tensor(v) else v != cb["task"][k] for k, v in ca["task"].items()
    ):
        found.append("data position / task state")

    def rows(run):
        lines = (run / "metrics.jsonl").read_text().splitlines()
        return [{k: v for k, v in json.loads(line).items() if k not in TIMING} for line in lines]

    if rows(a) != rows(b):
        found.append(f"metrics: {len(rows(a))} rows against {len(rows(b))}, or values differ")
    return found


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--task", choices=["lm", "translation", "sampling", "finetune", "mix"], default="lm")
    p.add_argument("--kills", type=int, default=20)
    p.add_argument("--seed", type=int, default=0, help="where the kills land")
    p.add_argument("--processes", type=int, default=1, help="train with torchrun and this many gloo processes")
    p.add_argument(
        "--budget", type=float, help="train.max_minutes for the killed runs; the uninterrupted one gets its plan"
    )
    args = p.parse_args(argv)
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        env["MT_DATA_DIR"] = str(folder / "data")
        train_args = task_args(args.task, folder)
        if args.task == "finetune":
            train_args = fine_tuning(train_args, folder / "base", env)
        rng = random.Random(args.seed)
        if args.budget:  # killed first: the straight run then gets the plan the budget became, as steps
            budgeted = [a for a in train_args if not a.startswith(("train.max_minutes=", "train.max_steps="))]
            budgeted += [f"train.max_minutes={args.budget}", "train.max_steps=100000"]  # the budget decides
            ready = start_up_seconds(budgeted, folder / "one-step", env, args.processes)
            longest = ready + args.budget * 60
            window = (0.5 * ready, ready + 0.75 * args.budget * 60)
            landed, saved = run_killed(budgeted, folder / "killed", args.kills, window, env, rng, args.processes)
            last = load_checkpoint(folder / "killed" / "last.pt")
            if last["plan"]["anchor"]:  # steps alone cannot give the straight run that schedule
                step = last["plan"]["anchor"][0]
                raise SystemExit(f"the killed runs' pace changed, and they made their plan again at step {step}")
            plan = last["plan"]["steps"]
            train_args = [a for a in train_args if not a.startswith("train.max_steps=")] + [f"train.max_steps={plan}"]
            print(f"the {args.budget} min budget became a plan of {plan} steps")
        began = time.monotonic()
        straight = start(train_args, folder / "straight", env, args.processes)
        if straight.wait() != 0:
            raise SystemExit(f"the uninterrupted run failed:\n{output(straight)[-2000:]}")
        if not args.budget:
            longest = time.monotonic() - began
            window = (0.3, 0.75 * longest)  # often enough before the end
            landed, saved = run_killed(train_args, folder / "killed", args.kills, window, env, rng, args.processes)
        found = differences(folder / "straight", folder / "killed")
    verdict = "identical" if not found else "DIFFERENT: " + "; ".join(found[:5])
    label = args.task + (f" x {args.processes} processes" if args.processes > 1 else "")
    print(
        f"{label}: {landed} of {args.kills} kills landed before their run ended ({saved} after a checkpoint); "
        f"final state {verdict} to the uninterrupted run ({longest:.1f} s)"
    )
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
