"""Corpora drawn, not loaded (data.draw): only the drawn lines are read, each corpus gives its
weight's share, the draw is the seed's alone, and Europarl's xz files are read like any other."""

import lzma
import time

import datasets
import numpy as np
import pytest

from mt.config import load_config
from mt.data.corpora import Draw, load_corpora, load_pairs
from mt.errors import UserError
from mt.files import count_lines, read_chosen_lines, read_lines


def write_pairs(folder, name, n, opener=open):
    paths = {}
    for lang, word in (("fr", "phrase"), ("en", "sentence")):
        paths[lang] = folder / f"{name}.{lang}"
        with opener(paths[lang], "wt", encoding="utf-8") as f:
            f.writelines(f"{word} {name} {i}\n" for i in range(n))
    return {"path": "text", "data_files": {lang: str(p) for lang, p in paths.items()}}


def test_chosen_lines_are_the_lines_read_whole_would_give(tmp_path):
    path = tmp_path / "x.txt"
    path.write_bytes(b"zero\none\r\n\nthree\nfour")  # a CRLF line, an empty line, no newline at the end
    whole = read_lines(path)
    assert count_lines(path) == len(whole) == 5
    assert read_chosen_lines(path, [0, 1, 2, 4]) == ([whole[0], whole[1], whole[2], whole[4]], 5)
    assert read_chosen_lines(path, []) == ([], 5)


def test_invalid_utf8_in_a_drawn_line_names_the_line(tmp_path):
    path = tmp_path / "x.txt"
    path.write_bytes(b"un\ndeux\ntr\xe9s\n")
    with pytest.raises(UserError, match=r"x\.txt line 3: invalid UTF-8"):
        read_chosen_lines(path, [2])


def test_a_draw_is_the_seeds_alone_and_reads_only_its_rows(tmp_path):
    spec = write_pairs(tmp_path, "c", 1000)
    a = load_pairs(spec, "train", "fr", "en", Draw(100, (1, 0)))
    b = load_pairs(spec, "train", "fr", "en", Draw(100, (1, 0)))
    c = load_pairs(spec, "train", "fr", "en", Draw(100, (2, 0)))
    assert len(a) == 100 and a["src"] == b["src"] and a["src"] != c["src"]
    rows = Draw(100, (1, 0)).rows(1000)
    assert a["src"] == [f"phrase c {i}" for i in rows]
    assert a["tgt"] == [f"sentence c {i}" for i in rows]  # the two sides stay aligned
    assert len(load_pairs(spec, "train", "fr", "en", Draw(5000, (1, 0)))) == 1000  # more than there is: all


def test_a_draw_is_kept_for_the_next_run_until_its_files_change(tmp_path, monkeypatch):
    import os

    import mt.data.corpora as corpora

    spec = write_pairs(tmp_path, "c", 1000)
    first = load_pairs(spec, "train", "fr", "en", Draw(100, (1, 0)))

    def unread(*args):
        raise AssertionError("the cached draw should have been used")

    monkeypatch.setattr(corpora, "read_chosen_lines", unread)
    again = load_pairs(spec, "train", "fr", "en", Draw(100, (1, 0)))
    assert again["src"] == first["src"] and again._fingerprint == first._fingerprint  # later caches hit too
    os.utime(spec["data_files"]["fr"], ns=(1, 1))  # the file changed: drawn afresh
    with pytest.raises(AssertionError, match="cached draw"):
        load_pairs(spec, "train", "fr", "en", Draw(100, (1, 0)))


def _draw_in_a_process(spec, wrote):
    from mt.data import corpora

    def save_slowly(self, path, *args, **kwargs):  # both writers are mid-write when the first renames
        wrote.put(path)
        time.sleep(1.0)
        return save(self, path, *args, **kwargs)

    save = datasets.Dataset.save_to_disk
    datasets.Dataset.save_to_disk = save_slowly
    drawn = corpora.load_pairs(spec, "train", "fr", "en", Draw(100, (1, 0)))
    return drawn["src"]


