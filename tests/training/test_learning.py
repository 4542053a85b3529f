"""Small models must actually learn: a memorised text and a Markov chain's transition table."""

import pytest
import torch

from mt.loss import token_loss
from mt.model import GPT, Bigram

pytestmark = pytest.mark.numerics  # CI runs these again with AVX2 kernels, fp32 and two threads


def test_tiny_gpt_overfits_repeated_text():
    torch.manual_seed(0)
    text = "To be, or not to be: that is the question. " * 8
    chars = sorted(set(text))
    data = torch.tensor([chars.index(c) for c in text])
    block = 32
    model = GPT(
        vocab_size=len(chars), block_size=block, n_layer=2, n_head=2, d_model=32, d_ff=128, dropout=0.0, bias=True
    )
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    for _ in range(300):
        starts = torch.randint(len(data) - block, (16, 1))
        chunk = data[starts + torch.arange(block + 1)]
        loss = token_loss(model(chunk[:, :-1]), chunk[:, 1:])
        opt.zero_grad()
        loss.backward()
        opt.step()
    model.eval()
    starts = torch.arange(0, len(data) - block - 1, 7)[:, None]
    chunk = data[starts + torch.arange(block + 1)]
    with torch.no_grad():
        logits = model(chunk[:, :-1])
    # Past the first half of a block the context fixes the next character: the loss must vanish there.
    late_loss = token_loss(logits[:, block // 2 :], chunk[:, 1 + block // 2 :])
    assert late_loss.item() < 0.05, late_loss.item()


def test_bigram_learns_markov_transition_table():
    torch.manual_seed(0)
    v = 6
    transitions = torch.distributions.Dirichlet(torch.full((v,), 0.5)).sample((v,))  # (V, V) rows sum to 1
    n = 60_000
    seq = torch.empty(n, dtype=torch.long)
    seq[0] = 0
    for i in range(1, n):  # sample the chain
        seq[i] = torch.multinomial(transitions[seq[i - 1]], 1)
    seq += 1  # id 0 is <pad>, which the loss ignores
    model = Bigram(vocab_size=v + 1, block_size=8)
    opt = torch.optim.Adam(model.parameters(), lr=0.1)
    x, y = seq[:-1].view(1, -1), seq[1:].view(1, -1)
    for _ in range(300):
        loss = token_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    learned = model.table.weight[1:, 1:].softmax(-1)
    assert (learned - transitions).abs().max().item() < 0.03
