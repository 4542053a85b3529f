"""Import a Marian (OPUS-MT) model saved in the `transformers` MarianMT layout as an mt run directory.

The layout: config.json, the weights (model.safetensors or pytorch_model.bin), source.spm,
target.spm and vocab.json. MarianMT is a post-LayerNorm encoder-decoder with sinusoids in halves,
sqrt(D)-scaled embeddings shared by encoder, decoder and (usually) the output, and a final logits
bias. Each of those is an option of mt's own Transformer, so the import is one map from their
parameter names to ours plus the vocabulary renumbering that mt/data/marian_tokenizer.py describes.
The run directory it writes (config.yaml, tokenizer files, best.pt) is an ordinary one.
"""

from __future__ import annotations

import json
import re
import shutil
import sys
import tempfile
from pathlib import Path

import torch

from mt.checkpoint import BEST, save_checkpoint
from mt.config import Config, DataConfig, ModelConfig, TokenizerConfig, TrainConfig, save_config
from mt.data.marian_tokenizer import MARIAN_SPECIALS, MarianVocabTokenizer
from mt.decode_options import DecodeOptions
from mt.errors import UserError, require_extra
from mt.model import build_model

FILES = ("config.json", "source.spm", "target.spm", "vocab.json")
OPTIONAL = ("tokenizer_config.json", "generation_config.json")  # read where present
WEIGHTS = ("model.safetensors", "pytorch_model.bin")
ACTIVATIONS = {"gelu": "gelu", "relu": "relu", "swish": "swish", "silu": "swish"}
# Options of transformers' Bart-family configs that Marian checkpoints leave at these values; any
# other value describes a model this importer does not build.
FIXED_OPTIONS = {
    "normalize_before": False,
    "normalize_embedding": False,
    "add_final_layer_norm": False,
    "add_bias_logits": False,
    "static_position_embeddings": True,
    "share_encoder_decoder_embeddings": True,
    "separate_vocabs": False,
}


def locate(source: str) -> Path:
    """A local model directory, or a hub name (`Helsinki-NLP/opus-mt-fr-en`) fetched to the cache."""
    path = Path(source)
    if path.is_dir():
        return path
    if path.exists() or not re.fullmatch(r"[\w.-]+/[\w.-]+", source):
        raise UserError(f"{source} is neither a model directory nor a hub name such as Helsinki-NLP/opus-mt-fr-en")
    hub = require_extra("huggingface_hub", "import", f"fetching {source} from the Hugging Face hub")
    try:
        return Path(hub.snapshot_download(source, allow_patterns=[*FILES, *WEIGHTS, *OPTIONAL]))
    except Exception as e:  # the hub client raises many kinds: offline, unknown repo, no access
        raise UserError(
            f"cannot fetch {source} from the Hugging Face hub ({type(e).__name__}: {str(e).splitlines()[0][:120]}); "
            "offline, download the model elsewhere and give its directory"
        ) from None


def read_model_dir(folder: Path) -> tuple[dict, dict, dict]:
    """(config.json, tokenizer_config.json or {}, vocab.json) of a Marian model directory, checked;
    config["generation"] holds generation_config.json laid over config.json's own decoding keys."""
    missing = [name for name in FILES if not (folder / name).is_file()]
    if missing or not any((folder / w).is_file() for w in WEIGHTS):
        absent = ", ".join(missing) or " or ".join(WEIGHTS)
        raise UserError(
            f"{folder} is not a Marian model directory: no {absent} (expected {', '.join(FILES)} and the "
            "weights, as transformers saves a MarianMT model)"
        )
    config, vocab = _json(folder / "config.json"), _json(folder / "vocab.json")
    extra = _json(folder / "tokenizer_config.json") if (folder / "tokenizer_config.json").is_file() else {}
    generation = _json(folder / "generation_config.json") if (folder / "generation_config.json").is_file() else {}
    config["generation"] = {**config, **generation}  # the decoding defaults generate() uses
    check_supported(config, extra, folder)
    check_vocab(config, vocab, folder)
    return config, extra, vocab


def _json(path: Path):
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as e:
        raise UserError(f"{path}: not valid JSON ({e})") from None


