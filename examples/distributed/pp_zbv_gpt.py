"""``pp_gpt.py``'s GPT in twice as many pipeline stages as ranks, placed in a V (rank r holds stages
r and 2 x ranks - 1 - r, so rank 0 holds the first and the last), driven by
``ScheduleZBVZeroBubble`` over 4 micro-batches: the zero-bubble schedule torchtitan offers as
``ZBVZeroBubble``. Its backward is split in two: each micro-batch's input gradients first (what
the previous stage waits for), its weight gradients later, to fill the bubbles; until then the
stage keeps the gradients that reached each weight's matmul and the tensors those matmuls saved.

    torchrun --nproc-per-node 2 examples/distributed/train_model_file.py \\
        examples/distributed/pp_zbv_gpt.py:build --batch 8 --seq 256 --backend gloo-staged

The tracer runs one rank of it (``vramscope predict --model examples/distributed/pp_zbv_gpt.py:build
--world-size 2 --rank R --batch 8 --seq 256``): both of the rank's stages, their metadata computed
from the other rank's stages on the meta device, the split backward run by the tracer's own
autograd executor (docs/design/tracer.md). ``ScheduleInterleavedZeroBubble`` (stages placed as in
``pp_interleaved_gpt.py``) runs through the same split."""

import sys
from pathlib import Path

import torch.distributed as dist
import torch.nn as nn
from torch.distributed.pipelining import PipelineStage, ScheduleZBVZeroBubble

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "training"))
from models import _GPT  # noqa: E402
from pp_gpt import (MICRO_BATCHES, GPTStage, _loss, step_schedule,  # noqa: E402,F401
                    vramscope_inputs)

STAGES_PER_RANK = 2


def stage_indices(rank: int, ranks: int) -> tuple[int, int]:
    """The V: rank r holds stage r on the way down and stage 2 x ranks - 1 - r on the way back."""
    return rank, 2 * ranks - 1 - rank


def build():
    """This rank's two stages, in the order of ``stage_indices``."""
    rank, ranks = dist.get_rank(), dist.get_world_size()
    stages, layers = ranks * STAGES_PER_RANK, _GPT["layers"]
    parts = nn.ModuleList()
    for s in stage_indices(rank, ranks):
        parts.append(GPTStage(s * layers // stages, (s + 1) * layers // stages, s == 0,
                              s == stages - 1))
    return parts


_SCHEDULES = {}


def vramscope_pipeline_step(model, batch):
    """One step of the ZBV schedule over this rank's stages: rank 0 holds both ends, so it feeds
    the tokens, gives the labels and returns the micro-batches' mean loss."""
    rank, ranks = dist.get_rank(), dist.get_world_size()
    if id(model) not in _SCHEDULES:
        device = next(model.parameters()).device
        stages = [PipelineStage(part, s, ranks * STAGES_PER_RANK, device)
                  for s, part in zip(stage_indices(rank, ranks), model)]
        _SCHEDULES[id(model)] = ScheduleZBVZeroBubble(stages, n_microbatches=MICRO_BATCHES,
                                                      loss_fn=_loss)
    return step_schedule(_SCHEDULES[id(model)], batch, first=rank == 0, last=rank == 0)
