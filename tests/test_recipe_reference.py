"""docs/recipes.md is generated from the recipe's dataclasses: it must be current and complete."""

import subprocess
import sys

from mt.config import Config
from mt.recipe_reference import OUT, reference, sections


def test_docs_recipes_md_is_current():
    assert OUT.read_text(encoding="utf-8") == reference(), "docs/recipes.md is stale: run python -m mt.recipe_reference"


def test_every_recipe_key_has_a_default_and_a_meaning():
    found = [row for _, _, rows in sections(Config) for row in rows]
    keys = [key for key, _, _ in found]
    assert {"`name`", "`data.train`", "`train.plan.few_epochs`", "`decode.beam`"} <= set(keys)
    assert len(keys) == len(set(keys)) > 60
    assert [key for key, default, meaning in found if not meaning or not default] == []


def test_the_check_flag_says_whether_the_file_is_stale(tmp_path, monkeypatch):
    import mt.recipe_reference as ref

    monkeypatch.setattr(ref, "OUT", tmp_path / "recipes.md")
    assert ref.main(["--check"]) == 1  # missing
    assert ref.main([]) == 0 and ref.main(["--check"]) == 0
    (tmp_path / "recipes.md").write_text("old\n")
    assert ref.main(["--check"]) == 1
    command = [sys.executable, "-m", "mt.recipe_reference", "--check"]
    assert subprocess.run(command, capture_output=True).returncode == 0  # the shipped file
