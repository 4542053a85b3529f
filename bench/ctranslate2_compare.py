"""Side by side with CTranslate2 on CPU: the same trained model, converted, decoding the same test
set with int8 weights, against mt's own decoding (fp32 and --quantize int8).

    pip install ctranslate2                                          # optional; not a dependency of mt
    python bench/ctranslate2_compare.py --model runs/fr_en_cpu       # Multi30k test_2016_flickr

The conversion maps mt's pre-LayerNorm Transformer (fused self-attention QKV, cross-attention
query / fused key-value split, GELU feed-forward, learned positions, tied output) onto
CTranslate2's TransformerSpec, weight for weight. Writes bench/results/ctranslate2.json.
"""

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import sacrebleu
import torch

from mt.hardware import describe
from mt.parallel_data import columns, load_pairs
from mt.tokenizer import SPECIALS, SentencePieceTokenizer
from mt.translator import Translator


def convert(model, tokenizer: SentencePieceTokenizer, out_dir: Path, quantization: str) -> None:
    """Write `model` as a CTranslate2 model directory."""
    from ctranslate2.specs import common_spec, transformer_spec

    n = model.n_head
    spec = transformer_spec.TransformerSpec.from_config(
        (len(model.encoder), len(model.decoder)), n, pre_norm=True, activation=common_spec.Activation.GELU)

    def linear(target, weight, bias=None):
        target.weight = weight.detach().float().numpy()
        if bias is not None:
            target.bias = bias.detach().float().numpy()

    def norm(target, ln):
        target.gamma = ln.weight.detach().numpy()
        target.beta = ln.bias.detach().numpy() if ln.bias is not None else torch.zeros_like(ln.weight).numpy()

    def feed_forward(target, block):
        norm(target.layer_norm, block.ln_ff)
        linear(target.linear_0, block.ff.up.weight, block.ff.up.bias)
        linear(target.linear_1, block.ff.down.weight, block.ff.down.bias)

    def self_attention(target, block):
        norm(target.layer_norm, block.ln_attn)
        linear(target.linear[0], block.attn.qkv.weight, block.attn.qkv.bias)
        linear(target.linear[1], block.attn.proj.weight, block.attn.proj.bias)

    d = model.ln_enc.weight.numel()
    tokens = model.embed.tokens.weight.detach().numpy()
    positions = model.embed.positions.table.detach().numpy()
    for side in (spec.encoder, spec.decoder):
        side.scale_embeddings = model.embed.scale != 1.0
        side.position_encodings.encodings = positions
    spec.encoder.embeddings[0].weight = tokens
    spec.decoder.embeddings.weight = tokens
    norm(spec.encoder.layer_norm, model.ln_enc)
    norm(spec.decoder.layer_norm, model.ln_dec)
    spec.decoder.projection.weight = model.head.weight.detach().numpy()
    for target, block in zip(spec.encoder.layer, model.encoder):
        self_attention(target.self_attention, block)
        feed_forward(target.ffn, block)
    for target, block in zip(spec.decoder.layer, model.decoder):
        self_attention(target.self_attention, block)
        norm(target.attention.layer_norm, block.ln_cross)
        w_q, w_kv = block.cross.qkv.weight.split([d, 2 * d])
        b_q, b_kv = block.cross.qkv.bias.split([d, 2 * d]) if block.cross.qkv.bias is not None else (None, None)
        linear(target.attention.linear[0], w_q, b_q)
        linear(target.attention.linear[1], w_kv, b_kv)
        linear(target.attention.linear[2], block.cross.proj.weight, block.cross.proj.bias)
        feed_forward(target.ffn, block)
    vocab = [tokenizer.sp.id_to_piece(i) for i in range(tokenizer.vocab_size)]
    spec.register_source_vocabulary(vocab)
    spec.register_target_vocabulary(vocab)
    spec.config.unk_token, spec.config.bos_token, spec.config.eos_token = SPECIALS[1], SPECIALS[2], SPECIALS[3]
    spec.config.decoder_start_token = SPECIALS[2]
    spec.validate()
    spec.optimize(quantization=quantization)
    spec.save(str(out_dir))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--model", default="runs/fr_en_cpu")
    p.add_argument("--test", default="multi30k:test_2016_flickr")
    p.add_argument("--batch-size", type=int, default=64)
    args = p.parse_args()
    try:
        import ctranslate2
    except ImportError:
        sys.exit("error: this comparison needs CTranslate2: pip install ctranslate2")
    translator = Translator.load(args.model, "cpu")
    cfg, tokenizer = translator.cfg, translator.tokenizer
    src, ref = columns(load_pairs(args.test, "test", cfg.data.src_lang, cfg.data.tgt_lang), "src", "tgt")
    threads = torch.get_num_threads()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        convert(translator.model, tokenizer, Path(tmp), "int8")
        ct2 = ctranslate2.Translator(tmp, device="cpu", intra_threads=threads, inter_threads=1)
        pieces = [tokenizer.sp.encode(s, out_type=str)[: cfg.data.max_len] + [SPECIALS[3]] for s in src]
        for beam in (1, 5):
            start = time.perf_counter()
            results = ct2.translate_batch(pieces, beam_size=beam, max_batch_size=args.batch_size,
                                          length_penalty=cfg.decode.length_penalty, max_decoding_length=cfg.data.max_len)
            seconds = time.perf_counter() - start
            hyp = [tokenizer.sp.decode_pieces(r.hypotheses[0]) for r in results]
            rows.append({"engine": "CTranslate2 int8", "beam": beam, "seconds": round(seconds, 2),
                         "bleu": round(sacrebleu.corpus_bleu(hyp, [ref]).score, 2)})
    for quantize in (None, "int8"):
        ours = Translator.load(args.model, "cpu", quantize)
        for beam in (1, 5):
            start = time.perf_counter()
            hyp = ours.translate(src, beam=beam, batch_size=args.batch_size)
            seconds = time.perf_counter() - start
            rows.append({"engine": f"mt {quantize or 'fp32'}", "beam": beam, "seconds": round(seconds, 2),
                         "bleu": round(sacrebleu.corpus_bleu(hyp, [ref]).score, 2)})
    for r in rows:
        print(f"{r['engine']:<18} beam {r['beam']}  {r['seconds']:7.2f} s  BLEU {r['bleu']:5.2f}")
    out = Path("bench/results/ctranslate2.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"model": args.model, "test": args.test, "sentences": len(src), "batch_size": args.batch_size,
                               "cpu": describe(torch.device("cpu")), "ctranslate2": ctranslate2.__version__,
                               "rows": rows}, indent=2))


if __name__ == "__main__":
    main()
