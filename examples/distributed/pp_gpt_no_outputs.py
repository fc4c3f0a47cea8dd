"""``pp_gpt.py``'s two-stage 1F1B pipeline stepped with ``schedule.step(...,
return_outputs=False)``: the last stage keeps no micro-batch's output to the step's end and
returns no merged output (only the losses), the memory ``pp_gpt.py``'s default step spends on
them (4 x 16 MiB of fp32 logits at 4 micro-batches of 2 x 256 tokens).

    torchrun --nproc-per-node 2 examples/distributed/train_model_file.py \\
        examples/distributed/pp_gpt_no_outputs.py:build --batch 8 --seq 256 --backend gloo-staged

The built-in families' estimate is ``--pp 2 --pp-impl torch --pp-outputs none``."""

import sys
from pathlib import Path

import torch.distributed as dist
from torch.distributed.pipelining import PipelineStage, Schedule1F1B

sys.path.insert(0, str(Path(__file__).resolve().parent))
from pp_gpt import MICRO_BATCHES, _loss, build, step_schedule, vramscope_inputs  # noqa: E402,F401

_SCHEDULES = {}


def vramscope_pipeline_step(model, batch):
    """One 1F1B step over this rank's stage that keeps none of the last stage's outputs."""
    rank, stages = dist.get_rank(), dist.get_world_size()
    if id(model) not in _SCHEDULES:
        stage = PipelineStage(model, rank, stages, next(model.parameters()).device)
        _SCHEDULES[id(model)] = Schedule1F1B(stage, n_microbatches=MICRO_BATCHES, loss_fn=_loss)
    return step_schedule(_SCHEDULES[id(model)], batch, return_outputs=False)
