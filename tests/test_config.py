"""Recipes: strict loading, one-line errors, overrides, and every shipped recipe validates."""

import subprocess
import sys
from pathlib import Path

import pytest

from mt.config import ModelConfig, load_config
from mt.errors import UserError

RECIPES = sorted((Path(__file__).resolve().parents[1] / "recipes").glob("*.yaml"))


def write(tmp_path, text):
    path = tmp_path / "r.yaml"
    path.write_text(text)
    return path


BASE = "name: t\ndata:\n  corpus: tinyshakespeare\n"


@pytest.mark.parametrize("recipe", RECIPES, ids=lambda p: p.name)
def test_every_shipped_recipe_validates(recipe, request):
    """A fine-tuning recipe is pointed at a small trained run (its own init_from is made by mt.import)."""
    fine_tunes = "init_from:" in recipe.read_text()
    overrides = [f"train.init_from={request.getfixturevalue('run_dir')}"] if fine_tunes else []
    cfg = load_config(recipe, overrides)
    assert cfg.name == recipe.stem
    assert cfg.data.src_lang != cfg.data.tgt_lang


def test_unknown_key_names_closest_valid_key(tmp_path):
    with pytest.raises(UserError, match=r"unknown key 'model.n_layers' \(did you mean 'model.n_layer'\?\)"):
        load_config(write(tmp_path, BASE + "model:\n  n_layers: 3\n"))


def test_wrong_type_and_missing_field(tmp_path):
    with pytest.raises(UserError, match=r"train.max_steps: expected int, got 'many'"):
        load_config(write(tmp_path, BASE + "train:\n  max_steps: many\n"))
    with pytest.raises(UserError, match=r"model.arch: expected 'gpt' \| 'bigram' \| 'transformer'"):
        load_config(write(tmp_path, BASE + "model:\n  arch: rnn\n"))
    with pytest.raises(UserError, match=r"missing required key 'name'"):
        load_config(write(tmp_path, "data:\n  corpus: tinyshakespeare\n"))


def test_overrides_are_typed_and_validated(tmp_path):
    path = write(tmp_path, BASE)
    assert load_config(path, ["train.lr=3e-4"]).train.lr == 3e-4  # YAML 1.1 alone would read a string
    cfg = load_config(path, ["train.max_steps=7", "model.dropout=0.1", "train.max_minutes=0.5", "out_dir=/tmp/x"])
    assert (cfg.train.max_steps, cfg.model.dropout, cfg.train.max_minutes, str(cfg.run_dir)) == (7, 0.1, 0.5, "/tmp/x")
    with pytest.raises(UserError, match="did you mean 'train.max_steps'"):
        load_config(path, ["train.max_step=7"])
    with pytest.raises(UserError, match="expected int"):
        load_config(path, ["train.max_steps=1.5"])
    with pytest.raises(UserError, match="must look like section.key=value"):
        load_config(path, ["train.max_steps"])


def test_cross_field_checks(tmp_path):
    with pytest.raises(UserError, match="divisible"):
        load_config(write(tmp_path, BASE + "model:\n  d_model: 10\n  n_head: 3\n"))
    with pytest.raises(UserError, match="needs data.corpus"):
        load_config(write(tmp_path, "name: t\n"))


@pytest.mark.parametrize(
    "args, message",
    [
        (["{recipe}", "train.max_stepz=3"], "did you mean 'train.max_steps'"),
        (["{recipe}", "model.n_layer=two"], "model.n_layer: expected int"),
        (["{missing}"], "not found"),
        (["{binary}"], "binary.yaml line 2: invalid UTF-8 (invalid start byte at byte 0); fix or re-encode it"),
        (["{broken}"], "broken.yaml line 2: not valid YAML"),
        (["{listed}"], "a recipe must be a mapping of keys, got list"),
    ],
)
def test_train_cli_config_errors_are_one_line(tmp_path, args, message):
    recipe = write(tmp_path, BASE)
    (tmp_path / "binary.yaml").write_bytes(b"name: x\n\xff\xfe\n")
    (tmp_path / "broken.yaml").write_text("name: x\ntrain: [1\n")
    (tmp_path / "listed.yaml").write_text("- name\n- x\n")
    files = {name: tmp_path / f"{name}.yaml" for name in ("binary", "broken", "listed")}
    argv = [a.format(recipe=recipe, missing=tmp_path / "nope.yaml", **files) for a in args]
    result = subprocess.run([sys.executable, "-m", "mt.train", *argv], capture_output=True, text=True)
    assert result.returncode == 2
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0], result.stderr
    assert "Traceback" not in result.stderr


