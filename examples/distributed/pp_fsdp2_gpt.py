"""Pipeline and data parallelism together, as torchtitan combines them: ``pp_gpt.py``'s GPT in
two pipeline stages over the outer ("pp") dimension of a 2-D mesh, each stage's blocks and the
stage itself sharded by FSDP2 over the inner ("dp") one, kept gathered between its forward and
backward (``reshard_after_forward=False``, torchtitan's choice under PP), driven by
``Schedule1F1B`` over 4 micro-batches. Four ranks (PP 2 x DP 2): rank = 2 x stage + dp rank.

    torchrun --nproc-per-node 4 examples/distributed/train_model_file.py \\
        examples/distributed/pp_fsdp2_gpt.py:build --batch 8 --seq 256 --backend gloo-staged

The built-in families' estimate of the same layout is ``--pp 2 --dp 2 --zero 3 --pp-impl torch``
(docs/accuracy.md); the tracer runs one rank of it (``vramscope predict --model
examples/distributed/pp_fsdp2_gpt.py:build --world-size 4 --rank R``). Its four ranks were
captured on an H100 (goldens/h100/run/ranks4_pp_fsdp2_gpt_adamw_fp32)."""

import sys
from pathlib import Path

import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "training"))
from models import _GPT  # noqa: E402
from pp_gpt import GPTStage, _loss, mesh_pipeline_step, vramscope_inputs  # noqa: E402,F401

PP = 2
_MESHES = {}
_SCHEDULES = {}


def build():
    """This rank's stage (its pipeline coordinate), sharded over its data-parallel group."""
    mesh = init_device_mesh("cuda", (PP, dist.get_world_size() // PP), mesh_dim_names=("pp", "dp"))
    stage, layers = mesh["pp"].get_local_rank(), _GPT["layers"]
    model = GPTStage(stage * layers // PP, (stage + 1) * layers // PP, stage == 0, stage == PP - 1)
    for block in model.blocks:
        fully_shard(block, mesh=mesh["dp"], reshard_after_forward=False)
    fully_shard(model, mesh=mesh["dp"], reshard_after_forward=False)
    _MESHES[id(model)] = mesh
    return model


def vramscope_pipeline_step(model, batch):
    """One 1F1B step of this rank's stage over its pipeline group (the ranks of its dp index)."""
    return mesh_pipeline_step(model, batch, _MESHES[id(model)], _SCHEDULES, PP, _loss)