def check_supported(config: dict, extra: dict, folder: Path) -> None:
    if config.get("model_type") != "marian":
        raise UserError(f"{folder}/config.json describes a {config.get('model_type')!r} model, not a Marian one")
    for key, wanted in FIXED_OPTIONS.items():
        value = config.get(key, extra.get(key, wanted))
        if value != wanted:
            raise UserError(f"{folder}: {key}={value} is not supported by this importer (only {wanted})")
    for enc, dec in (("encoder_attention_heads", "decoder_attention_heads"), ("encoder_ffn_dim", "decoder_ffn_dim")):
        if config.get(enc) != config.get(dec):
            raise UserError(f"{folder}: {enc}={config.get(enc)} and {dec}={config.get(dec)} differ; not supported")
    if config.get("activation_function") not in ACTIVATIONS:
        raise UserError(
            f"{folder}: activation_function={config.get('activation_function')!r} is not supported "
            f"(only {', '.join(ACTIVATIONS)})"
        )
    if config.get("decoder_start_token_id") != config.get("pad_token_id"):
        raise UserError(f"{folder}: decoder_start_token_id differs from pad_token_id; not supported")


def check_vocab(config: dict, vocab: dict, folder: Path) -> None:
    ids = sorted(vocab.values()) if all(isinstance(i, int) for i in vocab.values()) else None
    if ids != list(range(len(vocab))):
        raise UserError(f"{folder}/vocab.json: ids must be 0..{len(vocab) - 1}, each once")
    if len(vocab) != config.get("vocab_size"):
        raise UserError(
            f"{folder}: vocab.json has {len(vocab)} entries but config.json says vocab_size={config.get('vocab_size')}"
        )
    for role, piece in MARIAN_SPECIALS.items():
        if piece not in vocab:
            raise UserError(f"{folder}/vocab.json has no {piece} ({role})")
    for role in ("eos", "pad"):
        if vocab[MARIAN_SPECIALS[role]] != config.get(f"{role}_token_id"):
            raise UserError(
                f"{folder}: {MARIAN_SPECIALS[role]} is id {vocab[MARIAN_SPECIALS[role]]} in vocab.json but "
                f"{role}_token_id={config.get(f'{role}_token_id')} in config.json"
            )


def read_weights(folder: Path) -> dict[str, torch.Tensor]:
    if (folder / WEIGHTS[0]).is_file():
        st = require_extra("safetensors.torch", "import", f"reading {folder / WEIGHTS[0]}")
        try:
            return st.load_file(str(folder / WEIGHTS[0]))
        except Exception as e:  # safetensors raises its own error type for a damaged header
            raise UserError(f"{folder / WEIGHTS[0]} is damaged ({str(e)[:120]})") from None
    from mt.checkpoint import load_checkpoint  # weights_only: a crafted .bin cannot run code

    return load_checkpoint(folder / WEIGHTS[1])


def run_config(config: dict, languages: tuple[str, str], vocab_size: int, out: Path) -> Config:
    """The mt config of an imported model: its shape as model options, no training data."""
    positions = config["max_position_embeddings"]
    model = ModelConfig(
        arch="transformer",
        enc_layers=config["encoder_layers"],
        dec_layers=config["decoder_layers"],
        n_head=config["encoder_attention_heads"],
        d_model=config["d_model"],
        d_ff=config["encoder_ffn_dim"],
        dropout=float(config.get("dropout", 0.1)),
        attention_dropout=float(config.get("attention_dropout", 0.0)),  # OPUS-MT: none on the attention weights
        bias=True,
        positions="marian",
        tie_output=config.get("tie_word_embeddings", True),
        activation=ACTIVATIONS[config["activation_function"]],
        norm="post",
        scale_embeddings=bool(config.get("scale_embedding", False)),
        logits_bias=True,
        max_positions=positions,
    )
    data = DataConfig(src_lang=languages[0], tgt_lang=languages[1], max_len=positions - 1)
    tokenizer = TokenizerConfig(kind="marian", vocab_size=vocab_size)
    train = TrainConfig(precision="fp32")  # the checkpoint's dtype: decoding follows it unless asked otherwise
    return Config(
        name=out.name,
        out_dir=str(out),
        data=data,
        tokenizer=tokenizer,
        model=model,
        train=train,
        decode=decode_defaults(config["generation"]),
    )


