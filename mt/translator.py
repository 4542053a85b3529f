"""The translation API: `Translator.load(run_dir).translate(sentences, ...)`.

Loads a self-contained run directory (or one checkpoint file in it), encodes each source once,
decodes in length-sorted batches with the KV cache, and returns one string per input, in order.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

from mt.checkpoint import load_run
from mt.decode import beam_search, greedy_or_sample
from mt.errors import UserError
from mt.hardware import autocast, inference_precision, pick_device
from mt.quantize import quantize_int8
from mt.tokenizer import END

DEFAULT_MODEL = "runs/fr_en"


class Translator:
    """A trained translation model, its tokenizer and decoding settings, loaded from a run directory."""

    def __init__(self, cfg, tokenizer, model, device: torch.device):
        self.cfg, self.tokenizer, self.model, self.device = cfg, tokenizer, model, device
        self.max_src_tokens = model.max_len - 1  # room for the source's <END>

    @classmethod
    def load(cls, run_dir: str | Path = DEFAULT_MODEL, device: str = "cpu", quantize: str | None = None) -> Translator:
        """Load a run directory; quantize="int8" quantizes the Linear layers for CPU inference."""
        hint = "; train one with: python -m mt.train recipes/fr_en.yaml" if str(run_dir) == DEFAULT_MODEL else ""
        device = pick_device(device)
        cfg, tokenizer, model = load_run(run_dir, device, hint)
        if cfg.model.arch != "transformer":
            raise UserError(f"{run_dir} holds a {cfg.model.arch} language model; use python -m mt.generate --model {run_dir}")
        if quantize == "int8":
            model = quantize_int8(model)
        return cls(cfg, tokenizer, model, device)

    def translate(
        self, sentences: list[str], beam: int | None = None, temperature: float = 0.0, top_k: int | None = None,
        top_p: float | None = None, seed: int = 0, batch_size: int = 64, length_penalty: float | None = None,
        use_cache: bool = True, warn_truncated: bool = True,
    ) -> list[str]:
        """Translate `sentences`. beam >= 1: beam search (beam 1 is greedy); beam None and
        temperature > 0: sampling; beam None and temperature 0: greedy. Defaults to the recipe's beam."""
        if beam is None and temperature <= 0:
            beam = self.cfg.decode.beam
        alpha = self.cfg.decode.length_penalty if length_penalty is None else length_penalty
        generator = torch.Generator(device=self.device).manual_seed(seed)
        encoded = self.tokenizer.encode_batch(sentences)
        for i, ids in enumerate(encoded):
            if len(ids) > self.max_src_tokens and warn_truncated:
                print(f"warning: line {i + 1} has {len(ids)} tokens; translating its first {self.max_src_tokens}", file=sys.stderr)
            encoded[i] = ids[: self.max_src_tokens]
        outputs = [""] * len(sentences)
        todo = sorted((i for i, ids in enumerate(encoded) if ids), key=lambda i: len(encoded[i]))  # empty in, empty out
        for start in range(0, len(todo), batch_size):
            rows = todo[start : start + batch_size]
            width = len(encoded[rows[-1]]) + 1
            src = torch.zeros(len(rows), width, dtype=torch.long)
            for j, i in enumerate(rows):
                src[j, : len(encoded[i]) + 1] = torch.tensor(encoded[i] + [END])
            src = src.to(self.device)
            with autocast(self.device, inference_precision(self.device)):
                if beam is not None and beam > 1:
                    ids, _ = beam_search(self.model, src, beam, alpha, use_cache)
                else:  # beam 1 is greedy: the plain loop, without beam search's reordering
                    t = 0.0 if beam == 1 else temperature
                    ids, _ = greedy_or_sample(self.model, src, t, top_k, top_p, generator, use_cache)
            for i, out in zip(rows, ids):
                outputs[i] = self.tokenizer.decode(out)
        return outputs
