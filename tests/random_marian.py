"""Tiny random MarianMT models saved as `transformers` saves OPUS-MT ones, built offline for the
import tests, shaped like the real checkpoints: SentencePiece models trained here on a few hundred
lines per language; a joint vocab.json with </s> 0, <unk> 1 and <pad> last, the pieces between in a
shuffled order, some of the models' pieces missing and vocabulary-only entries (language tags) added;
a zero <pad> embedding row and logits bias; 512 positions; a generation_config.json as OPUS-MT's
(beam 4, length penalty 1, max_length 512, <pad> banned, </s> forced at the end)."""

from __future__ import annotations

import io
import json
import random
from pathlib import Path

import sentencepiece as spm
import torch

FRENCH = (
    "le la les un une des chat chien maison rouge noir petit grand où été œuvre naïve Ça garçon "
    "fenêtre forêt île très déjà voilà mangé dormir réseau neurones génial avec pour dans sur"
).split()
ENGLISH = (
    "the a cat dog house red black small big where summer work naive boy window forest island "
    "very already eaten sleep network neurons great with for in on and it is was"
).split()


def sentences(words: list[str], n: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        text = " ".join(rng.choice(words) for _ in range(rng.randint(2, 9)))
        out.append(text[0].upper() + text[1:] + rng.choice([".", "!", "?", ",", ""]))
    return out


def train_spm(lines: list[str], vocab_size: int) -> bytes:
    """A SentencePiece model with Marian's specials (<unk>, <s>, </s>; no pad)."""
    buffer = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(lines),
        model_writer=buffer,
        vocab_size=vocab_size,
        character_coverage=1.0,
        minloglevel=2,
    )
    return buffer.getvalue()


TAGS = [">>fra<<", ">>eng<<", ">>deu<<"]  # in the vocabulary, made by no SentencePiece model


def marian_vocab(*protos: bytes, seed: int = 0) -> dict[str, int]:
    """</s> 0, <unk> 1, then the pieces of both models (every tenth left out) and the tags in a
    shuffled order, <pad> last."""
    pieces: list[str] = []
    for proto in protos:
        sp = spm.SentencePieceProcessor(model_proto=proto)
        for i in range(sp.get_piece_size()):
            piece = sp.id_to_piece(i)
            if not (sp.is_control(i) or sp.is_unknown(i)) and piece not in pieces:
                pieces.append(piece)
    kept = [p for i, p in enumerate(pieces) if i % 10 != 7] + TAGS  # missing pieces become <unk>
    random.Random(seed).shuffle(kept)
    return {piece: i for i, piece in enumerate(["</s>", "<unk>", *kept, "<pad>"])}


def build(folder: Path, activation: str = "swish", tied: bool = True, scale_embedding: bool = True, seed: int = 0):
    """Save a random MarianMTModel and its tokenizer files into `folder`; returns (model, vocab)."""
    from transformers import MarianConfig, MarianMTModel, MarianTokenizer

    folder.mkdir(parents=True, exist_ok=True)
    source, target = train_spm(sentences(FRENCH, 400, seed), 90), train_spm(sentences(ENGLISH, 400, seed + 1), 80)
    (folder / "source.spm").write_bytes(source)
    (folder / "target.spm").write_bytes(target)
    vocab = marian_vocab(source, target, seed=seed)
    (folder / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False))
    pad = vocab["<pad>"]
    config = MarianConfig(
        vocab_size=len(vocab),
        d_model=32,
        encoder_layers=2,
        decoder_layers=2,
        encoder_attention_heads=4,
        decoder_attention_heads=4,
        encoder_ffn_dim=64,
        decoder_ffn_dim=64,
        max_position_embeddings=512,
        activation_function=activation,
        scale_embedding=scale_embedding,
        pad_token_id=pad,
        eos_token_id=0,
        decoder_start_token_id=pad,
        forced_eos_token_id=0,
        tie_word_embeddings=tied,
        dropout=0.1,
    )
    torch.manual_seed(seed)
    model = MarianMTModel(config).eval()
    with torch.no_grad():  # weights large enough that the argmax is never a near tie
        for name, p in model.named_parameters():
            if "embed_positions" not in name and p.dim() == 2:
                p.normal_(0.0, 0.2)
        model.model.shared.weight[pad] = 0.0  # as in OPUS-MT: <pad>'s row is zero, and so is its bias
        for side in (model.model.encoder, model.model.decoder):  # one table, as in OPUS-MT models
            side.embed_tokens.weight.copy_(model.model.shared.weight)
        if not tied:
            model.lm_head.weight[pad] = 0.0
        bias = torch.randn(len(vocab))
        bias[pad] = 0.0
        model.final_logits_bias.copy_(bias[None])
    tokenizer = MarianTokenizer(
        source_spm=str(folder / "source.spm"),
        target_spm=str(folder / "target.spm"),
        vocab=str(folder / "vocab.json"),
        source_lang="fr",
        target_lang="en",
    )
    _calibrate_end(model, tokenizer, pad)
    generation = model.generation_config
    generation.num_beams, generation.max_length, generation.length_penalty = 4, 512, 1.0
    generation.bad_words_ids, generation.forced_eos_token_id = [[pad]], 0
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return model, vocab


def _calibrate_end(model, tokenizer, pad: int) -> None:
    """Raise the bias of </s> until about half of some greedy outputs end before 30 tokens: a random
    model otherwise ends at once or never, and the tests compare where outputs end too."""
    batch = tokenizer(sentences(FRENCH, 20, seed=99), return_tensors="pt", padding=True)
    with torch.no_grad():
        for _ in range(20):
            out = model.generate(**batch, max_new_tokens=30, do_sample=False, num_beams=1, bad_words_ids=[[pad]])
            if (out[:, 1:30] == 0).any(dim=1).float().mean() >= 0.5:  # the 30th is forced
                return
            model.final_logits_bias[0, 0] += 0.5
