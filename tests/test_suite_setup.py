"""The test suite's own setup: how it shares the machine when pytest-xdist runs it in several processes."""

import os
import subprocess
import sys

import torch
from helpers import available_cores, share_the_cores_among_workers


def test_xdist_workers_each_take_a_share_of_the_cores(monkeypatch):
    threads = torch.get_num_threads()
    cores = available_cores()
    try:
        monkeypatch.setenv("PYTEST_XDIST_WORKER_COUNT", "1")
        torch.set_num_threads(cores)
        share_the_cores_among_workers()
        assert torch.get_num_threads() == cores  # one process keeps every core

        monkeypatch.setenv("PYTEST_XDIST_WORKER_COUNT", "2")
        monkeypatch.setenv("OMP_NUM_THREADS", "64")
        share_the_cores_among_workers()
        assert torch.get_num_threads() == max(1, cores // 2)
        assert os.environ["OMP_NUM_THREADS"] == str(max(1, cores // 2))  # what the commands tests start inherit
    finally:
        torch.set_num_threads(threads)


def test_commands_the_tests_start_keep_their_temporary_files_in_the_tests_folder(own_temporary_folder):
    child = subprocess.run(
        [sys.executable, "-c", "import tempfile; print(tempfile.mkdtemp(prefix='probe_'))"],
        capture_output=True,
        text=True,
        check=True,
    )
    made = child.stdout.strip()
    assert os.path.dirname(made) == str(own_temporary_folder) and os.path.isdir(made)
