"""The memory allocator of mt's commands: tcmalloc where the system has it, else the C library's.

PyTorch allocates and frees memory for nearly every operation it runs. tcmalloc's per-thread
caches serve those requests faster than glibc's malloc and fragment less, which PyTorch's own CPU
tuning guide recommends it for. A process's allocator is fixed when it starts, so a command started
as `python -m mt.NAME` (or an `mt-NAME` script) runs itself again at once, before importing
PyTorch, with tcmalloc in LD_PRELOAD, as PyTorch's CPU launcher (`torch.backends.xeon.run_cpu`)
starts its programs. Where no tcmalloc is installed (Debian and Ubuntu: `apt-get install
libtcmalloc-minimal4`), off Linux, or with MT_ALLOCATOR=system, the command runs as it was started.
Code that imports mt into a program of its own is never affected.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import sys

ENV = "MT_ALLOCATOR"  # auto (the default): tcmalloc where installed; tcmalloc: required; system: never
CHOICES = ("auto", "tcmalloc", "system")
RESTARTED = "MT_ALLOCATOR_RESTARTED"  # set in the second run: it never restarts again, whatever happened
LIBRARIES = ("tcmalloc_minimal", "tcmalloc")  # gperftools' allocator alone, or with its profilers
INSTALL = "Debian and Ubuntu: apt-get install libtcmalloc-minimal4"
INTERPRETER_OPTIONS_WITH_VALUE = ("-X", "-W", "-Q")
RELEASE = "MallocExtension_ReleaseFreeMemory"  # a tcmalloc function: its presence says tcmalloc runs here


def active() -> str:
    """'tcmalloc' when this process allocates with tcmalloc, else 'system'."""
    return "tcmalloc" if _tcmalloc_function(RELEASE) is not None else "system"


def release_free_memory() -> bool:
    """Have tcmalloc return its free pages to the system at once (it otherwise returns them a little
    at a time); False where the process does not run on tcmalloc."""
    release = _tcmalloc_function(RELEASE)
    if release is None:
        return False
    release()
    return True


def _tcmalloc_function(name: str):
    try:
        return getattr(ctypes.CDLL(None), name)  # the process's own symbols, preloaded libraries included
    except (OSError, AttributeError):
        return None


def tcmalloc_library() -> str | None:
    """The installed tcmalloc library's name as the dynamic loader finds it, or None."""
    for name in LIBRARIES:
        found = ctypes.util.find_library(name)
        if found:
            return found
    return None


def started_as_command(argv: list[str]) -> bool:
    """True for an interpreter command line that runs one of mt's commands: `python [options] -m
    mt.NAME ...` or `python [options] .../mt-NAME ...`; False for anything else (`-m pytest`,
    `-m pdb -m mt.train`, `-c`, a user's script)."""
    args = argv[1:]
    while args and args[0].startswith("-") and args[0] != "-m":
        if args[0] == "-c":
            return False
        args = args[2:] if args[0] in INTERPRETER_OPTIONS_WITH_VALUE else args[1:]
    if args[:1] == ["-m"]:
        return len(args) > 1 and args[1].startswith("mt.")
    return bool(args) and os.path.basename(args[0]).startswith("mt-")


def restart_plan(environ: dict, library: str | None, running: str) -> dict | None:
    """The environment to run this program again with, so that it allocates with tcmalloc, or None
    to go on as it is. Raises SystemExit with a one-line error for an MT_ALLOCATOR typo, or when
    MT_ALLOCATOR=tcmalloc asks for a library the system lacks."""
    choice = environ.get(ENV, "auto")
    if choice not in CHOICES:
        raise SystemExit(f"error: {ENV}={choice!r}: choose one of {', '.join(CHOICES)}")
    if choice == "system" or running == "tcmalloc" or RESTARTED in environ:
        return None
    if library is None:
        if choice == "tcmalloc":
            raise SystemExit(f"error: {ENV}=tcmalloc, but no tcmalloc is installed ({INSTALL})")
        return None
    return tcmalloc_environment(environ, library)


def tcmalloc_environment(environ: dict, library: str) -> dict:
    """`environ` for a process that starts on tcmalloc (`library`), and that no mt command restarts."""
    preload = " ".join(filter(None, [library, environ.get("LD_PRELOAD")]))
    # tcmalloc reports every allocation over 1 GB on stderr by default; a large corpus makes them
    quiet = {"TCMALLOC_LARGE_ALLOC_REPORT_THRESHOLD": str(2**62)}
    return quiet | dict(environ) | {"LD_PRELOAD": preload, RESTARTED: "1"}


def use_tcmalloc() -> None:
    """Run this process again on tcmalloc if it is one of mt's commands and `restart_plan` says so;
    otherwise return."""
    argv = getattr(sys, "orig_argv", None)
    if sys.platform != "linux" or not argv or not started_as_command(argv) or os.environ.get(ENV) == "system":
        return  # the common library import returns here, before looking for a library
    restart_script_on_tcmalloc()


def restart_script_on_tcmalloc() -> None:
    """Run this program again on tcmalloc where `restart_plan` says so (a benchmark script that runs
    mt in its own process calls it, to run as mt's commands do); otherwise return."""
    if sys.platform != "linux":
        return
    plan = restart_plan(dict(os.environ), tcmalloc_library(), active())
    if plan is not None:
        _run_again(sys.orig_argv, plan)


def _run_again(argv: list[str], environ: dict) -> None:
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(sys.executable, argv, environ)


def report() -> str:
    """The allocator this process runs on, and why where it is not tcmalloc (for `python -m mt.hardware`)."""
    if active() == "tcmalloc":
        return "tcmalloc"
    if os.environ.get(ENV) == "system":
        return f"system ({ENV}=system)"
    return f"system (no tcmalloc installed; {INSTALL})" if tcmalloc_library() is None else "system"
