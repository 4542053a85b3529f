"""The runtime is decided once: precision for training and for decoding, from the recipe, the run
and the hardware (mt/runtime.py)."""

import pytest
import torch

from mt.config import load_config
from mt.runtime import Runtime

CPU, CUDA = torch.device("cpu"), torch.device("cuda")  # a device object: nothing touches a GPU here


@pytest.mark.parametrize(
    "device, asked, run, bf16",
    [
        (CPU, "auto", "auto", False),  # decoding on a CPU stays fp32
        (CUDA, "auto", "auto", True),  # bf16 on a GPU...
        (CUDA, "auto", "fp32", False),  # ...unless the run says fp32, as an imported checkpoint does
        (CUDA, "bf16", "fp32", True),  # asked for: as asked
        (CPU, "bf16", "auto", True),
        (CUDA, "fp32", "auto", False),
    ],
)
def test_decoding_precision_follows_the_flag_then_the_run_then_the_device(device, asked, run, bf16):
    runtime = Runtime.for_inference(device, asked, run)
    assert runtime.eval_bf16 is bf16 and runtime.eval_precision == ("bf16" if bf16 else "fp32")


def test_training_runtime_takes_the_recipes_precision_and_decodes_in_fp32_on_a_cpu():
    cfg = load_config("recipes/multi30k.yaml", ["train.device=cpu", "train.precision=bf16", "train.grad_accum=4"])
    runtime = Runtime.for_training(cfg)
    assert runtime.bf16 and not runtime.eval_bf16 and runtime.precision == "bf16"
    assert 1 <= runtime.micro_batch_workers <= 4 and runtime.heap_trim_every > 0
    fp32 = Runtime.for_training(load_config("recipes/multi30k.yaml", ["train.device=cpu", "train.precision=fp32"]))
    assert not fp32.bf16 and not fp32.emulated_bf16
    with fp32.autocast():
        assert not torch.is_autocast_enabled("cpu")
    with runtime.autocast():
        assert torch.is_autocast_enabled("cpu")
