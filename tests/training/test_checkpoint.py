"""Checkpoints: safe loading refuses code, damaged files are named, failed writes lose nothing."""

import errno
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from mt.checkpoint import load_checkpoint, save_checkpoint
from mt.errors import UserError
from mt.files import output_file


class Payload:
    """What a crafted checkpoint carries: unpickling it would create a file."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def test_crafted_checkpoint_is_refused_through_the_real_commands(tmp_path):
    marker = tmp_path / "ran"
    run = tmp_path / "run"
    run.mkdir()
    torch.save({"model": {}, "config": Payload(marker)}, run / "best.pt")
    (run / "tokenizer.json").write_text('{"kind": "char", "chars": "abc"}')
    result = subprocess.run(
        [sys.executable, "-m", "mt.translate", "--model", str(run), "bonjour"], capture_output=True, text=True
    )
    assert result.returncode == 2 and not marker.exists()
    assert (
        result.stderr.count("\n") == 1
        and "refusing to load it" in result.stderr
        and str(run / "best.pt") in result.stderr
    )


def test_truncated_checkpoint_is_named_as_damaged(tmp_path):
    path = tmp_path / "best.pt"
    save_checkpoint(path, {"model": {"w": torch.randn(64, 64)}, "step": 3})
    path.write_bytes(path.read_bytes()[:1000])
    with pytest.raises(UserError, match=r"best.pt is damaged or not a checkpoint") as err:
        load_checkpoint(path)
    # the loader's reason in one sentence, without its advice about internal errors cut mid-word
    assert "central directory)" in str(err.value) and "internal" not in str(err.value)


def test_a_failed_write_keeps_the_previous_checkpoint(tmp_path, monkeypatch):
    path = tmp_path / "last.pt"
    save_checkpoint(path, {"step": 1})

    def full_disk(obj, f, *args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(torch, "save", full_disk)
    with pytest.raises(UserError, match=r"could not write .*last.pt \(No space left on device\); the previous file"):
        save_checkpoint(path, {"step": 2})
    monkeypatch.undo()
    assert load_checkpoint(path) == {"step": 1}
    assert [p.name for p in tmp_path.iterdir()] == ["last.pt"]  # no temporary file left behind


def test_a_write_into_a_missing_folder_is_one_line():
    with pytest.raises(UserError, match=r"^could not write /no/such/folder/last.pt \(No such file or directory\)"):
        save_checkpoint(Path("/no/such/folder/last.pt"), {"step": 1})


def test_output_files_are_checked_before_the_work(tmp_path):
    assert output_file(tmp_path / "out.en", "--output") == tmp_path / "out.en"
    with pytest.raises(UserError, match=f"^--output {tmp_path}/missing/out.en: no folder {tmp_path}/missing; create"):
        output_file(tmp_path / "missing" / "out.en", "--output")
    with pytest.raises(UserError, match=f"^--out {tmp_path} is a folder; give a file name$"):
        output_file(tmp_path, "--out")
