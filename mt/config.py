"""Recipes: a typed dataclass tree, a strict YAML loader and dotted `section.key=value` overrides.

Every key is checked: an unknown key, a wrong type or a missing required field is a one-line
UserError naming the key (and, for a typo, the closest valid name).

A recipe may hold per-device blocks, `cpu:` and `cuda:`, each a partial recipe. Once
`train.device` is resolved (auto: cuda when visible), the matching block is merged over the
recipe; on a CPU that trains in fp32 (no bf16 units: the slowest kind, `mt.hardware`), a
`cpu_fp32:` block is laid over that. The command line's `section.key=value` overrides win over
all of them. The saved run config records the merged result, and which blocks made it.
"""

from __future__ import annotations

import copy
import dataclasses
import difflib
import re
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Union

import yaml

from mt.decode_options import DecodeOptions
from mt.errors import UserError
from mt.files import split_lines

# A corpus is a catalog name ("multi30k", "multi30k:test_2017_flickr") or a mapping handed to
# `datasets.load_dataset` (see mt/data/corpora.py).
CorpusSpec = Union[str, dict]  # noqa: UP007 (a runtime value: X | Y would need Python 3.10's types)


@dataclass
class DataConfig:
    """The corpora and how they are cut into batches. Corpus specs: data/README.md and mt/data/corpora.py."""

    corpus: str | None = None  # language modelling: a catalog corpus of plain text, or a path to a UTF-8 text file
    block_size: int = 256  # language modelling: context length in tokens
    src_lang: str = "fr"  # translation: the source language's code, as the corpora name it
    tgt_lang: str = "en"  # translation: the target language's code
    train: list[CorpusSpec] = field(
        default_factory=list
    )  # translation: training corpora, concatenated, or mixed by weight
    valid: CorpusSpec | list[CorpusSpec] | None = None  # translation: validation set(s); best.pt follows the first
    valid_pairs: int | None = None  # translation: pairs of each validation set that training scores (a fixed draw)
    test: CorpusSpec | list[CorpusSpec] | None = None  # translation: test set(s), scored by the end-of-training report
    clean: bool = False  # translation: strip whitespace, drop training pairs with no letters or source = target
    dedup: bool = False  # translation: drop exactly repeated training pairs
    held_out: bool = True  # translation: drop training pairs whose source is a validation or test sentence
    draw: int | None = None  # translation: pairs read, each corpus its weight's share (no weights: each at most this)
    max_len: int = 128  # translation: longer pairs (in tokens) are dropped
    max_len_ratio: float = 3.0  # translation: pairs whose token lengths differ more are dropped
    max_tokens: int = 4096  # translation: tokens per batch (source or target, the larger)
    num_proc: int = 0  # translation: processes that encode the corpora; 0 = one per 100k pairs, up to the cores

    @property
    def valid_sets(self) -> list[CorpusSpec]:
        """data.valid as a list, the first (the one best.pt follows) first; none: empty."""
        if self.valid is None:
            return []
        return self.valid if isinstance(self.valid, list) else [self.valid]

    @property
    def test_sets(self) -> list[CorpusSpec]:
        """data.test as a list; none: empty."""
        if not self.test:
            return []
        return self.test if isinstance(self.test, list) else [self.test]


@dataclass
class TokenizerConfig:
    """Trained on the training corpora and saved in the run directory (cached by content)."""

    kind: Literal["char", "sentencepiece", "marian"] = "char"  # sentencepiece: joint; marian: imported, never trained
    vocab_size: int = 8000  # SentencePiece pieces, the four special ids included
    model_type: Literal["unigram", "bpe"] = "unigram"  # SentencePiece's algorithm
    sampling_alpha: float = 0.0  # > 0: subword regularization while training (unigram only)
    max_pairs: int = 1_000_000  # SentencePiece learns from at most this many pairs, drawn at random


