"""2-D parallelism as torchtitan applies it: the decoder of ``tp_llama.py`` tensor- and
sequence-parallel over the inner ("tp") dimension of the mesh, then each block and the root
sharded by FSDP2 over the outer ("dp") one. Predict one of four ranks (DP 2 x TP 2):

    vramscope predict --model examples/distributed/fsdp2_tp_llama.py:build --world-size 4 \\
        --batch 4 --seq 512 --python PYTHON_WITH_TORCH"""

import sys
from pathlib import Path

import torch
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard

sys.path.insert(0, str(Path(__file__).resolve().parent))
from tp_llama import (Decoder, apply_tensor_parallel, vramscope_forward,  # noqa: E402,F401
                      vramscope_inputs, vramscope_loss)

TP = 2


def build():
    world = torch.distributed.get_world_size()
    mesh = init_device_mesh("cuda", (world // TP, TP), mesh_dim_names=("dp", "tp"))
    model = apply_tensor_parallel(Decoder(), mesh["tp"])
    for block in model.layers:
        fully_shard(block, mesh=mesh["dp"])
    return fully_shard(model, mesh=mesh["dp"])
