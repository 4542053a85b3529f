"""Importing Marian (OPUS-MT) models: tiny random MarianMT models built here with `transformers`,
shaped like real checkpoints (tests/random_marian.py), give once imported the same token ids,
logits, scores, greedy and beam outputs (with the checkpoint's own decoding defaults too), and
CTranslate2 outputs."""

import json
import re
import shutil

import pytest
import torch
from helpers import cli
from random_marian import ENGLISH, FRENCH, build, sentences

transformers = pytest.importorskip(
    "transformers", reason="transformers (the dev extra) builds the reference models; .ci/run installs it"
)

from mt.errors import UserError  # noqa: E402
from mt.importers.marian import import_marian  # noqa: E402
from mt.inference.translator import Translator  # noqa: E402

# Each activation, tied and untied output, scaled and unscaled embeddings (Marian blocks are all
# post-LayerNorm; mt's pre-LayerNorm blocks are what the rest of the suite trains).
KINDS = {
    "swish-tied": dict(activation="swish", tied=True),
    "relu-untied": dict(activation="relu", tied=False, seed=1),
    "gelu-unscaled": dict(activation="gelu", tied=True, scale_embedding=False, seed=2),
}
ODD = [
    "Ça, c'est déjà l'œuvre naïve",
    "ﬁn de l'été ＡＢＣ１２３",  # compatibility forms that NFKC folds
    "e\u0301te\u0301 combining accents",
    "emoji 🙂🚀 and 漢字 and عربي",
    "  spaces   inside  and around  ",
    "tab\tseparated\ttext",
    "no\u00a0break\u202fspaces",
    "",
    "UPPER CASE WORDS!",
    "«guillemets» – dashes — and “quotes”",
    "nul\x00inside",  # control characters go to SentencePiece as they are
    "start\x01of heading and del\x7f",
    "a </s> in the text, <unk> and <pad>too",  # literal special tokens are those tokens
    "</s>",
    ">>fra<< le chat",  # a leading language tag is one token; elsewhere it is text
    "le >>fra<< chat",
]


# CI runs one kind's comparisons again with AVX2 kernels, fp32 and two threads (the kind whose long
# outputs hold near ties).
@pytest.fixture(
    scope="module", params=[pytest.param(k, marks=[pytest.mark.numerics] * (k == "relu-untied")) for k in KINDS]
)
def imported(request, tmp_path_factory):
    """(reference model, its tokenizer, vocab.json, our run directory, its translator)."""
    folder = tmp_path_factory.mktemp(request.param)
    reference, vocab = build(folder / "hf", **KINDS[request.param])
    run = import_marian(str(folder / "hf"), folder / "run", ("fr", "en"))
    tokenizer = transformers.MarianTokenizer.from_pretrained(str(folder / "hf"))
    return reference, tokenizer, vocab, run, Translator.load(run)


def marian_ids(translator, vocab):
    return translator.tokenizer.marian_ids(vocab)


def test_token_ids_equal_marian_tokenizers(imported):
    _, tokenizer, vocab, _, translator = imported
    order = marian_ids(translator, vocab)
    texts = sentences(FRENCH, 196, seed=7) + ODD
    assert len(texts) == 196 + len(ODD)
    ours = [[order[i] for i in ids] + [0] for ids in translator.tokenizer.encode_batch(texts)]
    assert ours == tokenizer(texts)["input_ids"]
    targets = sentences(ENGLISH, 50, seed=8) + ODD
    ours = [[order[i] for i in ids] + [0] for ids in translator.tokenizer.encode_batch(targets, "tgt")]
    assert ours == tokenizer(text_target=targets)["input_ids"]


def test_logits_equal_transformers_forward(imported):
    reference, tokenizer, vocab, _, translator = imported
    order = torch.tensor(marian_ids(translator, vocab))
    src, tgt = sentences(FRENCH, 8, seed=3), sentences(ENGLISH, 8, seed=4)
    batch = tokenizer(src, text_target=tgt, return_tensors="pt", padding=True)
    with torch.no_grad():
        theirs = reference(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], labels=batch["labels"])
    tok = translator.tokenizer
    width = batch["labels"].size(1)
    ours_src = torch.nn.utils.rnn.pad_sequence([torch.tensor(i + [3]) for i in tok.encode_batch(src)], True)
    ours_tgt = torch.full((len(tgt), width), 0)
    for row, ids in enumerate(tok.encode_batch(tgt, "tgt")):
        ours_tgt[row, : len(ids) + 1] = torch.tensor([2] + ids)
    with torch.no_grad():
        ours = translator.model(ours_src, ours_tgt)
    real = batch["labels"] != tokenizer.pad_token_id
    assert real.sum() > 40
    assert torch.allclose(ours[real], theirs.logits[real][:, order], atol=1e-4, rtol=0)


