"""A CPU step's micro-batches side by side: the same gradient as one after another, on the worker
threads, repeatable with dropout, and only where it applies; bf16 weights cast once a step."""

import contextlib
import threading

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from mt.config import load_config
from mt.cpu.dropout import keep_mask, own_generator
from mt.cpu.micro_batches import resolve_workers, shares
from mt.data.vocab import END, PAD, START
from mt.errors import UserError
from mt.model import build_model
from mt.runtime import Runtime
from mt.training.distributed import World
from mt.training.run_dir import RunState
from mt.training.trainer import Trainer

VOCAB = 40
SMALL = [
    "model.enc_layers=1",
    "model.dec_layers=1",
    "model.n_head=2",
    "model.d_model=32",
    "model.d_ff=64",
    "train.grad_accum=4",
    "train.grad_clip=0",
    "train.precision=fp32",
    "train.device=cpu",
]


class Pairs:
    """A stand-in translation task over ready-made batches; it notes the threads that run it."""

    vocab_size = VOCAB

    def __init__(self):
        self.threads = set()

    def batch_tokens(self, batch):
        return int((batch["tgt_out"] != PAD).sum())

    def loss(self, model, batch, label_smoothing):
        self.threads.add(threading.current_thread().name)
        return model(batch["src"], batch["tgt_in"], targets=batch["tgt_out"], label_smoothing=label_smoothing)


