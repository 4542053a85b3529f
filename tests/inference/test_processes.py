"""Decoding in worker processes (mt/inference/processes.py, --processes): the outputs of worker
threads, errors raised where they can be read, nothing left running after an error, a dead process
or Ctrl-C, and a server's batches decoded side by side. Each test that spawns processes waits for
them to import PyTorch: a few seconds apiece."""

import asyncio
import contextlib
import functools
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from helpers import children, cli, running

from mt.decode_options import DecodeOptions
from mt.errors import UserError
from mt.inference.processes import DecodingProcesses, ProcessDied
from mt.inference.translator import Translator


def loader(run_dir):
    """What each decoding process calls to load its model."""
    return functools.partial(Translator.load, run_dir, "cpu", None)


SOURCES = ["le chat noir", "le chien blanc", "le homme rouge", "le petit enfant", "le femme noir", "un chat", ""]


def scored(found):
    return [[(h.ids, h.score) for h in n] for n in found]


def test_processes_give_the_outputs_of_one_thread_workers(run_dir):
    """A process decodes a batch on one thread, as a worker thread does when the threads are shared
    out one each: the same hypotheses and scores to the last bit. Sampling stays in this process."""
    translator = Translator.load(run_dir)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        options = [DecodeOptions(beam=1), DecodeOptions(beam=3, n_best=2)]
        in_threads = [
            scored(translator.translate(SOURCES, o, batch_size=2, workers=2, hypotheses=True)) for o in options
        ]
    finally:
        torch.set_num_threads(threads)
    sample = DecodeOptions(beam=1, temperature=1.0, seed=5)
    drawn = translator.translate(SOURCES, sample, batch_size=2)
    translator.start_processes(2)
    processes = translator.processes.processes
    try:
        assert len(processes) == 2 and all(p.is_alive() for p in processes)
        for o, expected in zip(options, in_threads):
            assert scored(translator.translate(SOURCES, o, batch_size=2, hypotheses=True)) == expected
        assert translator.translate(SOURCES, sample, batch_size=2) == drawn
        assert translator.translate([]) == []
    finally:
        translator.close()
    assert translator.processes is None and not any(p.is_alive() for p in processes)


def test_a_failing_batch_raises_its_error_and_the_processes_go_on(run_dir):
    """The failing batch is the costliest, so it goes first and the other process still holds a
    batch when the error comes: the next call must not take that batch's result for its own."""
    options = DecodeOptions(beam=2)
    good, other = torch.tensor([[5, 6, 3], [7, 3, 0]]), torch.tensor([[8, 3]])
    bad = torch.tensor([[10_000, 5, 6, 7, 3], [5, 3, 0, 0, 0]])  # no such token: the embedding fails
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        ids, scores, logprobs = Translator.load(run_dir).search_batch(options, other)
    finally:
        torch.set_num_threads(threads)
    pool = DecodingProcesses(loader(run_dir), 2)
    try:
        with pytest.raises(RuntimeError, match="a decoding process failed: IndexError: index out of range"):
            pool.map(options, [good] * 20 + [bad])
        assert pool.map(options, [other, other]) == [(ids, scores.tolist(), logprobs)] * 2
        assert all(p.is_alive() for p in pool.processes) and pool.map(options, []) == []
    finally:
        pool.close()
    with pytest.raises(ProcessDied, match="the decoding processes were stopped"):
        pool.map(options, [good])


def test_a_process_that_dies_is_reported_and_the_translator_goes_on_in_threads(run_dir):
    translator = Translator.load(run_dir, quantize="int8")
    expected = translator.translate(SOURCES, beam=2, batch_size=1)
    translator.start_processes(2)
    processes = translator.processes.processes
    victim = processes[1]
    os.kill(victim.pid, signal.SIGKILL)
    victim.join(10)
    start = time.monotonic()
    with pytest.raises(ProcessDied, match=r"decoding process mt-decode-1 died \(exit code -9\)"):
        translator.translate(SOURCES * 100, beam=2, batch_size=1)
    assert time.monotonic() - start < 30
    assert translator.processes is None and not any(p.is_alive() for p in processes)
    assert translator.translate(SOURCES, beam=2, batch_size=1) == expected


PARENT = """
import os, sys, time
import functools
from mt.inference.processes import DecodingProcesses, ProcessDied
from mt.inference.translator import Translator
pool = DecodingProcesses(functools.partial(Translator.load, sys.argv[1], "cpu", None), 2)
print(*(p.pid for p in pool.processes), flush=True)
time.sleep(600)
"""