def _generated(reference, tokenizer, texts, scores=False, **options):
    """generate()'s outputs as Marian ids, and with `scores` its beam scores too."""
    batch = tokenizer(texts, return_tensors="pt", padding=True)
    options = {"bad_words_ids": [[tokenizer.pad_token_id]], "max_new_tokens": 30, "do_sample": False, **options}
    with torch.no_grad():
        out = reference.generate(**batch, **options, output_scores=scores, return_dict_in_generate=True)
    ids = [_until_end([i for i in row[1:].tolist() if i != tokenizer.pad_token_id]) for row in out.sequences]
    return (ids, out.sequences_scores.tolist()) if scores else ids


def _ours(translator, vocab, texts, scores=False, **options):
    """Our outputs as Marian ids, at most 29 tokens by default (transformers' max_new_tokens=30 ends
    in a forced </s>), and with `scores` their scores too."""
    order = marian_ids(translator, vocab)
    found = translator.translate(texts, hypotheses=True, **{"max_len": 29, **options})
    ids = [[order[i] for i in h[0].ids] for h in found]
    return (ids, [h[0].score for h in found]) if scores else ids


def _until_end(ids):
    return ids[: ids.index(0)] if 0 in ids else ids


def assert_same_or_tied(ours, theirs, most: int = 3) -> list[int]:
    """Two beam searches' (outputs, scores) agree: every score within 1e-4, and every output equal
    but where the best two hypotheses tie in score and the order of floating-point sums (threads,
    kernels) picked the other: at most `most` of those. Returns their indices."""
    (our_ids, our_scores), (their_ids, their_scores) = ours, theirs
    assert len(our_ids) == len(their_ids)
    assert torch.allclose(torch.tensor(our_scores), torch.tensor(their_scores), atol=1e-4, rtol=0)
    tied = [i for i, (a, b) in enumerate(zip(our_ids, their_ids)) if a != b]
    assert len(tied) <= most, f"outputs differ at {tied}"
    return tied


def test_greedy_output_equals_generate(imported):
    reference, tokenizer, vocab, _, translator = imported
    texts = sentences(FRENCH, 40, seed=5)
    theirs = _generated(reference, tokenizer, texts, num_beams=1)
    assert _ours(translator, vocab, texts, beam=1) == theirs
    assert 10 <= sum(len(t) < 29 for t in theirs) < 40  # outputs that end and outputs cut at the limit


def test_beam_output_equals_generate_without_length_penalty(imported):
    """With alpha 0 any length penalty ranks raw log-probabilities; what is left is the search."""
    reference, tokenizer, vocab, _, translator = imported
    texts = sentences(FRENCH, 40, seed=6)
    theirs = _generated(reference, tokenizer, texts, True, num_beams=4, length_penalty=0.0, early_stopping=False)
    assert_same_or_tied(_ours(translator, vocab, texts, True, beam=4, length_penalty=0.0), theirs)


def test_the_generation_configs_renormalize_logits_and_max_new_tokens_are_followed(imported, tmp_path, capsys):
    """renormalize_logits: transformers takes a second log-softmax after banning <pad>, so scores
    and the beams they choose change; max_new_tokens caps the output. A setting mt does not follow
    is named in one line."""
    reference, tokenizer, vocab, run, _ = imported
    folder = tmp_path / "hf"
    shutil.copytree(run.parent / "hf", folder)
    generation = json.loads((folder / "generation_config.json").read_text())
    generation |= {"renormalize_logits": True, "max_new_tokens": 30, "no_repeat_ngram_size": 3}
    (folder / "generation_config.json").write_text(json.dumps(generation))
    translator = Translator.load(import_marian(str(folder), tmp_path / "run", ("fr", "en")))
    assert "does not follow these generation settings: no_repeat_ngram_size=3" in capsys.readouterr().err
    assert translator.options.max_len == 29 and translator.options.renormalize
    texts = sentences(FRENCH, 30, seed=15)
    theirs = _generated(reference, tokenizer, texts, True, num_beams=4, renormalize_logits=True)
    assert_same_or_tied(_ours(translator, vocab, texts, True), theirs)