def micro_batches(count: int, seed: int = 0) -> list[dict]:
    """`count` batches of random pairs of different sizes, padded."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for i in range(count):
        rows, src_len, tgt_len = 3 + i, 5 + 2 * i, 4 + i
        src = torch.randint(4, VOCAB, (rows, src_len), generator=g)
        src[0, -2:] = PAD
        tgt = torch.randint(4, VOCAB, (rows, tgt_len), generator=g)
        tgt_in = torch.cat([torch.full((rows, 1), START), tgt], dim=1)
        tgt_out = torch.cat([tgt, torch.full((rows, 1), END)], dim=1)
        tgt_out[1, -3:] = PAD
        out.append({"src": src, "tgt_in": tgt_in, "tgt_out": tgt_out})
    return out


def one_step(tmp_path, workers: int, *overrides: str, seed: int = 7):
    """The weights after one SGD step (lr 1) over four micro-batches, and the threads that ran them."""
    cfg = load_config(
        "recipes/multi30k.yaml", [*SMALL, f"train.micro_batch_workers={workers}", *overrides, f"out_dir={tmp_path}"]
    )
    torch.manual_seed(0)
    model = build_model(cfg, VOCAB)
    task = Pairs()
    runtime = Runtime.for_training(cfg)
    trainer = Trainer(cfg, World(), runtime, task, model, torch.optim.SGD(model.parameters(), lr=1.0), RunState())
    try:
        loss, tokens, _ = trainer.train_step(iter(micro_batches(4)), seed)
    finally:
        trainer.micro_workers.close()
    return {k: v.clone() for k, v in model.state_dict().items()}, loss.item(), tokens, task.threads


def test_side_by_side_gives_the_gradient_of_one_micro_batch_after_another(tmp_path):
    together, loss, tokens, threads = one_step(tmp_path / "a", 2)
    alone, reference_loss, reference_tokens, reference_threads = one_step(tmp_path / "b", 1)
    # On the workers' threads (how many of the two take a share depends on the scheduler).
    assert threads and all(name.startswith("mt-micro-batch") for name in threads)
    assert reference_threads == {threading.current_thread().name}
    assert tokens == reference_tokens
    assert loss == pytest.approx(reference_loss, rel=1e-6)
    for name in alone:
        assert torch.allclose(together[name], alone[name], atol=1e-6), name


def test_side_by_side_with_dropout_repeats_exactly_and_follows_the_seed(tmp_path):
    first = one_step(tmp_path / "a", 2, "model.dropout=0.2")[0]
    again = one_step(tmp_path / "b", 2, "model.dropout=0.2")[0]
    other_seed = one_step(tmp_path / "c", 2, "model.dropout=0.2", seed=8)[0]
    assert all(torch.equal(first[name], again[name]) for name in first)
    assert any(not torch.equal(first[name], other_seed[name]) for name in first)


def test_a_threads_own_generator_ignores_what_others_draw():
    def masks():
        with own_generator(5):
            return keep_mask((1000,), 0.5), keep_mask((1000,), 0.5)

    state = torch.get_rng_state()
    quiet = masks()
    assert torch.equal(state, torch.get_rng_state())  # the default generator was not drawn from
    busy = threading.Thread(target=lambda: [keep_mask((10_000,), 0.5) for _ in range(50)])  # the default one
    busy.start()
    noisy = masks()
    busy.join()
    assert all(torch.equal(a, b) for a, b in zip(quiet, noisy))
    assert not torch.equal(quiet[0], quiet[1])


def test_micro_batches_are_shared_out_in_contiguous_runs():
    assert shares(4, 2) == [range(0, 2), range(2, 4)]
    assert shares(3, 2) == [range(0, 2), range(2, 3)]
    assert shares(5, 3) == [range(0, 2), range(2, 4), range(4, 5)]
    assert shares(1, 2) == [range(0, 1)]


def test_workers_apply_to_cpu_training_in_one_process_only():
    cpu, cuda = torch.device("cpu"), torch.device("cuda")
    threads = torch.get_num_threads()
    assert resolve_workers(0, cpu, 1, 4, False) == max(1, min(threads, 4))
    assert resolve_workers(0, cpu, 1, 1, False) == 1
    assert resolve_workers(0, cpu, 2, 4, False) == 1  # torchrun: DDP's processes
    assert resolve_workers(0, cpu, 1, 4, True) == 1  # torch.compile
    assert resolve_workers(0, cuda, 1, 4, False) == 1
    assert resolve_workers(3, cpu, 1, 2, False) == 2  # no more workers than micro-batches
    assert resolve_workers(1, cuda, 2, 4, True) == 1
    for device, world, compiled in ((cuda, 1, False), (cpu, 2, False), (cpu, 1, True)):
        with pytest.raises(UserError, match="micro_batch_workers"):
            resolve_workers(2, device, world, 4, compiled)


def test_a_negative_worker_count_is_a_recipe_error():
    with pytest.raises(UserError, match="train.micro_batch_workers must be 0"):
        load_config("recipes/multi30k.yaml", ["train.micro_batch_workers=-1"])


class Casts(TorchDispatchMode):
    """Counts dtype conversions on this thread."""

    def __init__(self):
        super().__init__()
        self.count = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.count += func.__name__.startswith("_to_copy")
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("workers", [1, 2])
def test_bf16_weights_are_cast_once_a_step_with_the_same_result(tmp_path, workers, monkeypatch):
    """Runtime.weight_casts holds autocast's copies over a step's micro-batches: bit for bit the step
    a context per micro-batch gives, with one cast of each weight instead of one per micro-batch."""
    kept = one_step(tmp_path / "kept", workers, "train.precision=bf16")
    with monkeypatch.context() as patch:
        patch.setattr(Runtime, "weight_casts", lambda self: contextlib.nullcontext())
        anew = one_step(tmp_path / "anew", workers, "train.precision=bf16")
        with Casts() as casts_anew:
            one_step(tmp_path / "anew2", 1, "train.precision=bf16")
    with Casts() as casts_kept:
        one_step(tmp_path / "kept2", 1, "train.precision=bf16")
    assert kept[1] == anew[1]
    assert all(torch.equal(kept[0][name], anew[0][name]) for name in kept[0])
    matrices = sum(p.dim() == 2 for p in build_model(load_config("recipes/multi30k.yaml", SMALL), VOCAB).parameters())
    assert casts_anew.count - casts_kept.count >= 3 * matrices  # four micro-batches: three casts saved per weight
