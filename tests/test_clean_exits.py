"""Every way a training ends lets go of what it holds: the prefetch thread is joined, the process
group destroyed and the run lock released, and no process aborts on the way out. One process
in-process (the threads and the lock can be looked at), two under torchrun (the exit code and the
output are what a job scheduler sees)."""

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from helpers import TINY_MODEL, synthetic_corpus

from mt import train as train_module
from mt.training.run_dir import RunLock
from mt.training.trainer import Trainer

REPO = Path(__file__).resolve().parents[1]
LM = [
    "recipes/shakespeare_char.yaml",
    "model.n_layer=1",
    "model.n_head=2",
    "model.d_model=16",
    "data.block_size=16",
    "train.batch_size=4",
    "train.eval_every=4",
    "train.eval_batches=2",
    "train.warmup_steps=2",
    "train.device=cpu",
    "train.precision=fp32",
    "train.log_every=1",
    "train.max_minutes=null",
]
# How each path is brought about: recipe overrides, and whether a step raises.
PATHS = {
    "done": ["train.max_steps=8"],
    "budget": ["train.max_steps=100000", "train.max_minutes=0.002"],
    "user error": ["data.corpus={bad_utf8}", "train.max_steps=8"],
    "exception": ["train.max_steps=8"],
}


def translation_args(tmp_path, *extra):
    spec = synthetic_corpus(tmp_path, 200)
    return [
        "recipes/multi30k.yaml",
        *TINY_MODEL,
        f"data.train=[{spec}]",
        f"data.valid={spec}",
        "train.report=false",
        "tokenizer.kind=char",
        "train.eval_every=4",
        "train.max_minutes=null",
        f"out_dir={tmp_path / 'run'}",
        *extra,
    ]


def no_prefetch_thread_left():
    return not [t for t in threading.enumerate() if t.name == "mt-prefetch" and t.is_alive()]


def lock_is_free(run_dir):
    RunLock(run_dir).acquire().release()  # raises UserError while another holder has it
    return True


def failing_step(monkeypatch, at_step=3):
    original = Trainer.train_step

    def train_step(self, batches):
        if self.state.step == at_step:
            raise RuntimeError("a failure in the middle of training")
        return original(self, batches)

    monkeypatch.setattr(Trainer, "train_step", train_step)


@pytest.mark.parametrize("path", ["done", "budget", "interrupted", "user error", "exception"])
def test_one_process_lets_go_of_threads_and_lock_on_every_path(path, tmp_path, monkeypatch, capsys):
    bad = tmp_path / "bad.fr"
    bad.write_bytes(b"le chat\n\xff\xfe\n")
    extra = {
        "done": ["train.max_steps=8"],
        "budget": ["train.max_steps=100000", "train.max_minutes=0.002"],
        "interrupted": ["train.max_steps=100000"],
        "exception": ["train.max_steps=8"],
        "user error": [f"data.train=[{{path: text, data_files: {{fr: {bad}, en: {bad}}}}}]"],
    }[path]
    if path == "exception":
        failing_step(monkeypatch)
    if path == "interrupted":
        original = Trainer.train_step

        def interrupting_step(self, batches):
            if self.state.step == 5:
                os.kill(os.getpid(), signal.SIGINT)
            return original(self, batches)

        monkeypatch.setattr(Trainer, "train_step", interrupting_step)
    args = translation_args(tmp_path, *extra)
    if path == "exception":
        with pytest.raises(RuntimeError, match="middle of training"):
            train_module.main(args)
    elif path in ("interrupted", "user error"):
        with pytest.raises(SystemExit) as stop:
            train_module.main(args)
        assert stop.value.code == {"interrupted": 130, "user error": 2}[path]
    else:
        train_module.main(args)
    assert no_prefetch_thread_left()
    assert lock_is_free(tmp_path / "run")
    if path == "user error":
        assert "invalid UTF-8" in capsys.readouterr().err
    if path in ("done", "budget", "interrupted"):
        assert (tmp_path / "run" / "last.pt").is_file()


def torchrun(args, env, **kwargs):
    return subprocess.Popen(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", *args],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        **kwargs,
    )


CRASHING_WORKER = """
import sys
from mt.train import main
from mt.training.trainer import Trainer
original = Trainer.train_step
def train_step(self, batches):
    if self.state.step == 3 and self.world.rank == int(sys.argv[1]):
        raise RuntimeError("a failure in the middle of training")
    return original(self, batches)
Trainer.train_step = train_step
main(sys.argv[2:])
"""


@pytest.mark.slow
@pytest.mark.parametrize("path", ["done", "budget", "interrupted", "user error", "exception"])
def test_two_processes_end_cleanly_on_every_path(path, toy_text_corpus, tmp_path):
    bad = tmp_path / "bad.txt"
    bad.write_bytes(b"some text\n\xff\xfe\n" * 50)
    out = tmp_path / "run"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}
    overrides = [o.format(bad_utf8=bad) for o in PATHS.get(path, ["train.max_steps=100000"])]
    args = [*LM, *overrides, f"out_dir={out}"]
    if path == "exception":
        worker = tmp_path / "crashing_worker.py"
        worker.write_text(CRASHING_WORKER)
        proc = torchrun([str(worker), "1", *args], env)
    else:
        proc = torchrun(["-m", "mt.train", *args], env)
    if path == "interrupted":
        deadline = time.monotonic() + 120
        while not (out / "metrics.jsonl").is_file() or not (out / "metrics.jsonl").read_text():
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
            time.sleep(0.2)
        os.killpg(proc.pid, signal.SIGINT)  # Ctrl-C in a terminal reaches the launcher and every worker
    _, stderr = proc.communicate(timeout=300)
    assert "terminate called" not in stderr and "SIGABRT" not in stderr, stderr[-3000:]
    if path in ("done", "budget"):
        assert proc.returncode == 0, stderr[-3000:]
        assert (out / "last.pt").is_file()
    elif path == "interrupted":
        assert (out / "last.pt").is_file(), stderr[-3000:]
        assert "interrupted at step" in stderr
    elif path == "user error":
        assert proc.returncode != 0
        assert "error:" in stderr and "invalid UTF-8" in stderr, stderr[-3000:]
        assert "stopped: rank 0 could not prepare the run" in stderr  # rank 1 was told, not left waiting
        workers_said = stderr.split("failed (exitcode")[0]  # then torchrun's own report, a traceback of the launcher
        assert "Traceback" not in workers_said, stderr[-3000:]
    else:
        assert proc.returncode != 0
        assert "a failure in the middle of training" in stderr
    assert lock_is_free(out)


@pytest.mark.slow
def test_stress_check_counts_clean_two_process_runs():
    result = subprocess.run(
        [sys.executable, str(REPO / "bench" / "clean_exits.py"), "--runs", "1", "--seed", "1"],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    assert result.returncode == 0, result.stdout + result.stderr[-3000:]
    assert "1 of 1 two-process runs ended cleanly" in result.stdout