def test_ctranslate2_export_of_an_import_gives_the_same_greedy_output(imported, tmp_path):
    pytest.importorskip("ctranslate2", reason="the ctranslate2 extra is not installed; .ci/run installs it")
    _, _, _, run, translator = imported
    out = tmp_path / "ct2"
    exported = cli("mt.export", "--model", str(run), "--out", str(out))
    assert exported.returncode == 0, exported.stderr
    from mt.inference.ctranslate2_engine import CTranslate2Translator

    texts = sentences(FRENCH, 30, seed=11)
    engine = CTranslate2Translator(out)
    theirs = [h[0].ids for h in engine.translate(texts, hypotheses=True, beam=1, max_len=30)]
    assert theirs == [h[0].ids for h in translator.translate(texts, hypotheses=True, beam=1, max_len=30)]


@pytest.fixture(scope="module")
def marian_dir(tmp_path_factory):
    folder = tmp_path_factory.mktemp("saved") / "opus-mt-fr-en"
    build(folder)
    return folder


def test_the_import_command_writes_a_run_that_translates(marian_dir, tmp_path):
    made = cli("mt.import", "marian", str(marian_dir), "--out", str(tmp_path / "run"))
    assert made.returncode == 0, made.stderr
    saved = (tmp_path / "run" / "config.yaml").read_text()
    assert "norm: post" in saved and "src_lang: fr" in saved and "kind: marian" in saved
    # Marian's own rates: dropout on the sublayers, none on the attention weights (config.json's default)
    assert "dropout: 0.1" in saved and "attention_dropout: 0.0" in saved
    translated = cli("mt.translate", "--model", str(tmp_path / "run"), "le chat noir", "la maison")
    assert translated.returncode == 0, translated.stderr
    assert len(translated.stdout.splitlines()) == 2
    picture = tmp_path / "attention.png"
    drawn = cli("mt.translate", "--model", str(tmp_path / "run"), "--attention", str(picture), "le chat noir")
    assert drawn.returncode == 0, drawn.stderr
    assert picture.stat().st_size > 1000
    again = cli("mt.import", "marian", str(marian_dir), "--out", str(tmp_path / "run"))
    assert again.returncode == 2 and "never overwrites" in again.stderr and "Traceback" not in again.stderr
    assert len(again.stderr.strip().splitlines()) == 1


def _edit_config(**changes):
    def change(folder):
        config = json.loads((folder / "config.json").read_text())
        config.update(changes)
        (folder / "config.json").write_text(json.dumps(config))

    return change


def _untie_decoder_table(folder):
    from safetensors.torch import load_file, save_file

    state = load_file(str(folder / "model.safetensors"))
    state["model.decoder.embed_tokens.weight"] = state["model.shared.weight"] + 1
    save_file(state, str(folder / "model.safetensors"))


@pytest.mark.parametrize(
    "change, message",
    [
        (lambda f: (f / "vocab.json").unlink(), "not a Marian model directory: no vocab.json"),
        (lambda f: (f / "model.safetensors").unlink(), "not a Marian model directory"),
        (_edit_config(model_type="bart"), "describes a 'bart' model"),
        (_edit_config(activation_function="gelu_new"), "activation_function='gelu_new' is not supported"),
        (_edit_config(share_encoder_decoder_embeddings=False), "share_encoder_decoder_embeddings=False"),
        (_edit_config(decoder_ffn_dim=128), "encoder_ffn_dim=64 and decoder_ffn_dim=128 differ"),
        (_edit_config(vocab_size=999), "vocab.json has"),
        (_edit_config(eos_token_id=5), "but eos_token_id=5 in config.json"),
        (_edit_config(d_model=48), "the weights do not fit config.json"),
        (_untie_decoder_table, "embedding tables of their own"),
        (lambda f: (f / "source.spm").write_bytes(b"not a model"), "not a SentencePiece model"),
        (lambda f: (f / "config.json").write_text("{"), "not valid JSON"),
        (lambda f: (f / "model.safetensors").write_bytes(b"\x00" * 9), "model.safetensors is damaged"),
    ],
)
def test_bad_model_directories_are_refused_naming_the_problem(marian_dir, tmp_path, change, message):
    broken = tmp_path / "broken"
    shutil.copytree(marian_dir, broken)
    change(broken)
    with pytest.raises(UserError, match=re.escape(message)):
        import_marian(str(broken), tmp_path / "out", ("fr", "en"))
    assert not (tmp_path / "out").exists()


