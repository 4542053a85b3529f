"""Decode batches in worker processes, one thread each, started once and kept.

Two decoding threads of one process (mt/cpu/workers.py) take turns at Python's lock between
the hundreds of small operations of every step; two processes, each with a copy of the model, do
not (docs/cpu.md). A process costs its start (importing PyTorch and loading the model: seconds)
and its own memory, so they pay where they live long: a
server, a long input file, a benchmark timed after loading. Each process decodes a batch exactly as
a one-thread worker would, so the outputs are those of `Translator.translate` with workers.

Each process has a pipe of its own and takes one batch at a time. A call borrows the processes
that are free (at least one, waiting for it if need be), so that calls from several threads, such
as a server's, decode side by side.
"""

from __future__ import annotations

import atexit
import contextlib
import multiprocessing
import queue
import signal
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from multiprocessing import resource_tracker
from multiprocessing.connection import wait

import torch

from mt.errors import UserError

POLL_SECONDS = 0.5  # how often a call waiting for a free process checks that they still run

# What a spawned process most often dies of at its start: it imports the script that started it,
# and a script without this guard starts processes again from there.
GUARD = 'A script that starts decoding processes must do so under `if __name__ == "__main__":`'


# Ctrl-C, and a service manager's SIGTERM to the whole group, are the parent's to handle: it
# finishes or abandons its work and then kills the processes (close).
STOPPING = {signal.SIGINT, signal.SIGTERM}


@contextlib.contextmanager
def _stopping_held_back():
    """SIGINT and SIGTERM held back in this thread while it starts a process, which inherits the
    hold: so the process cannot be interrupted while it imports PyTorch, before it has set them
    aside (as multiprocessing starts its resource tracker). Where there are no signal masks, nothing."""
    if not hasattr(signal, "pthread_sigmask"):
        yield
        return
    held = signal.pthread_sigmask(signal.SIG_BLOCK, STOPPING)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, held)


class ProcessDied(RuntimeError):
    """A decoding process ended while it had work: out of memory, or killed."""


def _decode_forever(load: Callable, pipe) -> None:
    """A worker process: load the model (`load()`: a Translator), say so, then answer each (options, ids) batch with its
    result, until the parent stops it or is gone (its end of the pipe closes)."""
    for stopping in STOPPING:  # the parent's to handle (STOPPING), held back since the start
        signal.signal(stopping, signal.SIG_IGN)
    if hasattr(signal, "pthread_sigmask"):
        signal.pthread_sigmask(signal.SIG_UNBLOCK, STOPPING)  # any that came meanwhile are dropped
    torch.set_num_threads(1)
    try:
        try:
            translator = load()
        except BaseException as e:  # noqa: BLE001 - any failure to load is the parent's to report
            pipe.send(_failure(e))
            return
        pipe.send(None)
        while True:
            options, ids = pipe.recv()
            try:
                outs, scores, logprobs = translator.search_batch(options, torch.tensor(ids))
                pipe.send((outs, scores.tolist(), logprobs))
            except Exception as e:  # noqa: BLE001 - the parent raises it
                pipe.send(_failure(e))
    except (EOFError, BrokenPipeError, ConnectionResetError):
        return  # the parent has gone


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


class _Worker:
    """One process and the parent's end of its pipe; `pending` results are owed to an abandoned
    call, and read and dropped before the next call uses the process."""

    def __init__(self, context, load: Callable, name: str):
        self.pipe, self._their_end = context.Pipe()
        self.process = context.Process(target=_decode_forever, args=(load, self._their_end), name=name, daemon=True)
        self.pending = 0

    def start(self) -> None:
        # multiprocessing starts its resource tracker with the first process, and unblocks SIGINT and
        # SIGTERM once it has: started inside the hold, that would leave the first process
        # interruptible while it imports PyTorch. So the tracker starts first, outside it.
        resource_tracker.ensure_running()
        with _stopping_held_back():  # a Ctrl-C meanwhile comes after, when close() knows this process
            self.process.start()
        self._their_end.close()  # theirs alone: when they die, the parent reads EOF instead of waiting

    def send(self, task) -> None:
        try:
            self.pipe.send(task)
        except (BrokenPipeError, ConnectionResetError):
            raise self._died() from None
        self.pending += 1

    def receive(self, starting: bool = False):
        """The process's next message; an error if it dies first."""
        wait([self.pipe, self.process.sentinel])
        try:
            message = self.pipe.recv()
        except (EOFError, ConnectionResetError):
            raise self._died(starting) from None
        if not starting:
            self.pending -= 1
        return message

    def _died(self, starting: bool = False) -> Exception:
        self.process.join()
        what = f"decoding process {self.process.name} died (exit code {self.process.exitcode})"
        if starting:
            return UserError(f"{what} while starting (its error is above). {GUARD}")
        return ProcessDied(f"{what}; out of memory, or killed?")


