"""The character GPT's training step against a nanoGPT-style peer, both in one process, on the machine at hand.

    python bench/gpt_peer.py                     # mt in fp32 and in bf16 (where native) against the peer in fp32
    python bench/gpt_peer.py --blocks 60 --block-steps 10 --precision fp32
    python bench/gpt_peer.py --compile mt        # mt's model through torch.compile, as train.compile=true
    TORCHINDUCTOR_CPP_WRAPPER=1 python bench/gpt_peer.py --compile both   # both compiled, C++ wrappers

Both models have nanoGPT's README CPU configuration (4 layers, 4 heads, 128 dims, block 64, batch
12, no dropout, no biases, tied embeddings) and train on the same random batches, so they do the
same arithmetic (but for mt's four special tokens in the vocabulary). mt's side is its own model,
loss, fused AdamW and gradient clipping, under the trainer's memory settings and autocast contexts.
The peer is a plain PyTorch GPT as nanoGPT describes it: one fused query/key/value projection,
PyTorch's fused causal attention, GELU MLP, cross-entropy over the logits, AdamW with decay on
matrices only (not fused on a CPU, as nanoGPT chooses there), gradient clipping at 1.0.
`--compile mt` passes mt's model through `torch.compile`, as `train.compile=true` does, against the
peer as nanoGPT's README runs it on a CPU (`--compile=False`); `--compile both` compiles the peer's
model too (nanoGPT's default). The first steps, untimed, compile.

The steps alternate in blocks (mt then peer, then peer then mt), so a virtual machine that changes
speed mid-run slows both alike; the result is the median over blocks of each block's own ratio
(peer's step time over mt's), with quartiles. Both share the process's threads and allocator (the C
library's, unless tcmalloc is preloaded). Needs no corpus. Writes bench/results/gpt_peer.json.
"""

import argparse
import json
import math
import statistics
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from mt.bench import CPU_GPT
from mt.config import load_config
from mt.errors import cli_entry
from mt.hardware import describe, require_cpp_compiler, uses_bf16
from mt.loss import token_loss
from mt.model import build_model
from mt.runtime import Runtime
from mt.training.optim import make_optimizer

CHARS = 65  # Tiny Shakespeare's distinct characters: the peer's vocabulary; mt adds its 4 special tokens


class PeerBlock(nn.Module):
    """Pre-LayerNorm block: causal self-attention, then a 4x GELU MLP."""

    def __init__(self, d: int, heads: int):
        super().__init__()
        self.heads = heads
        self.ln_1, self.ln_2 = nn.LayerNorm(d, bias=False), nn.LayerNorm(d, bias=False)
        self.c_attn, self.attn_proj = nn.Linear(d, 3 * d, bias=False), nn.Linear(d, d, bias=False)
        self.c_fc, self.mlp_proj = nn.Linear(d, 4 * d, bias=False), nn.Linear(4 * d, d, bias=False)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = (part.view(b, t, self.heads, -1).transpose(1, 2) for part in self.c_attn(self.ln_1(x)).split(d, 2))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.attn_proj(y.transpose(1, 2).reshape(b, t, d))
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x))))


class PeerGPT(nn.Module):
    def __init__(self, vocab: int, block: int, layers: int, heads: int, d: int):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(vocab, d), nn.Embedding(block, d)
        self.blocks = nn.ModuleList(PeerBlock(d, heads) for _ in range(layers))
        self.ln_f = nn.LayerNorm(d, bias=False)
        self.lm_head = nn.Linear(d, vocab, bias=False)
        self.lm_head.weight = self.wte.weight
        for name, p in self.named_parameters():
            if p.dim() >= 2:  # GPT-2's initialisation, residual projections scaled by depth
                std = 0.02 / math.sqrt(2 * layers) if name.endswith("proj.weight") else 0.02
                nn.init.normal_(p, std=std)

    def forward(self, idx, targets):
        x = self.wte(idx) + self.wpe(torch.arange(idx.size(1)))
        for block in self.blocks:
            x = block(x)
        logits = self.lm_head(self.ln_f(x))
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.reshape(-1))


def peer_optimizer(model: nn.Module, weight_decay: float, lr: float, beta2: float) -> torch.optim.AdamW:
    params = list(model.parameters())
    groups = [
        {"params": [p for p in params if p.dim() >= 2], "weight_decay": weight_decay},
        {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0},
    ]
    return torch.optim.AdamW(groups, lr=lr, betas=(0.9, beta2))


