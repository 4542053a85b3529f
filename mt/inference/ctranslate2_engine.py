"""CTranslate2: export a trained run to a CTranslate2 model directory, and translate with it.

mt's Transformer (fused self-attention QKV, cross-attention split into query and key/value rows,
pre- or post-LayerNorm, GELU, ReLU or swish, the position table itself, tied or untied output,
an optional logits bias) maps weight for weight onto CTranslate2's TransformerSpec. The export
directory also holds the run's tokenizer and config, so `python -m mt.translate --engine
ctranslate2 --model DIR` needs nothing else, and the run's shortlist as CTranslate2's vocabulary
map (vmap.txt), which decoding on a CPU uses unless the shortlist is turned off. ctranslate2 is an
optional extra: pip install "mt[ctranslate2]".
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import torch

from mt.config import config_from_dict
from mt.data.tokenizer import load_tokenizer
from mt.data.vocab import SPECIALS
from mt.decode_options import DecodeOptions
from mt.errors import UserError, require_extra
from mt.inference.shortlist import Shortlist, run_shortlist
from mt.model import positions

CONFIG_FILE = "mt_config.json"
VMAP_FILE = "vmap.txt"  # the name CTranslate2 reads a vocabulary map by (use_vmap)


def _array(t: torch.Tensor):
    return t.detach().float().cpu().numpy()


def _linear(target, layer, weight=None, bias=None) -> None:
    target.weight = _array(layer.weight if weight is None else weight)
    b = layer.bias if weight is None else bias
    if b is not None:
        target.bias = _array(b)


def _norm(target, ln) -> None:
    target.gamma = _array(ln.weight)
    target.beta = _array(ln.bias) if ln.bias is not None else _array(torch.zeros_like(ln.weight))


def _block(target, block) -> None:
    """Self-attention and feed-forward of one encoder or decoder layer."""
    _norm(target.self_attention.layer_norm, block.ln_attn)
    _linear(target.self_attention.linear[0], block.attn.qkv)
    _linear(target.self_attention.linear[1], block.attn.proj)
    _norm(target.ffn.layer_norm, block.ln_ff)
    _linear(target.ffn.linear_0, block.ff.up)
    _linear(target.ffn.linear_1, block.ff.down)


def _cross(target, block) -> None:
    _norm(target.layer_norm, block.ln_cross)
    _linear(target.linear[0], block.cross.qkv, *block.cross.projection("q"))
    _linear(target.linear[1], block.cross.qkv, *block.cross.projection("kv"))
    _linear(target.linear[2], block.cross.proj)


def model_spec(model, vocab: list[str]):
    """The CTranslate2 TransformerSpec holding `model`'s weights."""
    from ctranslate2.specs import common_spec, transformer_spec

    first = model.encoder[0]
    activation = {"gelu": "GELU", "relu": "RELU", "swish": "SWISH"}[first.ff.activation]
    spec = transformer_spec.TransformerSpec.from_config(
        (len(model.encoder), len(model.decoder)),
        model.n_head,
        pre_norm=not first.post_norm,
        activation=getattr(common_spec.Activation, activation),
    )
    tokens, positions = _array(model.embed.tokens.weight), _array(model.embed.positions.table)
    for side in (spec.encoder, spec.decoder):
        side.scale_embeddings = model.embed.scale != 1.0  # CTranslate2 scales by sqrt(D), as mt does
        side.position_encodings.encodings = positions  # the table itself: learned or sinusoidal alike
    spec.encoder.embeddings[0].weight = tokens
    spec.decoder.embeddings.weight = tokens
    if not first.post_norm:  # post-LayerNorm stacks end without one
        _norm(spec.encoder.layer_norm, model.ln_enc)
        _norm(spec.decoder.layer_norm, model.ln_dec)
    _linear(spec.decoder.projection, model.head)
    for target, block in zip(spec.encoder.layer, model.encoder):
        _block(target, block)
    for target, block in zip(spec.decoder.layer, model.decoder):
        _block(target, block)
        _cross(target.attention, block)
    spec.register_source_vocabulary(vocab)
    spec.register_target_vocabulary(vocab)
    spec.config.unk_token, spec.config.bos_token, spec.config.eos_token = SPECIALS[1], SPECIALS[2], SPECIALS[3]
    spec.config.decoder_start_token = SPECIALS[2]
    return spec


def vmap_text(shortlist: Shortlist, vocab: list[str]) -> str:
    """A shortlist as CTranslate2's vocabulary map: a line per source piece, the piece, a tab and
    its target pieces joined by spaces; the line with an empty source holds those always allowed
    (CTranslate2 adds <unk>, the start and the end itself). Pieces with a space or tab in them
    cannot be written: none of SentencePiece's have one."""
    writable = [bool(p) and not any(c.isspace() for c in p) for p in vocab]
    pieces = lambda ids: " ".join(vocab[i] for i in dict.fromkeys(ids) if writable[i])  # noqa: E731
    lines = [f"\t{pieces(shortlist.frequent.tolist())}"]
    for source, targets in enumerate(shortlist.table.tolist()[: len(vocab)]):
        if writable[source] and source >= len(SPECIALS):
            lines.append(f"{vocab[source]}\t{pieces(targets)}")
    return "".join(line + "\n" for line in lines)


