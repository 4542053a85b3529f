"""mt's commands restart themselves on tcmalloc where it is installed (mt/cpu/allocator.py)."""

import sys

import pytest
from helpers import cli

from mt.cpu import allocator

PYTHON = "/usr/bin/python3"
LIBRARY = "libtcmalloc_minimal.so.4"
NEEDS_TCMALLOC = pytest.mark.skipif(
    sys.platform != "linux" or allocator.tcmalloc_library() is None,
    reason=f"no tcmalloc on this machine ({allocator.INSTALL}); .ci/run installs it",
)


@pytest.mark.parametrize(
    "argv, command",
    [
        ([PYTHON, "-m", "mt.train", "recipes/multi30k.yaml"], True),
        ([PYTHON, "-u", "-X", "importtime", "-m", "mt.translate", "-m", "x"], True),
        ([PYTHON, "/venv/bin/mt-translate", "bonjour"], True),
        ([PYTHON, "-m", "pytest", "-m", "mt.train"], False),
        ([PYTHON, "-m", "pdb", "-m", "mt.train"], False),
        ([PYTHON, "-c", "import mt", "-m", "mt.train"], False),
        ([PYTHON, "my_script.py", "-m", "mt.train"], False),
        ([PYTHON], False),
    ],
)
def test_only_mt_commands_count_as_commands(argv, command):
    assert allocator.started_as_command(argv) is command


def plan(environ, library=LIBRARY, running="system"):
    return allocator.restart_plan(environ, library, running)


def test_a_command_restarts_with_tcmalloc_preloaded_once():
    env = plan({"LD_PRELOAD": "libother.so", "PATH": "/bin"})
    assert env["LD_PRELOAD"] == f"{LIBRARY} libother.so"  # the user's own preload stays
    assert env["PATH"] == "/bin" and env[allocator.RESTARTED] == "1"
    assert int(env["TCMALLOC_LARGE_ALLOC_REPORT_THRESHOLD"]) > 2**40  # no stderr line per large tensor
    assert plan(env) is None  # the second run goes on, even if the preload did not take
    kept = plan({"TCMALLOC_LARGE_ALLOC_REPORT_THRESHOLD": "1000"})
    assert kept["TCMALLOC_LARGE_ALLOC_REPORT_THRESHOLD"] == "1000"  # a user's own setting wins


def test_no_restart_where_it_cannot_or_should_not_happen():
    assert plan({}, running="tcmalloc") is None
    assert plan({allocator.ENV: "system"}) is None
    assert plan({}, library=None) is None  # auto without the library: the C library's malloc


def test_bad_or_unmet_choices_are_one_line_errors():
    with pytest.raises(SystemExit, match=r"MT_ALLOCATOR='tcmaloc': choose one of auto, tcmalloc, system"):
        plan({allocator.ENV: "tcmaloc"})
    with pytest.raises(SystemExit, match="MT_ALLOCATOR=tcmalloc, but no tcmalloc is installed"):
        plan({allocator.ENV: "tcmalloc"}, library=None)


def test_importing_mt_leaves_a_program_on_its_own_allocator():
    assert not allocator.started_as_command(sys.orig_argv)  # pytest's command line
    before = allocator.active()
    allocator.use_tcmalloc()  # a restart would have replaced this test process
    assert allocator.active() == before
    assert allocator.release_free_memory() is (before == "tcmalloc")


@NEEDS_TCMALLOC
def test_commands_run_on_tcmalloc_unless_told_not_to():
    auto = cli("mt.hardware")
    assert auto.returncode == 0, auto.stderr
    assert "memory allocator: tcmalloc" in auto.stdout
    system = cli("mt.hardware", env={allocator.ENV: "system"})
    assert "memory allocator: system (MT_ALLOCATOR=system)" in system.stdout
    typo = cli("mt.hardware", env={allocator.ENV: "jemalloc"})
    assert typo.returncode == 1 and typo.stderr.strip().splitlines() == [
        "error: MT_ALLOCATOR='jemalloc': choose one of auto, tcmalloc, system"
    ]


@NEEDS_TCMALLOC
def test_the_restarted_command_keeps_its_arguments_input_and_outputs(run_dir):
    """The same translations, scores and exit status from the restarted command as without it."""
    args = ("mt.translate", "--model", str(run_dir), "--beam", "3", "--n-best", "2")
    lines = "un chat noir dort.\n\nle chien court dans le parc.\n"
    on_tcmalloc = cli(*args, stdin=lines)
    on_glibc = cli(*args, stdin=lines, env={allocator.ENV: "system"})
    assert on_tcmalloc.returncode == on_glibc.returncode == 0, on_tcmalloc.stderr + on_glibc.stderr
    assert on_tcmalloc.stdout == on_glibc.stdout and on_tcmalloc.stdout.count("\n") >= 5
