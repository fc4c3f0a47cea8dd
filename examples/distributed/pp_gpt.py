"""The example GPT (examples/training/models.py) under pipeline parallelism with
``torch.distributed.pipelining``: as many stages as ranks, each holding a contiguous share of the
blocks (the first also the embeddings, the last the final norm and an untied head), driven by
``Schedule1F1B`` over 4 micro-batches. The first real per-stage measurements come from training
it on a GPU (``examples/distributed/train_model_file.py``, which drives the schedule when the
file defines ``vramscope_pipeline_step``):

    torchrun --nproc-per-node 2 examples/distributed/train_model_file.py \\
        examples/distributed/pp_gpt.py:build --batch 8 --seq 256 --backend gloo-staged

Its two ranks were captured on an H100 (goldens/h100/run/ranks2_pp_gpt_adamw_fp32). The tracer
runs one stage's rank of it (``vramscope predict --model examples/distributed/pp_gpt.py:build
--world-size 2 --rank 1 --batch 8 --seq 256``), answering the metadata the other stage would send
by running that rank's stage on the meta device (docs/design/tracer.md); the built-in families'
per-rank estimate models this schedule's buffers with ``--pp 2 --pp-impl torch``
(docs/accuracy.md)."""

import sys
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.distributed.pipelining import PipelineStage, Schedule1F1B

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "training"))
from models import GPTBlock, _GPT, init_transformer_weights  # noqa: E402

MICRO_BATCHES = 4


class GPTStage(nn.Module):
    """Blocks [first, last) of the example GPT, with the embeddings on the first stage and the
    final norm and head on the last (the head untied: its embedding is on another rank)."""

    def __init__(self, first: int, last: int, is_first: bool, is_last: bool):
        super().__init__()
        g = _GPT
        self.wte = nn.Embedding(g["vocab"], g["hidden"]) if is_first else None
        self.wpe = nn.Embedding(g["max_len"], g["hidden"]) if is_first else None
        self.blocks = nn.ModuleList(GPTBlock(g["hidden"], g["heads"], g["mlp"])
                                    for _ in range(first, last))
        self.ln_f = nn.LayerNorm(g["hidden"]) if is_last else None
        self.lm_head = nn.Linear(g["hidden"], g["vocab"], bias=False) if is_last else None
        init_transformer_weights(self)

    def forward(self, x):
        if self.wte is not None:
            pos = torch.arange(x.shape[1], device=x.device)
            x = self.wte(x) + self.wpe(pos)
        for block in self.blocks:
            x = block(x)
        if self.lm_head is not None:
            x = self.lm_head(self.ln_f(x))
        return x


def _loss(logits, labels):
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1))


def build():
    """This rank's stage of the model (the schedule that drives it is made at the first step)."""
    rank, stages = dist.get_rank(), dist.get_world_size()
    layers = _GPT["layers"]
    first, last = rank * layers // stages, (rank + 1) * layers // stages
    return GPTStage(first, last, rank == 0, rank == stages - 1)


def vramscope_inputs(batch_size, seq_len, image_size):
    tokens = torch.randint(0, _GPT["vocab"], (batch_size, seq_len + 1))
    return tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()


_SCHEDULES = {}


def vramscope_pipeline_step(model, batch):
    """One step of the 1F1B schedule over this rank's stage: the first stage feeds the tokens,
    the last the labels (and gets the micro-batches' losses, whose mean it returns); the stages
    between pass activations on."""
    rank, stages = dist.get_rank(), dist.get_world_size()
    if id(model) not in _SCHEDULES:
        device = next(model.parameters()).device
        stage = PipelineStage(model, rank, stages, device)
        _SCHEDULES[id(model)] = Schedule1F1B(stage, n_microbatches=MICRO_BATCHES, loss_fn=_loss)
    return step_schedule(_SCHEDULES[id(model)], batch)


def step_schedule(schedule, batch, return_outputs: bool = True, first: bool | None = None,
                  last: bool | None = None):
    """One step of ``schedule`` on this rank: the first stage (by default rank 0) feeds the
    tokens, the last (by default the last rank) the labels; returns the micro-batches' mean loss
    there, else None. ``return_outputs=False`` asks the schedule not to keep the last stage's
    outputs; ``first``/``last`` say where the pipeline is a dimension of a larger mesh."""
    rank, ranks = dist.get_rank(), dist.get_world_size()
    first = rank == 0 if first is None else first
    last = rank == ranks - 1 if last is None else last
    ids, labels = batch
    losses = []
    args = (ids,) if first else ()
    kwargs = dict(target=labels, losses=losses) if last else {}
    if not return_outputs:
        kwargs["return_outputs"] = False
    schedule.step(*args, **kwargs)
    return torch.stack(losses).mean() if losses else None


def mesh_pipeline_step(model, batch, mesh, schedules: dict, stages: int, loss_fn=_loss):
    """One 1F1B step of ``model``, this rank's stage, over the "pp" dimension of the 2-D
    ``mesh`` (its other dimension shards or replicates the stage: pp_fsdp2_gpt.py,
    pp_tp_llama.py, pp_ddp_gpt.py); the schedule, kept in ``schedules``, made at the first."""
    stage = mesh["pp"].get_local_rank()
    if id(model) not in schedules:
        pipeline = PipelineStage(model, stage, stages, next(model.parameters()).device,
                                 group=mesh["pp"].get_group())
        schedules[id(model)] = Schedule1F1B(pipeline, n_microbatches=MICRO_BATCHES,
                                            loss_fn=loss_fn)
    return step_schedule(schedules[id(model)], batch, first=stage == 0, last=stage == stages - 1)