def export(run_dir: str | Path, out_dir: str | Path, quantization: str | None = None) -> Path:
    """Write run_dir's model as a CTranslate2 model directory with the tokenizer and config beside
    it, its shortlist where it has one (vmap.txt), and its confidence calibrator where it has one
    fitted to this checkpoint (an int8 export's confidences come from slightly other numbers)."""
    require_extra("ctranslate2", "ctranslate2", "the CTranslate2 export")
    from mt.inference.loading import load_run

    cfg, tokenizer, model = load_run(run_dir, "cpu")
    if cfg.model.arch != "transformer" or not hasattr(tokenizer, "vocabulary"):
        raise UserError(f"{run_dir}: only translation models with a SentencePiece tokenizer export to CTranslate2")
    out_dir = Path(out_dir)
    if out_dir.exists() and any(out_dir.iterdir()):
        raise UserError(f"{out_dir} exists and is not empty; choose a new --out folder")
    spec = model_spec(model, tokenizer.vocabulary())
    spec.validate()
    spec.optimize(quantization=quantization)
    out_dir.mkdir(parents=True, exist_ok=True)
    spec.save(str(out_dir))
    tokenizer.save(out_dir)
    (out_dir / CONFIG_FILE).write_text(json.dumps(cfg.to_dict(), indent=2))
    shortlist = run_shortlist([run_dir], tokenizer.fingerprint(), tokenizer.vocab_size)
    if shortlist is not None:
        (out_dir / VMAP_FILE).write_text(vmap_text(shortlist, tokenizer.vocabulary()), encoding="utf-8")
    _copy_calibrator(Path(run_dir), out_dir)
    return out_dir


def _copy_calibrator(run: Path, out_dir: Path) -> None:
    """The run's confidence.json beside the export, where it was fitted to the checkpoint exported."""
    from mt.checkpoint import fingerprint, run_and_checkpoint
    from mt.inference.confidence import FILE, Calibrator

    run_dir, checkpoint = run_and_checkpoint(run)
    saved = run_dir / FILE
    if checkpoint is not None and saved.is_file() and Calibrator.fitted_to(saved) == fingerprint(checkpoint):
        shutil.copyfile(saved, out_dir / FILE)


