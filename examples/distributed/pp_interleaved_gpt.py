"""``pp_gpt.py``'s GPT in twice as many pipeline stages as ranks, two per rank (rank r holds
stages r and r + ranks, each a contiguous share of the blocks), driven by
``ScheduleInterleaved1F1B`` over 4 micro-batches: torchtitan's interleaved layout.

    torchrun --nproc-per-node 2 examples/distributed/train_model_file.py \\
        examples/distributed/pp_interleaved_gpt.py:build --batch 8 --seq 256 --backend gloo-staged

The tracer runs one rank of it (``vramscope predict --model
examples/distributed/pp_interleaved_gpt.py:build --world-size 2 --rank R``), both of the rank's
stages, their metadata computed from the other rank's stages on the meta device. Its H100
captures (fp32 and bf16 autocast) are ``goldens/h100/run/ranks2_pp_interleaved_gpt_adamw_*``."""

import sys
from pathlib import Path

import torch.distributed as dist
import torch.nn as nn
from torch.distributed.pipelining import PipelineStage, ScheduleInterleaved1F1B

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "training"))
from models import _GPT  # noqa: E402
from pp_gpt import (MICRO_BATCHES, GPTStage, _loss, step_schedule,  # noqa: E402,F401
                    vramscope_inputs)

STAGES_PER_RANK = 2


def build():
    """This rank's stages, in the order of their indices (r, then r + ranks)."""
    rank, ranks = dist.get_rank(), dist.get_world_size()
    stages, layers = ranks * STAGES_PER_RANK, _GPT["layers"]
    parts = nn.ModuleList()
    for v in range(STAGES_PER_RANK):
        s = rank + v * ranks
        parts.append(GPTStage(s * layers // stages, (s + 1) * layers // stages, s == 0,
                              s == stages - 1))
    return parts


_SCHEDULES = {}


def vramscope_pipeline_step(model, batch):
    """One step of the interleaved schedule over this rank's stages: rank 0 (stage 0) feeds the
    tokens, the last rank (the last stage) the labels, and returns the micro-batches' mean loss."""
    rank, ranks = dist.get_rank(), dist.get_world_size()
    if id(model) not in _SCHEDULES:
        device = next(model.parameters()).device
        stages = [PipelineStage(part, rank + v * ranks, ranks * STAGES_PER_RANK, device)
                  for v, part in enumerate(model)]
        _SCHEDULES[id(model)] = ScheduleInterleaved1F1B(stages, n_microbatches=MICRO_BATCHES,
                                                        loss_fn=_loss)
    return step_schedule(_SCHEDULES[id(model)], batch)
