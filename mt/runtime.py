"""How a process computes, decided once: device, precision, and the CPU's memory and thread settings.

`Runtime.for_training` and `Runtime.for_inference` read the hardware (mt.hardware) and the recipe
once, settle the process-wide switches, and return one frozen object; training and decoding are
handed it and never ask again. What is tuned for CPUs alone lives in mt/cpu/.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

import torch

from mt.config import Config
from mt.cpu import caches, heap
from mt.cpu.micro_batches import resolve_workers
from mt.cpu.workers import default_workers, map_batches
from mt.hardware import cpu_has_bf16, pick_device, prefer_memory_efficient_attention, require_cpp_compiler, uses_bf16

# Steps between hand-backs of the free heap in CPU training: bounds resident memory as batch
# shapes change, for about 2% of the step time (docs/cpu.md).
HEAP_TRIM_EVERY = 10


@dataclass(frozen=True)
class Runtime:
    device: torch.device
    bf16: bool = False  # training's forward passes under bf16 autocast (weights and optimizer stay fp32)
    eval_bf16: bool = False  # validation and decoding under bf16 autocast
    compile: bool = False  # training through torch.compile
    micro_batch_workers: int = 1  # a step's micro-batches computed side by side (mt/cpu/micro_batches.py)
    heap_trim_every: int = 0  # training steps between hand-backs of the free heap (0: never)

    @classmethod
    def for_training(cls, cfg: Config, local_rank: int = 0, world_size: int = 1) -> Runtime:
        """Training's runtime, with the process-wide settings made before the first step. The device
        is the one `train.device` names here, checked (missing CUDA, or torch.compile on a CPU
        without a C++ compiler, is one line now rather than a traceback at the first step); under
        torchrun each process takes the GPU of its `local_rank`."""
        tc = cfg.train
        device = pick_device(tc.device)
        if tc.compile:
            require_cpp_compiler(device, "train.compile=true")
        if device.type == "cuda" and world_size > 1:
            torch.cuda.set_device(local_rank)
            device = torch.device("cuda", local_rank)
        cpu, bf16 = device.type == "cpu", uses_bf16(device, tc.precision)
        heap.keep_freed_memory()
        if cpu and bf16:
            caches.bound_onednn_kernels()
        if cfg.model.arch == "transformer":
            prefer_memory_efficient_attention(device)
        workers = resolve_workers(tc.micro_batch_workers, device, world_size, tc.grad_accum, tc.compile)
        # Decoding on a CPU stays in fp32: its matmuls are small, and translations then agree across CPUs.
        eval_bf16 = bf16 if not cpu else False
        return cls(device, bf16, eval_bf16, tc.compile, workers, HEAP_TRIM_EVERY if cpu else 0)

    @staticmethod
    def inference_device(device: str | torch.device = "cpu") -> torch.device:
        return device if isinstance(device, torch.device) else pick_device(device)

    @classmethod
    def for_inference(cls, device: str | torch.device = "cpu", precision: str = "auto", run: str = "auto") -> Runtime:
        """Decoding's runtime. `precision` fp32 or bf16 is taken as asked; auto is fp32 on a CPU, and on
        CUDA bf16 unless the run's own precision (`run`, its train.precision) says fp32, as an imported
        model's checkpoint does."""
        device = cls.inference_device(device)
        heap.keep_freed_memory()  # a batch's caches and logits are tens of MB: reuse them, do not map them anew
        if precision == "auto":
            return cls(device, eval_bf16=device.type == "cuda" and run != "fp32")
        return cls(device, eval_bf16=precision == "bf16")

    @property
    def precision(self) -> str:
        return "bf16" if self.bf16 else "fp32"

    @property
    def eval_precision(self) -> str:
        return "bf16" if self.eval_bf16 else "fp32"

    @property
    def emulated_bf16(self) -> bool:
        """bf16 asked for on a CPU without bf16 units: PyTorch emulates it, many times slower than fp32."""
        return self.bf16 and self.device.type == "cpu" and not cpu_has_bf16()

    def autocast(self, training: bool = True):
        """The context forward passes run in (per thread, as autocast's state is)."""
        if self.bf16 if training else self.eval_bf16:
            return torch.autocast(self.device.type, dtype=torch.bfloat16)
        return contextlib.nullcontext()

    def weight_casts(self):
        """Around a step's micro-batches: autocast keeps each weight's bf16 copy until its outermost
        context closes, so one disabled context around them all casts each weight once a step, not
        once a micro-batch, and drops the copies before the optimizer changes the weights."""
        return torch.autocast(self.device.type, enabled=False) if self.bf16 else contextlib.nullcontext()

    def after_step(self, step: int) -> None:
        if self.heap_trim_every and step % self.heap_trim_every == 0:
            heap.trim()  # what the steps' changing shapes left fragmented (mt/cpu/heap.py)

    def decode_workers(self, batches: int) -> int:
        """Batches decoded side by side: one per intra-op thread on a CPU (mt/cpu/workers.py), else one."""
        return default_workers(self.device, batches)

    def map_batches(self, decode, batches: list, workers: int, cost=torch.numel) -> list:
        """[decode(b) for b in batches], on `workers` threads, the largest (by `cost`) first."""
        return map_batches(decode, batches, workers, cost=cost)

    def give_back(self) -> None:
        """Between phases (training, evaluation, the report): return freed memory to the system."""
        heap.give_back()

    def loop_guard(self):
        """Around a training loop: the garbage collector leaves the objects alive on entry alone."""
        return heap.objects_left_alone()
