"""TensorBoard logging of a training run (`train.tensorboard: true`, the tensorboard extra):
training loss, learning rate, tokens/s and gradient norm every `train.log_every` steps, and every
validation metric at each evaluation, under RUN_DIR/tensorboard.

    tensorboard --logdir runs/
"""

from __future__ import annotations

from pathlib import Path

from mt.errors import require_extra


class Board:
    """A SummaryWriter, or nothing when TensorBoard logging is off (or on other ranks)."""

    def __init__(self, run_dir: Path, enabled: bool, step: int):
        self.writer = None
        if not enabled:
            return
        require_extra("tensorboard", "tensorboard", "train.tensorboard (or set train.tensorboard=false)")
        from torch.utils.tensorboard import SummaryWriter

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
