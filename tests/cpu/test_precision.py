"""Speed settings must not change the maths: torch.compile matches eager, bf16 autocast (CUDA, or
CPU when asked) stays close to fp32, and padding to multiples of 8 changes no loss."""

import json
import math
import os

import numpy as np
import pytest
import torch
from helpers import cli

from mt.config import load_config
from mt.cpu.caches import IDEEP_ENTRIES, ONEDNN_KERNELS
from mt.data.batching import collate
from mt.errors import UserError
from mt.hardware import cpu_has_bf16, require_cpp_compiler, uses_bf16
from mt.loss import token_loss
from mt.model import GPT, Transformer
from mt.runtime import Runtime

V = 40


def transformer(layers=2):
    torch.manual_seed(0)
    return Transformer(
        vocab_size=V,
        max_len=33,
        enc_layers=layers,
        dec_layers=layers,
        n_head=2,
        d_model=32,
        d_ff=64,
        dropout=0.0,
        bias=True,
    )


def random_batch(seed, n, longest, multiple=1):
    rng = np.random.default_rng(seed)
    rows = lambda: [rng.integers(4, V, rng.integers(1, longest + 1)).tolist() for _ in range(n)]  # noqa: E731
    return collate(rows(), rows(), multiple=multiple, limit=33)


def loss_and_grads(model, batch):
    model.zero_grad()
    loss = model(batch["src"], batch["tgt_in"], targets=batch["tgt_out"])  # the training path (mt.loss.head_loss)
    loss.backward()
    return loss.detach(), [p.grad.clone() for p in model.parameters()]


def test_padding_to_multiples_of_8_changes_nothing():
    model = transformer()
    plain, aligned = random_batch(1, 6, 13), random_batch(1, 6, 13, multiple=8)
    assert aligned["src"].shape[1] % 8 == 0 and aligned["src"].shape[1] > plain["src"].shape[1] - 1
    (a, grads_a), (b, grads_b) = loss_and_grads(model, plain), loss_and_grads(model, aligned)
    assert torch.allclose(a, b, atol=1e-6)
    assert all(torch.allclose(x, y, atol=1e-6) for x, y in zip(grads_a, grads_b))


def test_padding_stops_at_the_models_positions():
    batch = collate([[5] * 32], [[6] * 30], multiple=8, limit=33)
    assert batch["src"].shape[1] == 33 and batch["tgt_in"].shape[1] == 32


@pytest.mark.slow
def test_compiled_transformer_matches_eager_on_changing_shapes():
    """The translation model under torch.compile (inductor, CPU here; about 40 s of compiling on
    a cold cache): the same loss and gradients as eager for batches of different sizes and
    lengths, as training feeds it. One layer each side keeps the graph small."""
    eager = transformer(layers=1)
    compiled = torch.compile(transformer(layers=1), dynamic=True)  # one graph for all shapes
    for seed, n, longest in [(0, 4, 7), (1, 6, 20), (2, 3, 12)]:
        batch = random_batch(seed, n, longest, multiple=8)
        (a, grads_a), (b, grads_b) = loss_and_grads(eager, batch), loss_and_grads(compiled, batch)
        assert torch.allclose(a, b, rtol=1e-5, atol=1e-5), (a, b)
        assert all(torch.allclose(x, y, rtol=1e-4, atol=1e-5) for x, y in zip(grads_a, grads_b))


def test_compiling_on_a_cpu_without_a_cpp_compiler_is_one_line_before_the_run_starts(tmp_path, capsys):
    """Inductor needs a C++ compiler for CPU kernels and would find out at the first step, in a long
    traceback: `mt.train ... train.compile=true` says so in one line, before a run directory exists."""
    import torch._inductor.config as inductor

    from mt import train as train_module

    recipe = ["recipes/shakespeare_char.yaml", "train.device=cpu", "train.compile=true", f"out_dir={tmp_path}/run"]
    with inductor.patch({"cpp.cxx": (None, str(tmp_path / "no-such-g++"))}), pytest.raises(SystemExit) as stop:
        train_module.main(recipe)
    assert stop.value.code == 2 and not (tmp_path / "run").exists()
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("error: train.compile=true on a CPU needs a C++ compiler") and "apt-get install g++" in line


def test_a_working_cpp_compiler_or_a_gpu_passes_the_compile_check(tmp_path):
    """Any program that answers `--version` counts, as it does for inductor; a GPU needs none."""
    import torch._inductor.config as inductor

    compiler = tmp_path / "fake-g++"
    compiler.write_text("#!/bin/sh\necho 'fake g++ 1.0'\n")
    compiler.chmod(0o755)
    with inductor.patch({"cpp.cxx": (None, str(compiler))}):
        require_cpp_compiler(torch.device("cpu"), "train.compile=true")
    with inductor.patch({"cpp.cxx": (None, str(tmp_path / "no-such-g++"))}):
        require_cpp_compiler(torch.device("cuda"), "train.compile=true")
        with pytest.raises(UserError, match="^--compile on a CPU"):
            require_cpp_compiler(torch.device("cpu"), "--compile")