@dataclass
class ModelConfig:
    """The network. The options Marian (OPUS-MT) models need are options here, set by mt.import."""

    arch: Literal["gpt", "bigram", "transformer"] = "gpt"  # decoder-only, a lookup table, or encoder-decoder
    n_layer: int = 6  # gpt: blocks
    enc_layers: int = 6  # transformer: encoder blocks
    dec_layers: int = 6  # transformer: decoder blocks
    n_head: int = 6  # attention heads
    d_model: int = 384  # model width
    d_ff: int | None = None  # feed-forward width; null: 4 * d_model
    dropout: float = 0.0  # of the embeddings, every sublayer's output and, unless set below, the attention weights
    attention_dropout: float | None = None  # of the attention weights; default model.dropout
    bias: bool = True  # biases in the Linear and LayerNorm layers
    positions: Literal["learned", "sinusoidal", "marian"] = "learned"  # marian: all sines, then all cosines
    tie_output: bool = True  # output projection shares the embedding matrix
    activation: Literal["gelu", "relu", "swish"] = "gelu"  # of the feed-forward layers
    # The encoder-decoder only:
    norm: Literal["pre", "post"] = "pre"  # LayerNorm before each sublayer, or after the residual sum (Marian)
    scale_embeddings: bool = True  # token embeddings times sqrt(d_model)
    logits_bias: bool = False  # a bias on the output logits (Marian's final_logits_bias)
    max_positions: int | None = None  # transformer: position table size; null: data.max_len + 1


@dataclass
class PlanRule:
    """How a time budget adapts the run to the machine, by the epochs its first plan covers: under
    `few_epochs`, steps of half the micro-batches (more updates); over `many_epochs`, dropout of at
    least `dropout` (less overfitting). Both from warm-up's end; null turns a part off."""

    few_epochs: float | None = 1.1  # fewer planned epochs: steps of half train.grad_accum's micro-batches
    many_epochs: float | None = 3.25  # more planned epochs: model.dropout raised to at least `dropout`
    dropout: float = 0.1  # the dropout a plan of many epochs trains with


@dataclass
class TrainConfig:
    """The optimizer, the schedule, when to evaluate and when to stop, and on what."""

    batch_size: int = 64  # language modelling: sequences per step (per process under torchrun)
    grad_accum: int = 1  # micro-batches whose gradients make one optimizer step
    micro_batch_workers: int = 0  # CPU, one process: micro-batches at once; 0 = one per thread, up to grad_accum
    max_steps: int = 5000  # optimizer steps at most
    max_minutes: float | None = None  # time budget: a step plan made after warm-up (mt/training/plan.py)
    plan: PlanRule = field(default_factory=PlanRule)  # what a time budget's plan adapts (mt/training/plan.py)
    init_from: str | None = None  # fine-tune: start from this run directory's (or checkpoint's) weights and tokenizer
    lr: float = 1e-3  # peak learning rate, reached at the end of warm-up
    min_lr: float | None = None  # cosine floor; null: lr / 10
    schedule: Literal["cosine", "inverse_sqrt"] = "cosine"  # after warm-up: cosine to the last step, or 1/sqrt
    warmup_steps: int = 100  # linear warm-up from 0
    weight_decay: float = 0.1  # AdamW's, on matrices only
    beta2: float = 0.99  # AdamW's second-moment decay
    grad_clip: float = 1.0  # gradient norm clipped to this; 0: off
    label_smoothing: float = 0.0  # of the cross-entropy
    eval_every: int = 250  # steps between evaluations (translation: validation loss and greedy BLEU)
    eval_batches: int = 200  # language modelling: batches averaged per loss estimate
    patience: int | None = None  # stop after this many evaluations without improvement
    log_every: int = 10  # steps between progress-bar updates (each one syncs the device)
    device: Literal["auto", "cpu", "cuda"] = "auto"  # auto: CUDA when one is visible; picks the recipe's device block
    precision: Literal["auto", "fp32", "bf16"] = "auto"  # auto: bf16 autocast on CUDA and bf16-unit CPUs, else fp32
    compile: bool = False  # train through torch.compile (on a CPU it needs a C++ compiler)
    average_last: int = 0  # >= 2: keep the last N evaluations' weights and average them when training stops
    report: bool = True  # at the end: score best on the test sets, translate the demo, write results.json
    tensorboard: bool = False  # log to RUN_DIR/tensorboard (needs the tensorboard extra)