def test_a_path_that_is_no_model_and_no_hub_name(tmp_path):
    with pytest.raises(UserError, match="neither a model directory nor a hub name"):
        import_marian(str(tmp_path / "nowhere" / "x" / "y"))


def test_a_hub_name_is_fetched_through_huggingface_hub(marian_dir, tmp_path, monkeypatch):
    """No hub is reachable here: the fetch is replaced by the local copy it would have made."""
    hub = pytest.importorskip("huggingface_hub", reason="the import extra is not installed; .ci/run installs it")
    asked = []
    monkeypatch.setattr(hub, "snapshot_download", lambda name, **kw: asked.append((name, kw)) or str(marian_dir))
    out = import_marian("Helsinki-NLP/opus-mt-fr-en", tmp_path / "run")
    assert asked[0][0] == "Helsinki-NLP/opus-mt-fr-en" and "vocab.json" in asked[0][1]["allow_patterns"]
    assert "src_lang: fr" in (out / "config.yaml").read_text()  # from the hub name


def test_an_unreachable_hub_is_one_line(tmp_path, monkeypatch):
    pytest.importorskip("huggingface_hub", reason="the import extra is not installed; .ci/run installs it")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    result = cli("mt.import", "marian", "Helsinki-NLP/opus-mt-xx-yy", "--out", str(tmp_path / "run"))
    assert result.returncode == 2 and "cannot fetch Helsinki-NLP/opus-mt-xx-yy" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and not (tmp_path / "run").exists()


def test_translate_with_no_flags_equals_generate_with_the_checkpoints_defaults(imported, tmp_path):
    """generate() with no arguments decodes as generation_config.json says (beam 4, length ** 1,
    max_length 512, <pad> banned); so does the imported run's decode section, in the API and in
    the plain command."""
    reference, tokenizer, vocab, run, translator = imported
    texts = sentences(FRENCH, 24, seed=12)
    batch = tokenizer(texts, return_tensors="pt", padding=True)
    with torch.no_grad():
        out = reference.generate(**batch, output_scores=True, return_dict_in_generate=True)
    theirs = [_until_end([i for i in row[1:].tolist() if i != tokenizer.pad_token_id]) for row in out.sequences]
    assert translator.options.beam == 4 and translator.options.scoring == "marian"
    ours = _ours(translator, vocab, texts, True, max_len=translator.options.max_len)
    tied = assert_same_or_tied(ours, (theirs, out.sequences_scores.tolist()))
    expected = tokenizer.batch_decode(out.sequences, skip_special_tokens=True)
    api = translator.translate(texts)  # no options: the run's decode section, as the plain command decodes
    assert [a for i, a in enumerate(api) if i not in tied] == [e for i, e in enumerate(expected) if i not in tied]
    (tmp_path / "in.fr").write_text("\n".join(texts) + "\n")
    plain = cli("mt.translate", "--model", str(run), "--input", str(tmp_path / "in.fr"))
    assert plain.returncode == 0, plain.stderr
    assert plain.stdout.splitlines() == api  # the command: the API's outputs, on the same threads


def test_score_equals_transformers_log_softmax(imported):
    """decode.scoring marian normalises as transformers does: a log-softmax over the whole
    vocabulary, Marian's <pad> included (a zero row and bias: not negligible)."""
    reference, tokenizer, _, _, translator = imported
    src, tgt = sentences(FRENCH, 8, seed=13), sentences(ENGLISH, 8, seed=14)
    batch = tokenizer(src, text_target=tgt, return_tensors="pt", padding=True)
    with torch.no_grad():
        logits = reference(**batch).logits
    labels = batch["labels"]
    logp = torch.log_softmax(logits, dim=-1).gather(2, labels.clamp(min=0)[:, :, None]).squeeze(2)
    real = labels != tokenizer.pad_token_id
    theirs = torch.where(real, logp, 0.0).sum(dim=1)
    ours = torch.tensor([total for total, _ in translator.score(src, tgt)])
    assert torch.allclose(ours, theirs, atol=1e-4)
    gnmt = torch.tensor([total for total, _ in translator.score(src, tgt, scoring="gnmt")])
    assert (gnmt > ours).all()  # without <pad> in the softmax every token is a little likelier
