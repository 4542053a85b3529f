"""Tokenizers: fixed special ids, round trips of French typography, save and load."""

import numpy as np
import pytest

from mt.data.batching import collate
from mt.data.tokenizer import CharTokenizer, SentencePieceTokenizer, load_tokenizer
from mt.data.vocab import END, PAD, START, UNK
from mt.errors import UserError

FRENCH = [
    "L’homme à la casquette regarde l'océan.",
    "« Où est le cœur de la ville ? » demanda-t-elle.",
    "Un garçon mange un œuf près de la fenêtre ; c’est l’été.",
    "Les élèves écoutent leur maîtresse, qui sourit.",
    "Deux chiens jouent dans la neige à Noël.",
]
ENGLISH = ["A man in a cap looks at the ocean.", "Two dogs play in the snow.", "The kids' teacher smiles."]


def sp(tmp_path, model_type="unigram"):
    return SentencePieceTokenizer.train((FRENCH + ENGLISH) * 20, vocab_size=80, model_type=model_type)


def test_sentencepiece_special_ids(tmp_path):
    tok = sp(tmp_path)
    pieces = [tok.sp.id_to_piece(i) for i in (PAD, UNK, START, END)]
    assert pieces == ["<pad>", "<unk>", "<START>", "<END>"]
    ids = tok.encode(FRENCH[0])
    assert PAD not in ids and START not in ids and END not in ids
    batch = collate([ids], [tok.encode(ENGLISH[0])])
    assert batch["src"][0, -1] == END and batch["tgt_in"][0, 0] == START and batch["tgt_out"][0, -1] == END


def test_french_typography_round_trips(tmp_path):
    for model_type in ("unigram", "bpe"):
        tok = sp(tmp_path, model_type)
        for text in FRENCH + ENGLISH:
            assert tok.decode(tok.encode(text)) == text, (model_type, text)


def test_save_load_and_subword_sampling(tmp_path):
    tok = sp(tmp_path)
    tok.save(tmp_path)
    again = load_tokenizer(tmp_path)
    assert again.encode(FRENCH[1]) == tok.encode(FRENCH[1]) and again.fingerprint() == tok.fingerprint()

    def draws(seed):
        rng = np.random.default_rng(seed)
        return [tuple(tok.sample_encode_batch([FRENCH[2]], 0.5, rng)[0]) for _ in range(20)]

    samples = draws(0)
    assert len(set(samples)) > 1 and all(tok.decode(list(s)) == FRENCH[2] for s in samples)
    assert draws(0) == samples and draws(1) != samples  # the generator alone decides


def test_char_tokenizer(tmp_path):
    tok = CharTokenizer.train(FRENCH)
    assert min(tok.stoi.values()) == 4  # ids 0-3 are the specials
    assert tok.decode(tok.encode(FRENCH[1])) == FRENCH[1]
    assert tok.encode("Z") == [UNK] and tok.unknown_chars("Zoé") == ["Z"]
    tok.save(tmp_path)
    assert load_tokenizer(tmp_path).encode(FRENCH[0]) == tok.encode(FRENCH[0])


@pytest.mark.parametrize("vocab_size, hint", [(10, "larger"), (5000, "smaller")])
def test_a_vocabulary_size_the_text_cannot_give_says_which_way_to_move_it(vocab_size, hint):
    """Too few pieces for the text's distinct characters, or more than it can give: one line that
    points the right way."""
    with pytest.raises(UserError, match=f"SentencePiece training failed: .*\\(try a {hint} tokenizer.vocab_size\\)$"):
        SentencePieceTokenizer.train((FRENCH + ENGLISH) * 20, vocab_size=vocab_size)
