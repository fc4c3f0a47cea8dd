"""Pipeline and plain data parallelism together: ``pp_gpt.py``'s GPT in two pipeline stages over
the outer ("pp") dimension of a 2-D mesh, each stage replicated by DistributedDataParallel over
the inner ("dp") one, driven by ``Schedule1F1B`` over 4 micro-batches. Four ranks (PP 2 x DP 2):
rank = 2 x stage + dp rank.

``torch.distributed.pipelining`` runs a DDP stage's forwards and every backward but the step's
last under ``no_sync``, so each stage's gradients accumulate in ``.grad`` through the step and
are all-reduced once, through DDP's buckets, by its last backward (the reducer's bucket order is
recorded then, and the buckets rebuilt at the next step's first forward).

    torchrun --nproc-per-node 4 examples/distributed/train_model_file.py \\
        examples/distributed/pp_ddp_gpt.py:build --batch 8 --seq 256 --backend gloo-staged

The tracer runs one rank of it (``vramscope predict --model examples/distributed/pp_ddp_gpt.py:build
--world-size 4 --rank R --batch 8 --seq 256``)."""

import sys
from pathlib import Path

import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.nn.parallel import DistributedDataParallel

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "training"))
from models import _GPT  # noqa: E402
from pp_gpt import GPTStage, _loss, mesh_pipeline_step, vramscope_inputs  # noqa: E402,F401

PP = 2
_MESHES = {}
_SCHEDULES = {}


def build():
    """This rank's stage (its pipeline coordinate), replicated over its data-parallel group."""
    mesh = init_device_mesh("cuda", (PP, dist.get_world_size() // PP), mesh_dim_names=("pp", "dp"))
    stage, layers = mesh["pp"].get_local_rank(), _GPT["layers"]
    model = DistributedDataParallel(
        GPTStage(stage * layers // PP, (stage + 1) * layers // PP, stage == 0, stage == PP - 1),
        process_group=mesh["dp"].get_group())
    _MESHES[id(model)] = mesh
    return model


def vramscope_pipeline_step(model, batch):
    """One 1F1B step of this rank's stage over its pipeline group (the ranks of its dp index)."""
    return mesh_pipeline_step(model, batch, _MESHES[id(model)], _SCHEDULES, PP, _loss)