def test_two_runs_drawing_at_once_into_one_data_folder_both_finish_with_one_draw(tmp_path, isolated_data):
    import multiprocessing

    spec = write_pairs(tmp_path, "c", 1000)
    context = multiprocessing.get_context("spawn")
    with context.Manager() as manager:
        wrote = manager.Queue()
        with context.Pool(2) as pool:
            answers = [pool.apply_async(_draw_in_a_process, (spec, wrote)) for _ in range(2)]
            drawn = [answer.get(timeout=300) for answer in answers]
        folders = {wrote.get() for _ in range(2)}
    assert len(folders) == 2  # each wrote a folder of its own
    assert drawn[0] == drawn[1] == load_pairs(spec, "train", "fr", "en", Draw(100, (1, 0)))["src"]
    cached = sorted(p.name for p in (isolated_data / "cache").iterdir())
    assert len(cached) == 1 and cached[0].startswith("drawn-") and ".partial" not in cached[0]


def test_each_corpus_gives_its_weights_share_of_the_draw(tmp_path):
    big, small = write_pairs(tmp_path, "big", 3000), write_pairs(tmp_path, "small", 50)
    specs = [{**big, "weight": 3}, {**small, "weight": 1}]
    ds, _, sizes = load_corpora(specs, "train", "fr", "en", draw=400, seed=1, log=None)
    assert sizes == [300, 50]  # the small corpus gives all it has; the mixture cycles it by its weight
    unweighted, _, _ = load_corpora([big, small], "train", "fr", "en", draw=400, seed=1, log=None)
    assert len(unweighted) == 450  # without weights, at most the draw from each


def test_misaligned_files_are_an_error_when_drawn(tmp_path):
    spec = write_pairs(tmp_path, "c", 100)
    with open(spec["data_files"]["en"], "a") as f:
        f.write("one more\n")
    with pytest.raises(UserError, match="has 100 lines but .* has 101"):
        load_pairs(spec, "train", "fr", "en", Draw(10, (0,)))


def test_europarl_comes_from_the_mirror_xz_compressed_and_trains_only(tmp_path, monkeypatch):
    mirror = tmp_path / "mirror" / "europarl"
    mirror.mkdir(parents=True)
    for lang, word in (("fr", "phrase"), ("en", "sentence")):
        with lzma.open(mirror / f"europarl-v7.fr-en.{lang}.xz", "wt", encoding="utf-8") as f:
            f.writelines(f"{word} {i}\n" for i in range(500))
    monkeypatch.setenv("MT_DATA_MIRROR", str(tmp_path / "mirror"))
    drawn = load_pairs("europarl", "train", "fr", "en", Draw(50, (0,)))
    assert len(drawn) == 50 and all(s.split()[1] == t.split()[1] for s, t in zip(drawn["src"], drawn["tgt"]))
    assert len(load_pairs("europarl", "train", "fr", "en")) == 500
    with pytest.raises(UserError, match="europarl is a training corpus"):
        load_pairs("europarl", "valid", "fr", "en")


def test_a_truncated_xz_file_is_a_one_line_error(tmp_path):
    path = tmp_path / "x.fr.xz"
    path.write_bytes(lzma.compress(b"bonjour\n" * 1000)[:40])
    for read in (read_lines, count_lines, lambda p: read_chosen_lines(p, [0])):
        with pytest.raises(UserError, match="not a readable xz file"):
            read(path)


def test_draw_and_valid_pairs_are_checked_and_the_front_door_sets_both(tmp_path):
    cfg = load_config("recipes/fr_en.yaml", ["train.device=cpu"])
    weights = [spec["weight"] for spec in cfg.data.train]
    assert cfg.data.draw and cfg.data.valid_pairs and all(w > 0 for w in weights)
    for key in ("data.draw=0", "data.valid_pairs=-3"):
        with pytest.raises(UserError, match=key.split("=")[0]):
            load_config("recipes/fr_en.yaml", [key])


def test_validation_scores_a_fixed_draw_of_each_set(tmp_path):
    from mt.data.parallel import prepare_parallel

    train, valid = write_pairs(tmp_path, "t", 200), write_pairs(tmp_path, "v", 300)
    overrides = [f"data.train=[{train}]", f"data.valid={valid}", "data.valid_pairs=40", "tokenizer.kind=char"]
    overrides.append("data.held_out=false")  # the recipe's test sets are not this test's
    runs = [load_config("recipes/fr_en.yaml", [*overrides, f"seed={seed}"]) for seed in (1, 2)]
    sets = [prepare_parallel(c.data, c.tokenizer, c.seed, None, log=None).valid_sets[0] for c in runs]
    assert len(sets[0].sources) == 40 and sets[0].sources == sets[1].sources  # whatever the run's seed
    assert np.unique(sets[0].sources).size == 40