# generate() settings mt's search does not follow, at transformers' defaults (a checkpoint that sets
# another value is told so); the others are followed: num_beams, length_penalty, max_length,
# max_new_tokens, renormalize_logits, and <pad> banned and </s> forced at the end, which mt always does.
NOT_FOLLOWED = {
    "early_stopping": False,  # mt's marian scoring stops as transformers does with this False
    "min_length": 0,
    "min_new_tokens": None,
    "no_repeat_ngram_size": 0,
    "encoder_no_repeat_ngram_size": 0,
    "repetition_penalty": 1.0,
    "do_sample": False,
    "num_beam_groups": 1,
    "diversity_penalty": 0.0,
    "num_return_sequences": 1,
    "exponential_decay_length_penalty": None,
    "forced_bos_token_id": None,
    "suppress_tokens": None,
    "begin_suppress_tokens": None,
}


def decode_defaults(config: dict) -> DecodeOptions:
    """The decoding `generate()` does with the checkpoint's own settings (generation_config.json over
    config.json): its beam, length penalty and output cap, scored as transformers scores. Its
    max_length counts the decoder's start token and </s>, max_new_tokens </s>, mt's max_len neither."""
    beam = int(config.get("num_beams") or 1)
    max_length = int(config.get("max_length") or 20)  # transformers' own default
    max_new = config.get("max_new_tokens")
    return DecodeOptions(
        beam=beam,
        length_penalty=float(config.get("length_penalty", 1.0)),
        max_len=max(1, int(max_new) - 1 if max_new else max_length - 2),
        scoring="marian",
        renormalize=True if config.get("renormalize_logits") else None,  # None: transformers' default, False
    )


def settings_not_followed(config: dict) -> list[str]:
    """The generation settings a checkpoint sets that mt's decoding does not follow, as `name=value`."""
    out = [f"{k}={config[k]!r}" for k, default in NOT_FOLLOWED.items() if config.get(k, default) != default]
    if [config.get("pad_token_id")] not in (config.get("bad_words_ids") or [[config.get("pad_token_id")]]):
        out.append("bad_words_ids (other than <pad>)")
    return out


def _first(state: dict, *names: str) -> torch.Tensor:
    for name in names:
        if name in state:
            return state[name]
    raise UserError(f"the weights hold no {names[0]}; is this a MarianMT checkpoint?")


def _copy_linear(state: dict, theirs: str, ours: str, out: dict) -> None:
    out[f"{ours}.weight"], out[f"{ours}.bias"] = _first(state, f"{theirs}.weight"), _first(state, f"{theirs}.bias")


def _copy_attention(state: dict, theirs: str, ours: str, out: dict) -> None:
    """q, k and v projections into mt's fused (3D, D) layout, rows in that order."""
    for part in ("weight", "bias"):
        out[f"{ours}.qkv.{part}"] = torch.cat([_first(state, f"{theirs}.{p}_proj.{part}") for p in "qkv"])
    _copy_linear(state, f"{theirs}.out_proj", f"{ours}.proj", out)


def map_weights(state: dict, config: dict, order: torch.Tensor) -> dict[str, torch.Tensor]:
    """mt's state dict from MarianMT's; `order` holds the Marian id of each mt id."""
    shared = ("model.shared.weight", "model.encoder.embed_tokens.weight", "model.decoder.embed_tokens.weight")
    tables = [state[name] for name in shared if name in state]
    if any(not torch.equal(t, tables[0]) for t in tables[1:]):
        raise UserError("the encoder and the decoder have embedding tables of their own; not supported (mt shares one)")
    embed = _first(state, *shared)[order]
    out = {"embed.tokens.weight": embed}
    out["head.weight"] = embed if config.get("tie_word_embeddings", True) else _first(state, "lm_head.weight")[order]
    out["head.bias"] = state.get("final_logits_bias", torch.zeros(1, embed.size(0))).reshape(-1)[order]
    for side, layers in (("encoder", config["encoder_layers"]), ("decoder", config["decoder_layers"])):
        for i in range(layers):
            theirs, ours = f"model.{side}.layers.{i}", f"{side}.{i}"
            _copy_attention(state, f"{theirs}.self_attn", f"{ours}.attn", out)
            _copy_linear(state, f"{theirs}.self_attn_layer_norm", f"{ours}.ln_attn", out)
            _copy_linear(state, f"{theirs}.fc1", f"{ours}.ff.up", out)
            _copy_linear(state, f"{theirs}.fc2", f"{ours}.ff.down", out)
            _copy_linear(state, f"{theirs}.final_layer_norm", f"{ours}.ln_ff", out)
            if side == "decoder":
                _copy_attention(state, f"{theirs}.encoder_attn", f"{ours}.cross", out)
                _copy_linear(state, f"{theirs}.encoder_attn_layer_norm", f"{ours}.ln_cross", out)
    return {name: tensor.float() for name, tensor in out.items()}