@dataclass
class DistillConfig:
    """Sequence-level distillation (docs/distillation.md): a teacher translates sources drawn from
    data.train, once, into RUN_DIR/distill, and the model trains on its translations instead."""

    teacher: str | None = None  # a run directory (trained or made by mt.import) to learn from; null: no distillation
    sentences: int = 300_000  # training sources drawn for the teacher by data.train's weights (the distinct ones go)
    beam: int = 1  # the teacher's beam; 1 is greedy (fastest)
    int8: bool = True  # the teacher decodes with int8 weights (CPU only)
    device: Literal["cpu", "cuda"] = "cpu"  # where the teacher decodes
    processes: int | Literal["auto"] = "auto"  # CPU decoding processes; auto: one per thread; 0: threads of this one
    min_score: float | None = None  # drop pairs whose teacher log-probability per token is below this; null: keep
    max_len_ratio: float | None = None  # drop pairs whose teacher token lengths differ more than this; null: keep
    original_weight: float = 0.0  # share of each epoch drawn from data.train's original pairs (by their weights)


@dataclass
class Config:
    """A whole recipe: the run's name and seed, then one section each."""

    name: str  # the run's name: its directory is runs/<name> unless out_dir says otherwise
    out_dir: str | None = None  # the run directory; null: runs/<name>
    seed: int = 1337  # weights, batch order, dropout and sampling; fixed for a run (--resume keeps it)
    data: DataConfig = field(default_factory=DataConfig)
    tokenizer: TokenizerConfig = field(default_factory=TokenizerConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    decode: DecodeOptions = field(default_factory=DecodeOptions)
    distill: DistillConfig = field(default_factory=DistillConfig)
    device_block: str | None = None  # set by the loader: the per-device block(s) applied, e.g. "cpu+cpu_fp32"

    @property
    def run_dir(self) -> Path:
        return Path(self.out_dir) if self.out_dir else Path("runs") / self.name

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


# ---------------------------------------------------------------------------------------------
# Loading and validation

DEVICE_BLOCKS = ("cpu", "cuda", "cpu_fp32")
_FLOAT = re.compile(r"[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?")


def _type_name(tp) -> str:
    origin = typing.get_origin(tp)
    if origin is Literal:
        return " | ".join(repr(a) for a in typing.get_args(tp))
    if origin in (Union, types.UnionType):
        return " | ".join(_type_name(a) for a in typing.get_args(tp))
    if origin is list:
        return f"list of {_type_name(typing.get_args(tp)[0])}"
    return {type(None): "null", dict: "mapping"}.get(tp, getattr(tp, "__name__", str(tp)))


def _coerce(value: Any, tp, key: str):
    """Return `value` checked against the annotation `tp`, or raise UserError naming `key`."""
    origin = typing.get_origin(tp)
    if origin in (Union, types.UnionType):
        for option in typing.get_args(tp):
            try:
                return _coerce(value, option, key)
            except UserError:
                pass
    elif origin is Literal:
        if value in typing.get_args(tp):
            return value
    elif origin is list:
        if isinstance(value, list):
            return [_coerce(v, typing.get_args(tp)[0], key) for v in value]
    elif tp is type(None):
        if value is None:
            return None
    elif tp is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        if isinstance(value, str) and _FLOAT.fullmatch(value.strip()):  # YAML 1.1 reads 3e-4 as a string
            return float(value)
    elif tp is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    elif isinstance(value, tp):
        return value
    raise UserError(f"{key}: expected {_type_name(tp)}, got {value!r}")


def _section(cls, raw: dict, prefix: str, source: str):
    hints = typing.get_type_hints(cls)
    names = [f.name for f in dataclasses.fields(cls)]
    for key in raw:
        if key not in names:
            close = difflib.get_close_matches(str(key), names, n=1)
            hint = f" (did you mean '{prefix}{close[0]}'?)" if close else f" (valid: {', '.join(names)})"
            raise UserError(f"{source}: unknown key '{prefix}{key}'{hint}")
    kwargs = {}
    for f in dataclasses.fields(cls):
        key = prefix + f.name
        tp = hints[f.name]
        if dataclasses.is_dataclass(tp):
            section = raw.get(f.name, {})
            if section is None:
                section = {}
            if not isinstance(section, dict):
                raise UserError(f"{source}: '{key}' must be a mapping of keys, got {section!r}")
            kwargs[f.name] = _section(tp, section, key + ".", source)
        elif f.name in raw:
            kwargs[f.name] = _coerce(raw[f.name], tp, f"{source}: {key}")
        elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            raise UserError(f"{source}: missing required key '{key}'")
    try:
        return cls(**kwargs)
    except UserError as e:  # a section that checks itself (decode): name the recipe and section
        raise UserError(f"{source}: {prefix}{e}") from None


def _apply_override(raw: dict, override: str) -> None:
    if "=" not in override:
        raise UserError(f"override '{override}' must look like section.key=value (e.g. train.max_steps=100)")
    dotted, text = override.split("=", 1)
    try:
        value = yaml.safe_load(text) if text else ""
    except yaml.YAMLError:
        value = text
    *sections, last = dotted.strip().split(".")
    node = raw
    for s in sections:
        child = node.setdefault(s, {})
        if not isinstance(child, dict):  # e.g. "name.x=1"; _build reports the bad key
            child = node[s] = {}
        node = child
    node[last] = value


def _check(cfg: Config, source: str) -> None:
    m, d, t = cfg.model, cfg.data, cfg.train
    positive = {
        "model.n_head": m.n_head,
        "model.d_model": m.d_model,
        "data.block_size": d.block_size,
        "data.max_len": d.max_len,
        "data.max_tokens": d.max_tokens,
        "train.batch_size": t.batch_size,
        "train.grad_accum": t.grad_accum,
        "train.max_steps": t.max_steps,
        "train.eval_every": t.eval_every,
        "train.eval_batches": t.eval_batches,
        "train.log_every": t.log_every,
        "tokenizer.vocab_size": cfg.tokenizer.vocab_size,
        "tokenizer.max_pairs": cfg.tokenizer.max_pairs,
    }
    for key, value in positive.items():
        if value <= 0:
            raise UserError(f"{source}: {key} must be positive, got {value}")
    if t.average_last < 0:
        raise UserError(
            f"{source}: train.average_last must be 0 (off) or the number of snapshots to average, got {t.average_last}"
        )
    for key, epochs in (("few_epochs", t.plan.few_epochs), ("many_epochs", t.plan.many_epochs)):
        if epochs is not None and epochs <= 0:
            raise UserError(f"{source}: train.plan.{key} must be positive or null (off), got {epochs}")
    if t.micro_batch_workers < 0:
        raise UserError(
            f"{source}: train.micro_batch_workers must be 0 (automatic) or a number, got {t.micro_batch_workers}"
        )
    if d.valid_pairs is not None and d.valid_pairs < 1:
        raise UserError(f"{source}: data.valid_pairs must be >= 1 (or null: every pair), got {d.valid_pairs}")
    if d.draw is not None and d.draw < 1:
        raise UserError(f"{source}: data.draw must be a number of pairs >= 1 (or null: every pair), got {d.draw}")
    if d.num_proc < 0:
        raise UserError(f"{source}: data.num_proc must be 0 (automatic) or a number of processes, got {d.num_proc}")
    if m.d_model % m.n_head:
        raise UserError(f"{source}: model.d_model ({m.d_model}) must be divisible by model.n_head ({m.n_head})")
    probabilities = {
        "model.dropout": m.dropout,
        "model.attention_dropout": m.attention_dropout,
        "train.plan.dropout": t.plan.dropout,
    }
    for key, p in probabilities.items():
        if p is not None and not 0.0 <= p < 1.0:
            raise UserError(f"{source}: {key} must be in [0, 1), got {p}")
    if t.lr <= 0 or t.warmup_steps < 0:
        raise UserError(f"{source}: train.lr must be positive and train.warmup_steps non-negative")
    if m.arch in ("gpt", "bigram") and not d.corpus:
        raise UserError(f"{source}: model.arch '{m.arch}' needs data.corpus (e.g. data.corpus: tinyshakespeare)")
    _check_shape(cfg, source)
    _check_distill(cfg, source)


def _check_distill(cfg: Config, source: str) -> None:
    """The distill section's values; the teacher itself is checked when training starts."""
    x = cfg.distill
    if x.teacher is None:
        return
    if cfg.model.arch != "transformer":
        raise UserError(f"{source}: distill.teacher needs model.arch 'transformer' (a translation student)")
    if x.sentences < 1:
        raise UserError(f"{source}: distill.sentences must be a number of sentences >= 1, got {x.sentences}")
    if not 1 <= x.beam <= 256:
        raise UserError(f"{source}: distill.beam must be between 1 (greedy) and 256, got {x.beam}")
    if x.processes != "auto" and x.processes < 0:
        raise UserError(f"{source}: distill.processes must be auto, 0 (threads) or a number, got {x.processes}")
    if x.int8 and x.device == "cuda":
        raise UserError(f"{source}: distill.int8 is for a CPU teacher; set distill.int8=false with distill.device=cuda")
    if x.min_score is not None and x.min_score > 0:
        raise UserError(f"{source}: distill.min_score is a log-probability, <= 0 (or null: off), got {x.min_score}")
    if x.max_len_ratio is not None and x.max_len_ratio < 1:
        raise UserError(f"{source}: distill.max_len_ratio must be >= 1 (or null: off), got {x.max_len_ratio}")
    if not 0 <= x.original_weight < 1:
        raise UserError(f"{source}: distill.original_weight is a share in [0, 1), got {x.original_weight}")


def _check_trainable(cfg: Config, source: str) -> None:
    """What a recipe needs to train (a saved run's config may lack it: an imported model has no data)."""
    if cfg.model.arch == "transformer" and not (cfg.data.train and cfg.data.valid):
        raise UserError(f"{source}: model.arch 'transformer' needs data.train and data.valid corpora")


def _check_shape(cfg: Config, source: str) -> None:
    """The options only the encoder-decoder has, and its positions against the sentence length."""
    m, defaults = cfg.model, ModelConfig()
    if m.arch != "transformer":
        for key in ("norm", "scale_embeddings", "logits_bias", "max_positions"):
            if getattr(m, key) != getattr(defaults, key):
                raise UserError(f"{source}: model.{key} applies to model.arch 'transformer' only")
        if m.positions == "marian" or cfg.tokenizer.kind == "marian":
            raise UserError(f"{source}: Marian positions and tokenizers belong to model.arch 'transformer'")
    elif m.max_positions is not None and m.max_positions < cfg.data.max_len + 1:
        raise UserError(
            f"{source}: data.max_len ({cfg.data.max_len}) needs {cfg.data.max_len + 1} positions but the model "
            f"has model.max_positions {m.max_positions}; lower data.max_len"
        )


def _read_yaml(path: Path):
    """A YAML file's content; invalid UTF-8 or YAML is one line that names the file and the line."""
    text = "\n".join(split_lines(path.read_bytes(), str(path)))
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark else ""
        raise UserError(f"{path}{where}: not valid YAML ({getattr(e, 'problem', e)})") from None


def _read_recipe(path: Path) -> dict:
    if not path.is_file():
        raise UserError(f"recipe '{path}' not found (recipes live in recipes/, e.g. recipes/shakespeare_char.yaml)")
    raw = _read_yaml(path) or {}
    if not isinstance(raw, dict):
        raise UserError(f"{path}: a recipe must be a mapping of keys, got {type(raw).__name__}")
    return raw


def _trains_in_fp32(raw: dict, overrides) -> bool:
    """Whether a recipe (its cpu block merged, the overrides applied) trains in fp32 on this CPU."""
    import torch

    from mt.hardware import uses_bf16

    given = copy.deepcopy(raw)
    for o in overrides:
        _apply_override(given, o)
    train = given.get("train") if isinstance(given.get("train"), dict) else {}
    return not uses_bf16(torch.device("cpu"), str(train.get("precision", "auto")))


def _merge(base: dict, block: dict) -> dict:
    """`base` with `block`'s keys laid over it, section by section."""
    out = dict(base)
    for key, value in block.items():
        out[key] = _merge(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


def load_config(path: str | Path, overrides: list[str] = (), device: str | None = None) -> Config:
    """Read a recipe, apply its block for the device (`device`, else train.device resolved), then the
    `section.key=value` overrides; validate and return a Config."""
    path = Path(path)
    raw = _read_recipe(path)
    blocks = {name: raw.pop(name) for name in DEVICE_BLOCKS if name in raw}
    for name, block in blocks.items():  # both blocks are checked, whichever applies
        if not isinstance(block, dict):
            raise UserError(f"{path}: '{name}' must be a mapping of recipe keys, got {block!r}")
        if "name" in block or "device_block" in block or set(block) & set(DEVICE_BLOCKS):
            raise UserError(
                f"{path}: the '{name}' block may set sections (data, model, train, ...), not name or other blocks"
            )
        _section(Config, _merge(raw, block), "", f"{path} ({name} block)")
    given = dict(raw)
    for o in overrides:
        _apply_override(given, o)
    train_section = given.get("train") if isinstance(given.get("train"), dict) else {}
    from mt.hardware import resolve_device  # only here: reading a recipe needs no torch otherwise

    chosen = device or resolve_device(str(train_section.get("device", "auto")))
    applied = [name for name in (chosen,) if name in blocks]
    if chosen == "cpu" and "cpu_fp32" in blocks and _trains_in_fp32(_merge(raw, blocks.get("cpu", {})), overrides):
        applied.append("cpu_fp32")
    for name in applied:
        raw = _merge(raw, blocks[name])
    for o in overrides:
        _apply_override(raw, o)
    if "device_block" in raw:
        raise UserError(f"{path}: 'device_block' is set by the loader, not by a recipe")
    raw["device_block"] = "+".join(applied) or None
    source = str(path) + (" (with overrides)" if overrides else "")
    cfg = _section(Config, raw, "", source)
    if cfg.train.init_from:
        _inherit(cfg, raw, source)
    _check(cfg, source)
    _check_trainable(cfg, source)
    return cfg


# Keys a fine-tuning recipe may set in the sections it takes from train.init_from: they regularise
# training and leave the weights' shape and the tokenizer alone.
FREE_UNDER_INIT = {"model.dropout", "model.attention_dropout", "tokenizer.sampling_alpha", "tokenizer.max_pairs"}


def init_source(init_from: str, source: str = "train.init_from") -> tuple[Path, Path]:
    """(run directory, config file) of a train.init_from path: a run directory or a checkpoint in one."""
    origin = Path(init_from)
    if not origin.exists():
        raise UserError(f"{source}: train.init_from: {origin} does not exist (give a run directory or a checkpoint)")
    run_dir = origin.parent if origin.is_file() else origin
    saved = run_dir / "config.yaml"
    if not saved.is_file():
        raise UserError(
            f"{source}: train.init_from: {run_dir} holds no config.yaml; is it a run directory made by mt.train "
            "or mt.import?"
        )
    return run_dir, saved


def _inherit(cfg: Config, raw: dict, source: str) -> None:
    """Fine-tuning: the model and tokenizer sections become those of the run train.init_from names;
    a key the recipe states (in a section, a device block or an override) must agree with it."""
    run_dir, saved_path = init_source(cfg.train.init_from, source)
    saved = read_run_config(saved_path)
    if saved.model.arch == "transformer" and saved.model.max_positions is None:
        saved.model.max_positions = saved.data.max_len + 1  # its position table, whatever data.max_len is now
    if saved.model.arch == "gpt" and cfg.data.block_size != saved.data.block_size:
        raise UserError(
            f"{source}: data.block_size is {cfg.data.block_size} here but {saved.data.block_size} in "
            f"train.init_from {run_dir} (its position table); use {saved.data.block_size}"
        )
    for name in ("model", "tokenizer"):
        mine, theirs = getattr(cfg, name), getattr(saved, name)
        for key in raw.get(name) or {}:
            if f"{name}.{key}" in FREE_UNDER_INIT:
                setattr(theirs, key, getattr(mine, key))
            elif getattr(mine, key) != getattr(theirs, key):
                raise UserError(
                    f"{source}: {name}.{key} is {getattr(mine, key)!r} here but {getattr(theirs, key)!r} in "
                    f"train.init_from {run_dir}; leave it out (the {name} comes from there)"
                )
        setattr(cfg, name, theirs)


# Keys that runs saved by earlier versions may hold and that no longer mean anything to a trained run.
RETIRED = {"train": ("short_plan_steps", "long_plan_steps", "long_plan_dropout")}


def config_from_dict(raw: dict, source: str = "config") -> Config:
    """Rebuild a Config saved in a run directory (keys that are RETIRED are left out)."""
    for section, keys in RETIRED.items():
        for key in keys:
            (raw.get(section) or {}).pop(key, None)
    cfg = _section(Config, raw, "", source)
    _check(cfg, source)
    return cfg


def read_run_config(path: Path) -> Config:
    """The Config a run directory's config.yaml (at `path`) holds."""
    raw = _read_yaml(path)
    if not isinstance(raw, dict):
        raise UserError(f"{path}: a run's config must be a mapping of keys, got {type(raw).__name__}")
    return config_from_dict(raw, str(path))


def save_config(cfg: Config, path: Path) -> None:
    path.write_text(yaml.safe_dump(cfg.to_dict(), sort_keys=False, allow_unicode=True), encoding="utf-8")
