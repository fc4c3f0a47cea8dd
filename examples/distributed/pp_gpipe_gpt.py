"""``pp_gpt.py``'s two-stage GPT driven by ``ScheduleGPipe`` over 4 micro-batches: every
micro-batch's forward, then every backward, so each stage holds all four micro-batches'
activations at once (1F1B holds at most as many as there are stages after it, plus one).

    torchrun --nproc-per-node 2 examples/distributed/train_model_file.py \\
        examples/distributed/pp_gpipe_gpt.py:build --batch 8 --seq 256 --backend gloo-staged

The tracer runs one rank of it (``vramscope predict --model examples/distributed/pp_gpipe_gpt.py:build
--world-size 2 --rank R``); the built-in families' estimate is ``--pp 2 --pp-impl torch
--schedule gpipe``."""

import sys
from pathlib import Path

import torch.distributed as dist
from torch.distributed.pipelining import PipelineStage, ScheduleGPipe

sys.path.insert(0, str(Path(__file__).resolve().parent))
from pp_gpt import MICRO_BATCHES, _loss, build, step_schedule, vramscope_inputs  # noqa: E402,F401

_SCHEDULES = {}


def vramscope_pipeline_step(model, batch):
    """One GPipe step over this rank's stage: the first stage feeds the tokens, the last the
    labels, and returns the micro-batches' mean loss."""
    rank, stages = dist.get_rank(), dist.get_world_size()
    if id(model) not in _SCHEDULES:
        stage = PipelineStage(model, rank, stages, next(model.parameters()).device)
        _SCHEDULES[id(model)] = ScheduleGPipe(stage, n_microbatches=MICRO_BATCHES, loss_fn=_loss)
    return step_schedule(_SCHEDULES[id(model)], batch)
