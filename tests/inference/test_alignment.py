"""Cross-attention read for alignment (mt/inference/attention_maps.py): batched as one sentence at a
time reads it, links grown onto an auxiliary's verb, and harmless to a search running on another
thread with the same model (a server aligns a document's markup while it decodes other requests)."""

import threading

import torch

from mt.data.batching import collate
from mt.inference.attention_maps import cross_attention, cross_attention_batch, grown_links, source_links
from mt.inference.search import beam_search
from mt.model import Transformer


def tiny():
    torch.manual_seed(0)
    model = Transformer(
        vocab_size=20, max_len=24, enc_layers=2, dec_layers=2, n_head=2, d_model=32, d_ff=64, dropout=0.0, bias=True
    )
    for p in model.parameters():
        p.data.normal_(0, 0.3)
    return model.eval()


def test_a_batch_reads_each_pair_as_it_would_alone_and_links_every_source_token():
    model = tiny()
    sources, targets = [[5, 6, 7], [8, 9, 10, 11, 12]], [[13, 14], [15, 16, 17]]
    batch = cross_attention_batch(model, sources, targets, layers=[1])
    for (s, t), weights in zip(zip(sources, targets), batch):
        assert torch.allclose(weights, cross_attention(model, s, t, layer=1), atol=1e-5)
    everything = cross_attention_batch(model, sources, targets)
    assert [len(source_links(w, len(s), len(t))) for w, s, t in zip(everything, sources, targets)] == [3, 5]


def test_links_grow_onto_a_following_token_that_attends_clearly_to_the_same_source_token():
    # 'le chien court' -> 'the dog is running .': 'court' attends most to 'is'; 'running' attends
    # clearly to 'court' and joins it; '.' glances at 'court' but nearly as much at 'chien': left out.
    weights = torch.tensor(
        [  # le, chien, court, <END>
            [0.8, 0.1, 0.05, 0.05],  # the
            [0.1, 0.8, 0.05, 0.05],  # dog
            [0.05, 0.1, 0.8, 0.05],  # is
            [0.05, 0.15, 0.7, 0.1],  # running
            [0.05, 0.3, 0.35, 0.3],  # .
            [0.1, 0.1, 0.1, 0.7],  # <END>
        ]
    )
    assert source_links(weights, 3, 5) == [(0, 0), (1, 1), (2, 2)]
    assert grown_links(weights, 3, 5) == [(0, 0), (1, 1), (2, 2), (2, 3)]
    assert grown_links(weights[:, :1], 1, 5)[0] == (0, 0) and grown_links(weights, 0, 5) == []
    weights[3] = torch.tensor([0.01, 0.02, 0.05, 0.92])  # 'running' looking at <END>, hardly at 'court'
    assert grown_links(weights, 3, 5) == [(0, 0), (1, 1), (2, 2)]


def test_aligning_on_one_thread_changes_no_search_on_another():
    model = tiny()
    src = collate([[5, 6, 7, 8], [9, 10], [11, 12, 13, 14, 15, 16]], [[1]])["src"]
    expected = beam_search(model, src, beam=3)
    stop, failures = threading.Event(), []

    def align():
        while not stop.is_set():
            try:
                cross_attention_batch(model, [[5, 6, 7]] * 4, [[8, 9]] * 4)
            except Exception as e:  # noqa: BLE001 - reported below
                failures.append(e)

    aligner = threading.Thread(target=align)
    aligner.start()
    try:
        for _ in range(30):
            ids, scores, _ = beam_search(model, src, beam=3)
            assert ids == expected[0] and torch.equal(scores, expected[1])
    finally:
        stop.set()
        aligner.join()
    assert not failures