def guess_languages(source: str, extra: dict) -> tuple[str, str] | None:
    if extra.get("source_lang") and extra.get("target_lang"):
        return extra["source_lang"], extra["target_lang"]
    named = re.search(r"opus-mt-([a-z]{2,3})-([a-z]{2,3})$", source.rstrip("/"))
    return (named.group(1), named.group(2)) if named else None


def _tokenizer(folder: Path, vocab: dict) -> MarianVocabTokenizer:
    protos = [(folder / name).read_bytes() for name in ("source.spm", "target.spm")]
    try:
        return MarianVocabTokenizer.from_marian(*protos, vocab)
    except RuntimeError:  # SentencePiece refuses the bytes
        raise UserError(f"{folder}: source.spm or target.spm is not a SentencePiece model") from None


def import_marian(source: str, out: str | Path | None = None, languages: tuple[str, str] | None = None) -> Path:
    """Write the Marian model at `source` (a directory or a hub name) as a new run directory."""
    out = Path(out) if out else Path("runs") / Path(source.rstrip("/")).name
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise UserError(f"{out} exists; an import never overwrites a run: choose another --out")
    folder = locate(source)
    config, extra, vocab = read_model_dir(folder)
    languages = languages or guess_languages(source, extra)
    if languages is None:
        raise UserError(f"cannot tell the languages of {source}; say them: --src-lang fr --tgt-lang en")
    tokenizer = _tokenizer(folder, vocab)
    cfg = run_config(config, languages, tokenizer.vocab_size, out)
    model = build_model(cfg, tokenizer.vocab_size)
    try:
        model.load_state_dict(map_weights(read_weights(folder), config, torch.tensor(tokenizer.marian_ids(vocab))))
    except RuntimeError as e:
        raise UserError(
            f"{folder}: the weights do not fit config.json ({str(e).splitlines()[-1].strip()[:160]})"
        ) from None
    _write_run(out, cfg, tokenizer, model, source)
    print(model_card(source, cfg, model, tokenizer.vocab_size), file=sys.stderr)
    if [config["pad_token_id"]] not in (config["generation"].get("bad_words_ids") or []):
        print("note: its generation config lets <pad> be produced; mt never produces it", file=sys.stderr)
    if ignored := settings_not_followed(config["generation"]):
        print(f"note: mt's decoding does not follow these generation settings: {', '.join(ignored)}", file=sys.stderr)
    return out


def model_card(source: str, cfg: Config, model: torch.nn.Module, vocab: int) -> str:
    """One line on what was imported and how it will decode."""
    m, d = cfg.model, cfg.decode
    size = sum(p.numel() for p in model.parameters()) / 1e6
    return (
        f"imported {source}: Marian {m.enc_layers}+{m.dec_layers} layers, {m.d_model} wide, {m.activation}, "
        f"{size:.1f}M parameters, {vocab:,} pieces, {cfg.data.src_lang}->{cfg.data.tgt_lang}, fp32; decodes as its "
        f"generation config: beam {d.beam}, length penalty {d.length_penalty:g} (length ** alpha), at most "
        f"{d.max_len} tokens (decode.scoring: marian)"
    )


def _write_run(out: Path, cfg: Config, tokenizer: MarianVocabTokenizer, model: torch.nn.Module, source: str) -> None:
    """Write the run beside `out` and rename it into place: an interrupted import leaves no half run."""
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}-importing-", dir=out.parent))
    try:
        tmp.chmod(0o755)
        tokenizer.save(tmp)
        save_config(cfg, tmp / "config.yaml")
        save_checkpoint(tmp / BEST, {"model": model.state_dict(), "config": cfg.to_dict(), "imported_from": source})
        if out.exists():
            out.rmdir()  # empty, checked above
        tmp.rename(out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