def mt_step(cfg, precision: str, compiled: bool):
    """mt's char GPT and one training step of it, as the trainer takes it with one micro-batch."""
    device, tc = torch.device("cpu"), cfg.train
    runtime = Runtime(device, bf16=uses_bf16(device, precision))
    model = build_model(cfg, CHARS + 4).train()
    optimizer = make_optimizer(model, tc)
    forward = torch.compile(model) if compiled else model  # the trainer compiles the model, not the loss

    def step(x, y):
        with runtime.weight_casts():
            with runtime.autocast():
                loss = token_loss(forward(x), y)
            loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), tc.grad_clip)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    return model, step


def peer_step(cfg, compiled: bool):
    m, tc = cfg.model, cfg.train
    model = PeerGPT(CHARS, cfg.data.block_size, m.n_layer, m.n_head, m.d_model).train()
    optimizer = peer_optimizer(model, tc.weight_decay, tc.lr, tc.beta2)
    forward = torch.compile(model) if compiled else model

    def step(x, y):
        forward(x, y).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), tc.grad_clip)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    return model, step


def parameters(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def timed(step, batches) -> float:
    """Seconds per step over the batches."""
    start = time.perf_counter()
    for x, y in batches:
        step(x, y)
    return (time.perf_counter() - start) / len(batches)


def compare(mine, peer, batches, blocks: int, block_steps: int) -> dict:
    """Step times (ms) of both, alternated block by block, and the per-block ratios peer / mine."""
    for step in (mine, peer):  # warm-up: kernels, allocator, optimizer state
        timed(step, batches[:3])
    ratios, mine_ms, peer_ms = [], [], []
    for i in range(blocks):
        chunk = [batches[(i * block_steps + j) % len(batches)] for j in range(block_steps)]
        order = [(mine, mine_ms), (peer, peer_ms)] if i % 2 == 0 else [(peer, peer_ms), (mine, mine_ms)]
        for step, times in order:
            times.append(timed(step, chunk) * 1e3)
        ratios.append(peer_ms[-1] / mine_ms[-1])
    q1, median, q3 = statistics.quantiles(ratios, n=4)
    return {
        "mt_ms": round(statistics.median(mine_ms), 2),
        "peer_ms": round(statistics.median(peer_ms), 2),
        "speedup": round(median, 3),
        "quartiles": [round(q1, 3), round(q3, 3)],
    }


@cli_entry
def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--blocks", type=int, default=60, help="alternations of the two (default 60)")
    ap.add_argument("--block-steps", type=int, default=10, help="steps each takes per block (default 10)")
    ap.add_argument("--precision", choices=["fp32", "bf16", "both"], default="both", help="mt's precision")
    ap.add_argument(
        "--compile", choices=["none", "mt", "both"], default="none", help="models through torch.compile (default none)"
    )
    ap.add_argument("--out", default="bench/results/gpt_peer.json")
    args = ap.parse_args(argv)

    cfg = load_config("recipes/shakespeare_char.yaml", [*CPU_GPT, "train.device=cpu"])
    device = torch.device("cpu")
    if args.compile != "none":
        require_cpp_compiler(device, f"--compile {args.compile}")
    precisions = ["fp32", "bf16"] if args.precision == "both" else [args.precision]
    precisions = [p for p in precisions if p == "fp32" or uses_bf16(device, p)]
    cfg.train.precision = "bf16" if "bf16" in precisions else "fp32"
    Runtime.for_training(cfg)  # the trainer's heap and caches
    generator = torch.Generator().manual_seed(cfg.seed)
    b, t = cfg.train.batch_size, cfg.data.block_size
    batches = [
        tuple(torch.randint(CHARS, (2, b, t), generator=generator).unbind()) for _ in range(args.block_steps * 4)
    ]
    peer_model, peer = peer_step(cfg, compiled=args.compile == "both")
    rows = []
    for precision in precisions:
        torch.manual_seed(cfg.seed)
        mt_model, mine = mt_step(cfg, precision, compiled=args.compile != "none")
        row = {"mt_precision": precision, "peer_precision": "fp32"}
        row |= compare(mine, peer, batches, args.blocks, args.block_steps)
        print(
            f"mt {precision} {row['mt_ms']} ms a step, peer fp32 {row['peer_ms']} ms: "
            f"{row['speedup']}x (quartiles {row['quartiles'][0]}-{row['quartiles'][1]}x)"
        )
        rows.append(row)
    result = {
        "hardware": describe(device),
        "shape": f"{cfg.model.n_layer} layers, {cfg.model.d_model} dims, batch {b} x {t}",
        "compiled": args.compile,
        "params": {"mt": parameters(mt_model), "peer": parameters(peer_model)},
        "blocks": args.blocks,
        "block_steps": args.block_steps,
        "rows": rows,
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    return result


if __name__ == "__main__":
    main()
