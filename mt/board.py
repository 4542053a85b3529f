"""TensorBoard logging of a training run (`train.tensorboard: true`, the tensorboard extra):
training loss, learning rate, tokens/s and gradient norm every `train.log_every` steps, and every
validation metric at each evaluation, under RUN_DIR/tensorboard.

    tensorboard --logdir runs/
"""

from __future__ import annotations

from pathlib import Path

from mt.errors import UserError


class Board:
    """A SummaryWriter, or nothing when TensorBoard logging is off (or on other ranks)."""

    def __init__(self, run_dir: Path, enabled: bool, step: int):
        self.writer = None
        if not enabled:
            return
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError:
            raise UserError('train.tensorboard needs TensorBoard, an optional extra: pip install "mt[tensorboard]" '
                            "(or set train.tensorboard=false)") from None
        # purge_step: a resumed run drops the events a killed run logged past its checkpoint
        self.writer = SummaryWriter(str(run_dir / "tensorboard"), purge_step=step or None)

    def scalars(self, prefix: str, values: dict, step: int) -> None:
        if self.writer is None:
            return
        for name, value in values.items():
            if isinstance(value, (int, float)) and name != "step":
                self.writer.add_scalar(f"{prefix}/{name}", value, step)

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