def test_processes_end_when_their_parent_is_killed(run_dir):
    """SIGKILL gives the parent no chance to stop them: they notice it has gone, and end."""
    parent = subprocess.Popen([sys.executable, "-c", PARENT, str(run_dir)], stdout=subprocess.PIPE, text=True)
    pids = [int(pid) for pid in parent.stdout.readline().split()]
    assert len(pids) == 2 and all(running(pid) for pid in pids)
    parent.kill()
    parent.wait()
    deadline = time.monotonic() + 30
    while any(running(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(running(pid) for pid in pids)


def test_a_model_the_processes_cannot_load_is_one_line_at_the_start(tmp_path):
    with pytest.raises(UserError, match=f"a decoding process could not load the model: no trained model in {tmp_path}"):
        DecodingProcesses(loader(tmp_path), 1)


UNGUARDED = """
import sys
from mt.inference.translator import Translator
Translator.load(sys.argv[1]).start_processes(1)
"""


def test_a_script_without_the_main_guard_is_told_what_to_add(run_dir, tmp_path):
    """A spawned process imports the script that started it; unguarded, that script would start
    processes again from there. The process dies, and the error says why."""
    script = tmp_path / "unguarded.py"
    script.write_text(UNGUARDED)
    result = subprocess.run([sys.executable, str(script), str(run_dir)], capture_output=True, text=True, timeout=120)
    assert result.returncode == 1
    assert (
        result.stderr.strip()
        .splitlines()[-1]
        .endswith(
            "while starting (its error is above). A script that starts decoding processes must do so under "
            '`if __name__ == "__main__":`'
        )
    ), result.stderr[-2000:]


def test_the_flag_is_checked_and_translates_like_threads(run_dir, tmp_path):
    source = tmp_path / "in.fr"
    source.write_text("\n".join(SOURCES * 5) + "\n")
    args = ["--model", str(run_dir), "--input", str(source), "--batch-size", "4"]
    threads, processes = cli("mt.translate", *args), cli("mt.translate", *args, "--processes", "2")
    assert threads.returncode == processes.returncode == 0, processes.stderr
    assert processes.stdout == threads.stdout and len(processes.stdout.splitlines()) == len(SOURCES) * 5
    for flags, words in (
        (["--processes", "-1"], "--processes must be 0 or more, got -1"),
        (["--processes", "2", "--engine", "ctranslate2"], "--processes is for --engine mt"),
    ):
        bad = cli("mt.translate", *args, *flags)
        assert bad.returncode == 2 and bad.stderr.strip().startswith(f"error: {words}"), bad.stderr


def loading_pytorch(pid: int) -> bool:
    """PyTorch's library is mapped into the process: it is importing PyTorch, or has imported it."""
    try:
        return "libtorch" in Path(f"/proc/{pid}/maps").read_text()
    except OSError:
        return False


# A command run from a terminal starts with Ctrl-C's default action. One started by a job in the
# background of a non-interactive shell (`bash .ci/run &`) inherits SIGINT ignored, Python keeps it
# ignored, and Ctrl-C then does nothing: both Ctrl-C tests waited 60 s in such a run. So the command
# starts through this, which gives SIGINT its default and becomes the command (the same process).
AS_FROM_A_TERMINAL = [
    sys.executable,
    "-c",
    "import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); "
    "os.execv(sys.executable, [sys.executable, *sys.argv[1:]])",
]


def translating_in_processes(run_dir, tmp_path, repeats: int, **popen) -> subprocess.Popen:
    """`mt.translate --processes 2` started on a long file (SOURCES repeated), as a terminal starts
    a command: Ctrl-C's default action, and a process group of its own."""
    source = tmp_path / "long.fr"
    source.write_text("\n".join(SOURCES[:-1] * repeats) + "\n")
    command = [*AS_FROM_A_TERMINAL, "-m", "mt.translate", "--model", str(run_dir), "--input", str(source)]
    return subprocess.Popen(
        [*command, "--processes", "2", "--output", str(tmp_path / "out.en")], start_new_session=True, **popen
    )


def blocked_signals(pid: int) -> set[int]:
    """The signals a process holds back (Linux /proc: SigBlk, a hexadecimal bit mask)."""
    status = Path(f"/proc/{pid}/status").read_text()
    mask = int(next(line for line in status.splitlines() if line.startswith("SigBlk:")).split()[1], 16)
    return {n for n in range(1, 65) if mask >> (n - 1) & 1}


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads the processes' signal masks in Linux's /proc")
def test_every_decoding_process_starts_with_ctrl_c_held_back(run_dir, tmp_path):
    """The first one too: multiprocessing starts its resource tracker with the first process and then
    unblocks SIGINT and SIGTERM, which left that process interruptible while it imported PyTorch.
    Each mask is read before the process has loaded PyTorch, so before it sets the signals aside."""
    proc = translating_in_processes(run_dir, tmp_path, 1000, stderr=subprocess.DEVNULL)
    masks: dict[int, set[int]] = {}
    try:
        deadline = time.monotonic() + 120
        while len(masks) < 2 and proc.poll() is None and time.monotonic() < deadline:
            for pid in children(proc.pid):
                with contextlib.suppress(OSError, StopIteration):
                    if pid in masks or b"spawn_main" not in Path(f"/proc/{pid}/cmdline").read_bytes():
                        continue  # not yet a decoding process (forked, not yet started anew), or the tracker
                    blocked = blocked_signals(pid)
                    if not loading_pytorch(pid):  # read after the mask: the mask is from before the import
                        masks[pid] = blocked
            time.sleep(0.005)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    assert len(masks) == 2, f"the two decoding processes were not both seen before they loaded PyTorch: {masks}"
    for pid, blocked in masks.items():
        assert {signal.SIGINT, signal.SIGTERM} <= blocked, (pid, sorted(blocked))


def stopped_within(proc: subprocess.Popen, seconds: float) -> str:
    """The command's stderr once it has ended. One still running after `seconds` fails the test with
    where its threads stood (SIGABRT, with PYTHONFAULTHANDLER set) and what its processes were doing,
    and is killed with its whole group, so a hang leaves no load behind for the tests after it."""
    try:
        return proc.communicate(timeout=seconds)[1]
    except subprocess.TimeoutExpired:
        group = [proc.pid, *children(proc.pid)]
        states = {pid: Path(f"/proc/{pid}/stat").read_text().split(") ")[-1][:1] for pid in group if running(pid)}
        os.kill(proc.pid, signal.SIGABRT)
        try:
            stderr = proc.communicate(timeout=10)[1]
        except subprocess.TimeoutExpired:
            stderr = "(stderr still open: a child holds it)"
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        pytest.fail(f"still running {seconds} s after Ctrl-C; process states {states}; stderr:\n{stderr[-6000:]}")


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="finds the decoding processes in Linux's /proc")
@pytest.mark.parametrize("after", [None, 3.0], ids=["while-they-import-pytorch", "later"])
def test_ctrl_c_stops_the_command_and_its_processes(run_dir, tmp_path, after):
    """Ctrl-C reaches the command and its processes alike (the terminal's process group): the
    processes ignore it, even while they import PyTorch, the command stops its call and exits 130
    with one line, and nothing is left running."""
    proc = translating_in_processes(
        run_dir,
        tmp_path,
        40_000,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONFAULTHANDLER": "1"},  # SIGABRT prints every thread's stack
    )
    deadline = time.monotonic() + 120
    while len(children(proc.pid)) < 3 and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.1)  # two decoding processes and multiprocessing's resource tracker
    spawned = children(proc.pid)
    assert len(spawned) >= 3, f"the decoding processes never started: {proc.poll()}"
    if after is None:  # the first moment PyTorch is being loaded in one of them, long before it is ready
        while not any(loading_pytorch(pid) for pid in spawned) and time.monotonic() < deadline:
            time.sleep(0.01)
    else:
        time.sleep(after)
    os.killpg(proc.pid, signal.SIGINT)
    stderr = stopped_within(proc, 60)
    assert proc.returncode == 130 and stderr.strip().splitlines()[-1] == "interrupted", stderr[-2000:]
    assert "Traceback" not in stderr, stderr[-2000:]
    time.sleep(1)
    assert not [pid for pid in spawned if running(pid)]
    assert not (tmp_path / "out.en").exists()  # nothing half-written