def test_mt_hardware_says_whether_train_compile_has_a_cpp_compiler_here(tmp_path):
    """`python -m mt.hardware` names the compiler inductor would use on this CPU, or says none works."""
    compiler = tmp_path / "fake-g++"
    compiler.write_text("#!/bin/sh\necho 'fake g++ 1.0'\n")
    compiler.chmod(0o755)
    found = cli("mt.hardware", env={"CXX": str(compiler), "MT_ALLOCATOR": "system"})
    assert found.returncode == 0, found.stderr
    assert f"torch.compile (train.compile=true): C++ compiler {compiler}\n" in found.stdout
    missing = cli("mt.hardware", env={"CXX": str(tmp_path / "no-such-g++"), "MT_ALLOCATOR": "system"})
    assert "C++ compiler none works here; install g++ for it" in missing.stdout


def test_bf16_autocast_keeps_the_loss_near_fp32():
    torch.manual_seed(0)
    gpt = GPT(vocab_size=V, block_size=32, n_layer=2, n_head=2, d_model=64, d_ff=128, dropout=0.0, bias=True)
    x = torch.randint(4, V, (8, 33))
    model = transformer()
    batch = random_batch(3, 8, 20)
    fp32 = [token_loss(gpt(x[:, :-1]), x[:, 1:]), token_loss(model(batch["src"], batch["tgt_in"]), batch["tgt_out"])]
    with torch.autocast("cpu", dtype=torch.bfloat16):
        bf16 = [
            token_loss(gpt(x[:, :-1]), x[:, 1:]),
            token_loss(model(batch["src"], batch["tgt_in"]), batch["tgt_out"]),
        ]
        assert gpt(x[:, :-1]).dtype == torch.bfloat16  # autocast really ran the matmuls in bf16
    for a, b in zip(fp32, bf16):
        assert b.dtype == torch.float32  # the loss itself is computed in fp32
        assert abs(a.item() - b.item()) < 1e-2 * a.item(), (a.item(), b.item())


@pytest.mark.parametrize(
    "env, native",
    [
        ({}, True),
        ({"ONEDNN_MAX_CPU_ISA": "AVX2"}, False),  # oneDNN kept below AVX-512: its bf16 matmuls are emulated
        ({"ONEDNN_MAX_CPU_ISA": "avx512_core_amx"}, True),
    ],
)
def test_bf16_units_count_only_where_the_kernels_may_use_them(monkeypatch, env, native):
    """A CPU's bf16 units train in bf16 under precision auto only where neither PyTorch's nor oneDNN's
    kernels are capped below AVX-512; with ATEN_CPU_CAPABILITY=avx2 PyTorch's own report says so."""
    from mt import hardware

    monkeypatch.setattr(hardware, "cpu_flags", lambda: {"avx512f", "avx512_bf16"})
    monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda: "AVX512")
    monkeypatch.delenv("ONEDNN_MAX_CPU_ISA", raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert hardware.cpu_has_bf16() is native and uses_bf16(torch.device("cpu"), "auto") is native
    monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda: "AVX2")
    assert not hardware.cpu_has_bf16()


def test_bf16_training_step_on_cpu_keeps_gradients_near_fp32():
    """train.precision=bf16 on CPU: matmuls and short-sequence attention in bf16 (mt.model._sdpa);
    one step's gradients point where the fp32 ones do."""
    cpu = torch.device("cpu")
    assert uses_bf16(cpu, "bf16") and uses_bf16(cpu, "auto") == cpu_has_bf16() and not uses_bf16(cpu, "fp32")
    model = transformer()
    batch = random_batch(3, 8, 20)
    _, fp32 = loss_and_grads(model, batch)
    model.zero_grad()
    with Runtime(cpu, bf16=True).autocast():
        assert torch.is_autocast_enabled("cpu")
        logits = model(batch["src"], batch["tgt_in"])
        loss = token_loss(logits, batch["tgt_out"])
    assert logits.dtype == torch.bfloat16
    loss.backward()
    for (name, p), g32 in zip(model.named_parameters(), fp32):
        assert p.grad is not None and p.grad.dtype == torch.float32 and torch.isfinite(p.grad).all(), name
        cosine = torch.nn.functional.cosine_similarity(p.grad.flatten(), g32.flatten(), dim=0)
        assert cosine > 0.98, (name, cosine.item())


def test_training_in_bf16_on_cpu_through_the_cli(toy_text_corpus, tmp_path):
    from mt import train as train_module

    train_module.main(
        [
            "recipes/shakespeare_char.yaml",
            "model.n_layer=1",
            "model.n_head=2",
            "model.d_model=32",
            "data.block_size=16",
            "train.batch_size=8",
            "train.max_steps=30",
            "train.eval_every=15",
            "train.eval_batches=2",
            "train.device=cpu",
            "train.precision=bf16",
            "train.lr=3e-3",
            "train.warmup_steps=2",
            "train.max_minutes=null",  # steps alone: no evaluation to time a budget's plan
            f"out_dir={tmp_path}/run",
        ]
    )
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [15, 30]
    assert all(math.isfinite(r["val_loss"]) for r in rows) and rows[1]["train_loss"] < rows[0]["train_loss"]