class DecodingProcesses:
    """`count` spawned processes, each holding what `load` (picklable, no arguments) returns: a
    Translator on one thread."""

    def __init__(self, load: Callable, count: int):
        context = multiprocessing.get_context("spawn")  # forking a process that has run PyTorch is unsafe
        self._free: queue.SimpleQueue[_Worker] = queue.SimpleQueue()
        self.workers: list[_Worker] = []
        atexit.register(self.close)  # before multiprocessing's own exit handler, which would wait on them
        try:
            for i in range(count):  # each known before it starts: close() stops whatever started
                self.workers.append(_Worker(context, load, f"mt-decode-{i}"))
                self.workers[-1].start()
            for worker in self.workers:
                failure = worker.receive(starting=True)
                if failure is not None:
                    failure.throw("a decoding process could not load the model")
                self._free.put(worker)
        except BaseException:
            self.close()
            raise

    @property
    def processes(self) -> list:
        return [w.process for w in self.workers]

    def map(self, options, batches: Sequence[torch.Tensor]) -> list:
        """Each batch's (n-best ids, scores list, token log-probabilities), in order, from the
        processes free now (at least one): the costliest batches first, so that they finish
        together. An error or Ctrl-C abandons the batches not yet sent."""
        if not batches:
            return []
        borrowed = self._borrow(len(batches))
        try:
            return self._decode(borrowed, options, batches)
        finally:
            for worker in borrowed:
                self._free.put(worker)

    def _borrow(self, wanted: int) -> list[_Worker]:
        borrowed = []
        while not borrowed:  # wait for a free process, unless the processes are stopped meanwhile
            if not self.workers:
                raise ProcessDied("the decoding processes were stopped")
            try:
                borrowed.append(self._free.get(timeout=POLL_SECONDS))
            except queue.Empty:
                continue
        while len(borrowed) < wanted:
            try:
                borrowed.append(self._free.get_nowait())
            except queue.Empty:
                break
        try:
            for worker in borrowed:
                while worker.pending:  # a batch of an abandoned call: its result is dropped
                    worker.receive()
        except BaseException:
            for worker in borrowed:
                self._free.put(worker)
            raise
        return borrowed

    def _decode(self, borrowed: list[_Worker], options, batches: Sequence[torch.Tensor]) -> list:
        todo = sorted(range(len(batches)), key=lambda i: -batches[i].numel())[::-1]  # pop() takes the costliest
        found: list = [None] * len(batches)
        doing: dict[int, int] = {}  # worker index in `borrowed` -> batch index

        def give(w: int) -> None:
            if todo:
                doing[w] = todo.pop()
                borrowed[w].send((options, batches[doing[w]].tolist()))

        for w in range(len(borrowed)):
            give(w)
        while doing:
            ready = wait([borrowed[w].pipe for w in doing] + [borrowed[w].process.sentinel for w in doing])
            for w in list(doing):
                if borrowed[w].pipe not in ready and borrowed[w].process.sentinel not in ready:
                    continue
                result = borrowed[w].receive()
                if isinstance(result, _Failure):
                    result.throw("a decoding process failed")
                found[doing.pop(w)] = result
                give(w)
        return found

    def close(self) -> None:
        """Stop the processes at once (they ignore SIGTERM; work they hold is abandoned)."""
        started = [w for w in self.workers if w.process.pid is not None]
        for worker in started:
            worker.process.kill()
        for worker in started:
            worker.process.join()
            worker.pipe.close()
        self.workers = []
        atexit.unregister(self.close)
