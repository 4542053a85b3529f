"""Decode batches in worker processes, one thread each, started once and kept.

Two decoding threads of one process (mt/inference/workers.py) take turns at Python's lock between
the hundreds of small operations of every step; two processes, each with a copy of the model, do
not (docs/results.md, "Decoding in worker processes"). A process costs its start (importing PyTorch
and loading the model: one to two seconds) and its own memory, so they pay where they live long: a
server, a long input file, a benchmark timed after loading. Each process decodes a batch exactly as
a one-thread worker would, so the outputs are those of `Translator.translate` with workers.
"""

from __future__ import annotations

import atexit
import multiprocessing
import queue
import signal
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from mt.errors import UserError

POLL_SECONDS = 0.5  # how often a wait checks that the other side is still alive


# What a spawned process most often dies of at its start: it imports the script that started it,
# and a script without this guard starts processes again from there.
GUARD = 'A script that starts decoding processes must do so under `if __name__ == "__main__":`'


class ProcessDied(RuntimeError):
    """A decoding process ended while it had work: out of memory, or killed."""


def _decode_forever(run_dirs, quantize: str | None, tasks, results, current) -> None:
    """A worker process: load the model, say so, then decode (call, index, options, ids) tasks
    until the parent stops it or is gone; a task of an abandoned call (not current.value) is skipped."""
    # Ctrl-C, or a service manager's SIGTERM to the whole group, is the parent's to handle: it
    # finishes or abandons its work and then kills these processes (close).
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    torch.set_num_threads(1)
    try:
        from mt.inference.translator import Translator

        translator = Translator.load(run_dirs, "cpu", quantize)
    except BaseException as e:  # noqa: BLE001 - any failure to load is the parent's to report
        results.put((None, None, _failure(e)))
        return
    results.put((None, None, None))
    parent = multiprocessing.parent_process()
    while True:
        try:
            call, index, options, ids = tasks.get(timeout=POLL_SECONDS)
        except queue.Empty:
            if not parent.is_alive():  # killed without a chance to stop us
                return
            continue
        if call != current.value:
            continue
        try:
            outs, scores = translator.search_batch(options, torch.tensor(ids))
            results.put((call, index, (outs, scores.tolist())))
        except Exception as e:  # noqa: BLE001 - the parent raises it
            results.put((call, index, _failure(e)))


@dataclass(frozen=True)
class _Failure:
    """An exception raised in a process, as the parent raises it again."""

    message: str
    user_error: bool  # a UserError: one line for the user, not a bug

    def throw(self, what: str):
        raise (UserError if self.user_error else RuntimeError)(f"{what}: {self.message}")


def _failure(e: BaseException) -> _Failure:
    user_error = isinstance(e, UserError)
    return _Failure(str(e) if user_error else f"{type(e).__name__}: {e}", user_error)


class DecodingProcesses:
    """`count` spawned processes, each holding the model(s) of `run_dirs` on one thread."""

    def __init__(self, run_dirs, quantize: str | None, count: int):
        context = multiprocessing.get_context("spawn")  # forking a process that has run PyTorch is unsafe
        self._tasks, self._results = context.Queue(), context.Queue()
        self._tasks.cancel_join_thread()  # at exit, never wait to hand tasks to processes that are gone
        self._current = context.Value("l", 0)
        self.processes = [
            context.Process(
                target=_decode_forever,
                args=(run_dirs, quantize, self._tasks, self._results, self._current),
                name=f"mt-decode-{i}",
                daemon=True,
            )
            for i in range(count)
        ]
        atexit.register(self.close)  # before multiprocessing's own exit handler, which would wait on them
        for process in self.processes:
            process.start()
        try:
            for _ in self.processes:
                _, _, failure = self._next_result()
                if failure is not None:
                    failure.throw("a decoding process could not load the model")
        except BaseException:
            self.close()
            raise

    def map(self, options, batches: Sequence[torch.Tensor]) -> list:
        """Each batch's (n-best ids, scores list), in order; the costliest batches go first, so
        that the processes finish together. An error or Ctrl-C abandons the batches not yet started."""
        with self._current.get_lock():
            self._current.value += 1
            call = self._current.value
        try:
            self._check_alive()
            for i in sorted(range(len(batches)), key=lambda i: -batches[i].numel()):
                self._tasks.put((call, i, options, batches[i].tolist()))
            found: list = [None] * len(batches)
            for _ in batches:
                _, index, value = self._next_result(call)
                if isinstance(value, _Failure):
                    value.throw("a decoding process failed")
                found[index] = value
            return found
        except BaseException:
            with self._current.get_lock():
                self._current.value += 1  # the processes skip what is left of this call
            raise

    def _next_result(self, call: int | None = None) -> tuple:
        """The next result of `call` (None: a process's start), discarding those of abandoned
        calls; an error if a process has died meanwhile, instead of waiting for ever."""
        while True:
            try:
                result = self._results.get(timeout=POLL_SECONDS)
            except queue.Empty:
                self._check_alive(starting=call is None)
                continue
            if result[0] == call:
                return result

    def _check_alive(self, starting: bool = False) -> None:
        dead = [p for p in self.processes if not p.is_alive()]
        if not dead:
            return
        what = f"decoding process {dead[0].name} died (exit code {dead[0].exitcode})"
        if starting:
            raise UserError(f"{what} while starting (its error is above). {GUARD}")
        raise ProcessDied(f"{what}; out of memory, or killed?")

    def close(self) -> None:
        """Stop the processes at once (they ignore SIGTERM; work they hold is abandoned)."""
        started = [p for p in self.processes if p.pid is not None]
        for process in started:
            process.kill()
        for process in started:
            process.join()
        if self.processes:
            self._tasks.close()
            self._results.close()
        self.processes = []
        atexit.unregister(self.close)