BLOCKS = (
    BASE
    + "train:\n  max_steps: 100\ncpu:\n  train:\n    max_steps: 7\n  model:\n    n_layer: 2\n"
    + "cuda:\n  train:\n    max_steps: 9000\n    compile: true\n"
)


def test_device_block_for_cpu_and_for_cuda(tmp_path):
    path = write(tmp_path, BLOCKS)
    cpu = load_config(path, device="cpu")
    assert (cpu.device_block, cpu.train.max_steps, cpu.model.n_layer, cpu.train.compile) == ("cpu", 7, 2, False)
    cuda = load_config(path, device="cuda")  # resolution only: no GPU is needed to choose the block
    assert (cuda.device_block, cuda.train.max_steps, cuda.model.n_layer, cuda.train.compile) == ("cuda", 9000, 6, True)


def test_a_cpu_that_trains_in_fp32_lays_its_own_block_over_the_cpu_one(tmp_path, monkeypatch):
    import mt.hardware

    path = write(tmp_path, BLOCKS + "cpu_fp32:\n  model:\n    d_model: 96\n")
    monkeypatch.setattr(mt.hardware, "cpu_has_bf16", lambda: False)
    slow = load_config(path, device="cpu")
    assert (slow.device_block, slow.train.max_steps, slow.model.d_model) == ("cpu+cpu_fp32", 7, 96)
    assert load_config(path, ["model.d_model=120"], device="cpu").model.d_model == 120  # the command line wins
    assert load_config(path, ["train.precision=bf16"], device="cpu").device_block == "cpu"  # bf16 asked for
    assert load_config(path, device="cuda").device_block == "cuda"
    monkeypatch.setattr(mt.hardware, "cpu_has_bf16", lambda: True)
    fast = load_config(path, device="cpu")
    assert (fast.device_block, fast.model.d_model) == ("cpu", ModelConfig().d_model)


def test_train_device_picks_the_block_and_command_line_keys_win(tmp_path):
    path = write(tmp_path, BLOCKS)
    assert load_config(path, ["train.device=cuda"]).device_block == "cuda"
    cfg = load_config(path, ["train.device=cpu", "train.max_steps=3"])
    assert (cfg.device_block, cfg.train.max_steps, cfg.model.n_layer) == ("cpu", 3, 2)


def test_saved_config_records_the_merged_settings(tmp_path):
    from mt.config import config_from_dict, save_config

    cfg = load_config(write(tmp_path, BLOCKS), device="cpu")
    save_config(cfg, tmp_path / "config.yaml")
    import yaml

    saved = yaml.safe_load((tmp_path / "config.yaml").read_text())
    assert "cpu" not in saved and "cuda" not in saved
    again = config_from_dict(saved)
    assert again == cfg and again.train.max_steps == 7 and again.device_block == "cpu"


def test_unknown_key_in_a_block_is_an_error_whichever_device(tmp_path):
    path = write(tmp_path, BASE + "cuda:\n  train:\n    max_stepz: 5\n")
    with pytest.raises(
        UserError, match=r"cuda block.*unknown key 'train.max_stepz' \(did you mean 'train.max_steps'\?\)"
    ):
        load_config(path, device="cpu")
    with pytest.raises(UserError, match="'cpu' must be a mapping"):
        load_config(write(tmp_path, BASE + "cpu: fast\n"))
    with pytest.raises(UserError, match="not name"):
        load_config(write(tmp_path, BASE + "cpu:\n  name: other\n"))


def test_the_student_recipe_loads_on_either_device_before_its_teacher_exists(tmp_path):
    student = Path(__file__).resolve().parents[1] / "recipes" / "fr_en_student.yaml"
    cpu, cuda = load_config(student, device="cpu"), load_config(student, device="cuda")
    assert cpu.distill.teacher == cuda.distill.teacher == "runs/fr_en_general"  # checked when training starts
    assert (cpu.distill.int8, cuda.distill.int8, cuda.distill.device) == (True, False, "cuda")
    assert (cpu.model.enc_layers, cpu.model.dec_layers, cpu.model.d_model, cpu.model.d_ff) == (6, 2, 256, 1536)
    assert load_config(student, ["distill=null"]).distill.teacher is None
    with pytest.raises(UserError, match="distill.int8 is for a CPU teacher"):
        load_config(student, ["distill.device=cuda", "distill.int8=true"])
    with pytest.raises(UserError, match="distill.original_weight is a share in \\[0, 1\\), got 1.0"):
        load_config(student, ["distill.original_weight=1"])
    with pytest.raises(UserError, match="distill.teacher needs model.arch 'transformer'"):
        load_config(write(tmp_path, BASE + "distill:\n  teacher: runs/fr_en\n"))