class SideBySide:
    """A translator with two decoding processes whose calls each wait for another call to arrive:
    decoded one at a time, the first would wait until the barrier gives up."""

    def __init__(self, concurrency: int, timeout: float):
        self.processes = SimpleNamespace(workers=[None] * concurrency)
        self.tokenizer = SimpleNamespace(encode_batch=lambda sentences: [[1, 2] for _ in sentences])
        self.barrier = threading.Barrier(2, timeout=timeout)

    def translate(self, sentences, options, batch_size, hypotheses):
        self.barrier.wait()
        return [[s.upper()] for s in sentences]


def test_the_server_batches_decode_side_by_side_with_processes():
    from mt.serving.request_batcher import Batcher

    async def two_requests(translator):
        batcher = Batcher(translator, max_wait_ms=0)
        batcher.start()
        try:
            first = asyncio.ensure_future(batcher.translate(["un"], DecodeOptions(beam=1)))
            await asyncio.sleep(0.2)  # the first is gathered and decoding before the second arrives
            second = asyncio.ensure_future(batcher.translate(["deux"], DecodeOptions(beam=2)))
            return await asyncio.gather(first, second, return_exceptions=True)
        finally:
            await batcher.stop()

    assert asyncio.run(two_requests(SideBySide(2, timeout=20))) == [[["UN"]], [["DEUX"]]]
    one_at_a_time = asyncio.run(two_requests(SideBySide(1, timeout=1)))  # the first waits in vain
    assert all(isinstance(answer, threading.BrokenBarrierError) for answer in one_at_a_time)