@pytest.mark.parametrize("units", [True, False])
def test_bf16_asked_for_on_a_cpu_without_bf16_units_warns_that_it_is_emulated(
    toy_text_corpus, tmp_path, monkeypatch, capsys, units
):
    from mt import runtime
    from mt import train as train_module

    monkeypatch.setattr(runtime, "cpu_has_bf16", lambda: units)
    tiny = ["model.n_layer=1", "model.n_head=2", "model.d_model=32", "data.block_size=16", "train.batch_size=4"]
    steps = ["train.max_steps=2", "train.eval_every=2", "train.eval_batches=1", "train.max_minutes=null"]
    recipe = ["recipes/shakespeare_char.yaml", *tiny, *steps, "train.device=cpu", "train.precision=bf16"]
    train_module.main([*recipe, f"out_dir={tmp_path}/run"])
    warnings = [line for line in capsys.readouterr().err.splitlines() if line.startswith("warning: ")]
    assert warnings == (
        []
        if units
        else [
            "warning: train.precision=bf16 on a CPU without bf16 units (AMX or AVX-512 BF16) is emulated, "
            "some 30 times slower than fp32; train.precision=auto trains in fp32 here"
        ]
    )
    assert (tmp_path / "run" / "last.pt").is_file()  # a warning, not a refusal: the run trained


def test_bf16_training_on_a_cpu_bounds_onednn_kernels_unless_the_user_chose(monkeypatch):
    """oneDNN reads ONEDNN_PRIMITIVE_CACHE_CAPACITY, and ideep LRU_CACHE_CAPACITY, when they build
    their first kernel: bf16 training on a CPU sets both (Runtime.for_training); fp32, where MKL runs
    the matmuls, and a user's own value are left alone."""
    bounds = {"ONEDNN_PRIMITIVE_CACHE_CAPACITY": ONEDNN_KERNELS, "LRU_CACHE_CAPACITY": IDEEP_ENTRIES}
    environ = {k: v for k, v in os.environ.items() if k not in bounds}
    monkeypatch.setattr(os, "environ", environ)
    recipe = ["recipes/shakespeare_char.yaml", "train.device=cpu"]
    Runtime.for_training(load_config(recipe[0], [*recipe[1:], "train.precision=fp32"]))
    assert not set(bounds) & set(environ)
    Runtime.for_training(load_config(recipe[0], [*recipe[1:], "train.precision=bf16"]))
    assert {name: environ[name] for name in bounds} == {name: str(n) for name, n in bounds.items()}
    environ["LRU_CACHE_CAPACITY"] = "512"
    Runtime.for_training(load_config(recipe[0], [*recipe[1:], "train.precision=bf16"]))
    assert environ["LRU_CACHE_CAPACITY"] == "512"


def test_translation_on_cuda_prefers_the_memory_efficient_attention_kernel():
    """prefer_memory_efficient_attention leaves SDPA's memory-efficient kernel and the math
    fallback on CUDA, and changes nothing for a CPU. The flags are PyTorch's own, settable without a GPU."""
    from mt.hardware import prefer_memory_efficient_attention

    flags = torch.backends.cuda
    switches = (flags.enable_cudnn_sdp, flags.enable_flash_sdp, flags.enable_mem_efficient_sdp, flags.enable_math_sdp)

    def state():
        return (
            flags.cudnn_sdp_enabled(),
            flags.flash_sdp_enabled(),
            flags.mem_efficient_sdp_enabled(),
            flags.math_sdp_enabled(),
        )

    before = state()
    try:
        for switch in switches:
            switch(True)
        prefer_memory_efficient_attention(torch.device("cpu"))
        assert state() == (True, True, True, True)
        prefer_memory_efficient_attention(torch.device("cuda"))
        assert state() == (False, False, True, True)
    finally:
        for switch, on in zip(switches, before):
            switch(on)


def test_the_benchmarks_translation_step_borrows_the_training_kernels_and_gives_them_back():
    """mt.bench times the translation step with the kernels its training uses (cuDNN's and flash's
    off on CUDA) and the char GPT's with PyTorch's choice: the block restores what it found."""
    from mt.hardware import memory_efficient_attention_while

    flags = torch.backends.cuda
    before = (flags.cudnn_sdp_enabled(), flags.flash_sdp_enabled())
    try:
        flags.enable_cudnn_sdp(True)
        flags.enable_flash_sdp(True)
        with memory_efficient_attention_while(torch.device("cuda")):
            assert (flags.cudnn_sdp_enabled(), flags.flash_sdp_enabled()) == (False, False)
            assert flags.mem_efficient_sdp_enabled() and flags.math_sdp_enabled()
        assert (flags.cudnn_sdp_enabled(), flags.flash_sdp_enabled()) == (True, True)
        with memory_efficient_attention_while(torch.device("cpu")):
            assert (flags.cudnn_sdp_enabled(), flags.flash_sdp_enabled()) == (True, True)
    finally:
        flags.enable_cudnn_sdp(before[0])
        flags.enable_flash_sdp(before[1])
