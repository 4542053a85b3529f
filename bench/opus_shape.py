"""A random model of OPUS-MT's shape, imported as an mt run, for decoding-speed comparisons where
no OPUS-MT checkpoint can be downloaded.

    pip install -e ".[import,ctranslate2]"
    python bench/opus_shape.py --out runs/opus-shape
    python bench/decode.py --model runs/opus-shape --test multi30k --max-len 30 --limit 256

The model is a MarianMT model with Helsinki-NLP/opus-mt-fr-en's configuration (6 + 6 post-norm
layers of 512, 8 heads, 2,048-wide swish feed-forward, a tied 59,514-piece vocabulary) and random
weights, saved as `transformers` saves it and imported with `mt.import marian`, so every engine
sees the shapes a real OPUS-MT model has. Its two SentencePiece models are learned from Multi30k's
training captions (the corpus, downloaded or from MT_DATA_MIRROR); the vocabulary holds their pieces
and is filled up to OPUS-MT's size with pieces the tokenizers never produce. Random weights never
choose </s> (its bias is -30), so every output runs to `--max-len`: all engines decode the same
number of steps, and seconds compare the work of a step, not where sentences happen to end.
"""

import argparse
import io
import json
from pathlib import Path

import sentencepiece as spm
import torch

from mt.data.corpora import columns, load_pairs
from mt.errors import cli_entry
from mt.importers.marian import import_marian

# Helsinki-NLP/opus-mt-fr-en's config.json, the keys that set its shape
OPUS_MT_FR_EN = dict(
    vocab_size=59514,
    d_model=512,
    encoder_layers=6,
    decoder_layers=6,
    encoder_attention_heads=8,
    decoder_attention_heads=8,
    encoder_ffn_dim=2048,
    decoder_ffn_dim=2048,
    max_position_embeddings=512,
    activation_function="swish",
    scale_embedding=True,
    tie_word_embeddings=True,
)
PIECES = (8000, 6000)  # source and target SentencePiece models: about as many as Multi30k's captions allow


def sentencepiece_model(lines: list[str], pieces: int) -> bytes:
    buffer = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(lines), model_writer=buffer, vocab_size=pieces, character_coverage=1.0, minloglevel=2
    )
    return buffer.getvalue()


def marian_vocabulary(models: list[bytes], size: int) -> dict[str, int]:
    """Marian's order: </s> 0, <unk> 1, the pieces of both models, fillers, <pad> last."""
    pieces = ["</s>", "<unk>"]
    for proto in models:
        sp = spm.SentencePieceProcessor(model_proto=proto)
        pieces += [sp.id_to_piece(i) for i in range(sp.get_piece_size()) if not (sp.is_control(i) or sp.is_unknown(i))]
    pieces = list(dict.fromkeys(pieces))  # a piece of both models once
    pieces += [f"▁unused{i}" for i in range(size - 1 - len(pieces))]
    return {piece: i for i, piece in enumerate([*pieces, "<pad>"])}


def save_random_marian(folder: Path, seed: int) -> None:
    from transformers import MarianConfig, MarianMTModel, MarianTokenizer

    folder.mkdir(parents=True, exist_ok=True)
    src, tgt = columns(load_pairs("multi30k", "train", "fr", "en"), "src", "tgt")
    models = [sentencepiece_model(lines, pieces) for lines, pieces in zip((src, tgt), PIECES)]
    (folder / "source.spm").write_bytes(models[0])
    (folder / "target.spm").write_bytes(models[1])
    vocab = marian_vocabulary(models, OPUS_MT_FR_EN["vocab_size"])
    (folder / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False))
    pad = vocab["<pad>"]
    config = MarianConfig(
        **OPUS_MT_FR_EN, pad_token_id=pad, eos_token_id=0, decoder_start_token_id=pad, forced_eos_token_id=0
    )
    torch.manual_seed(seed)
    model = MarianMTModel(config).eval()
    with torch.no_grad():
        model.final_logits_bias[0, [0, pad]] = -30.0  # never </s> (nor <pad>): every output runs to its limit
    model.save_pretrained(folder)
    MarianTokenizer(*(str(folder / f) for f in ("source.spm", "target.spm", "vocab.json")), "fr", "en").save_pretrained(
        folder
    )


@cli_entry
def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default="runs/opus-shape", help="the run directory to make")
    p.add_argument("--marian-out", help="where to keep the transformers model (default: OUT-marian)")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    marian = Path(args.marian_out or f"{args.out}-marian")
    save_random_marian(marian, args.seed)
    out = import_marian(str(marian), args.out, ("fr", "en"))
    print(f"{out}: a random model of opus-mt-fr-en's shape; try: python bench/decode.py --model {out} --max-len 30")


if __name__ == "__main__":
    main()