class CTranslate2Translator:
    """An exported model behind the same `translate` call as mt's Translator."""

    def __init__(self, model_dir: str | Path, device: str = "cpu", threads: int = 0, workers: int = 1):
        """`workers` batches decoded at once (CTranslate2's inter_threads), sharing `threads`
        (default: PyTorch's intra-op threads) between them."""
        ctranslate2 = require_extra("ctranslate2", "ctranslate2", "the CTranslate2 engine")
        model_dir = Path(model_dir)
        if not (model_dir / "model.bin").is_file() or not (model_dir / CONFIG_FILE).is_file():
            raise UserError(
                f"{model_dir} is not a CTranslate2 export of mt; make one with: "
                f"python -m mt.export --model RUN_DIR --format ctranslate2 --out {model_dir}"
            )
        self.cfg = config_from_dict(json.loads((model_dir / CONFIG_FILE).read_text()), str(model_dir / CONFIG_FILE))
        self.tokenizer = load_tokenizer(model_dir)
        self.options: DecodeOptions = self.cfg.decode
        self.max_src_tokens = positions(self.cfg) - 1  # room for the source's <END>
        self.said: set[str] = set()  # the notes printed, each once
        # the shortlist (mt.export's vmap.txt): on a CPU only, as mt's own engine uses it
        self.vmap = (model_dir / VMAP_FILE).is_file() and device != "cuda"
        threads = threads or torch.get_num_threads()
        self.engine = ctranslate2.Translator(
            str(model_dir),
            device="cuda" if device == "cuda" else "cpu",
            intra_threads=max(1, threads // workers),
            inter_threads=workers,
        )
        self.workers = workers
        self.model_dir, self._calibrator = model_dir, None

    def translate(
        self,
        sentences: list[str],
        options: DecodeOptions | None = None,
        *,
        batch_size: int = 64,
        hypotheses: bool = False,
        progress=None,
        stop=None,
        **changes,
    ):
        """As mt's Translator.translate. CTranslate2 cannot stop a batch once begun, so the
        sentences go to it a batch for each of its workers at a time, shortest first, and `stop`
        is asked between those calls: a server's request given up on stops once the batches in
        hand are done."""
        from mt.inference.search import Cancelled, Hypothesis, output_limit

        o = (options or self.options).replace(**changes)
        if o.glossary:
            raise UserError("the CTranslate2 engine has no constrained search to hold a glossary to: use --engine mt")
        self._say_what_is_not_followed(o)
        if o.sampling:
            import ctranslate2

            ctranslate2.set_random_seed(o.seed)
        pieces = [p[: self.max_src_tokens] for p in self.tokenizer.split(sentences)]
        todo = sorted((i for i, p in enumerate(pieces) if p), key=lambda i: len(pieces[i]))
        found = [[Hypothesis("", 0.0, [])] for _ in sentences]
        at_once = batch_size * self.workers
        for start in range(0, len(todo), at_once):
            if stop is not None and stop():
                raise Cancelled("the search was stopped")
            rows = todo[start : start + at_once]
            # mt's cap on each output (output_limit): CTranslate2 takes one for the call, so each
            # output is cut to its own after; <END> is not counted by CTranslate2
            caps = [output_limit(len(pieces[i]) + 1, self.max_src_tokens + 1, o.max_len) - 1 for i in rows]
            results = self._translate_batch([pieces[i] for i in rows], o, batch_size, max(caps))
            for i, cap, r in zip(rows, caps, results):
                found[i] = [
                    Hypothesis(self.tokenizer.join(h[:cap]), s, [self.tokenizer.piece_id(p) for p in h[:cap]], h[:cap])
                    for h, s in zip(r.hypotheses, r.scores)
                ]
            if progress:
                progress(len(rows))
        return found if hypotheses else [h[0].text for h in found]

    def _translate_batch(self, pieces: list[list[str]], o: DecodeOptions, batch_size: int, most: int):
        """One call of CTranslate2's search over `pieces` (each a source's tokens) with options `o`,
        each output `most` tokens at most."""
        return self.engine.translate_batch(
            [p + [SPECIALS[3]] for p in pieces],
            max_batch_size=batch_size,
            beam_size=o.beam,
            num_hypotheses=o.n_best,
            length_penalty=o.length_penalty,
            return_scores=True,
            max_decoding_length=most,
            min_decoding_length=0,  # as mt's search: <END> may come first (CTranslate2's default is 1)
            suppress_sequences=[[SPECIALS[0]], [SPECIALS[2]]],
            sampling_topk=(o.top_k or 0) if o.sampling else 1,
            sampling_topp=o.top_p or 1.0,
            sampling_temperature=o.temperature or 1.0,
            use_vmap=self.vmap and o.shortlist and not o.sampling,  # sampling: the whole vocabulary, as mt's
        )

    def token_logprobs(self, sources: list[str], outputs: list[list[int]], batch_size: int = 64) -> list[list[float]]:
        """As mt's Translator.token_logprobs: each output's tokens' log-probabilities, <END>'s last,
        by CTranslate2's forced scoring (its translate_batch gives a total alone)."""
        pieces = [p[: self.max_src_tokens] + [SPECIALS[3]] for p in self.tokenizer.split(sources)]
        targets = [[self.tokenizer.id_to_piece(i) for i in ids] for ids in outputs]
        return [list(r.log_probs) for r in self.engine.score_batch(pieces, targets, max_batch_size=batch_size)]

    def calibrator(self):
        """The confidence calibrator mt.export copied beside the model (checked against the run's
        checkpoint when it was exported), else the untrained rule, as is said once."""
        if self._calibrator is None:
            from mt.inference.confidence import FILE, Calibrator

            path = self.model_dir / FILE
            if path.is_file():
                self._calibrator = Calibrator.load(path, Calibrator.fitted_to(path))
            else:
                self.note_once(f"{self.model_dir} has no {FILE}: confidence is an untrained rule")
                self._calibrator = Calibrator.untrained()
        return self._calibrator

    def confidence(self, sources: list[str], best: list) -> list:
        from mt.inference.confidence import assess

        return assess(self, sources, best, self.calibrator())

    def _say_what_is_not_followed(self, o: DecodeOptions) -> None:
        """One line, once, for each decoding option CTranslate2's search has no equivalent of: it
        ranks beams by log-probability / length ** length_penalty (decode.scoring marian's form)."""
        notes = []
        if o.beam > 1 and o.scoring != "marian":
            notes.append(
                f"decode.scoring {o.scoring} is not followed: CTranslate2 ranks beams by log-probability / "
                "length ** length_penalty and stops its own way (--engine mt follows it)"
            )
        if o.renormalize is not None:
            notes.append("decode.renormalize is not followed: CTranslate2 normalises scores its own way")
        for note in notes:
            self.note_once(note)

    def note_once(self, note: str) -> None:
        """Print `note` to stderr, the first time only."""
        if note not in self.said:
            print(f"note: {note}", file=sys.stderr)
            self.said.add(note)
