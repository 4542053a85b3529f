"""SIGKILL at random moments, then --resume: the final state equals an uninterrupted run's, bit for bit.

The quick version of bench/kill_resume.py (which runs twenty kills or more per task)."""

import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "kill_resume.py"


@pytest.mark.slow
@pytest.mark.parametrize(
    "task, processes, budget",
    [  # a plain one-process language model is the budgeted run's path before its plan
        ("sampling", 1, None),
        ("lm", 2, None),
        ("lm", 1, "0.05"),
        ("finetune", 1, None),
        ("mix", 1, None),
    ],
)
def test_killed_and_resumed_run_matches_an_uninterrupted_one(task, processes, budget):
    """With a budget the killed runs stop by their step plan, and the straight run is given the plan."""
    flags = ["--task", task, "--kills", "2", "--seed", "1", "--processes", str(processes)]
    result = subprocess.run(
        [sys.executable, str(SCRIPT), *flags, *(["--budget", budget] if budget else [])],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stdout + result.stderr[-3000:]
    assert "final state identical" in result.stdout
    landed = int(result.stdout.split(": ", 1)[1].split()[0])
    assert landed >= 1, result.stdout  # at least one kill really interrupted a run
