"""Pipeline and tensor parallelism together, as torchtitan combines them: ``tp_llama.py``'s
decoder in two pipeline stages over the outer ("pp") dimension of a 2-D mesh (the first with the
embedding and half the blocks, the last with the other half, the final norm and the head), each
stage tensor- and sequence-parallel over the inner ("tp") one with torchtitan's plan, driven by
``Schedule1F1B`` over 4 micro-batches. Four ranks (PP 2 x TP 2): rank = 2 x stage + tp rank.

Under sequence parallelism a stage ends in a row-parallel projection whose output is sharded
along the sequence: what one stage sends the next (and each receive buffer) is a tp-th of the
activation, [micro-batch, seq / TP, hidden].

    torchrun --nproc-per-node 4 examples/distributed/train_model_file.py \\
        examples/distributed/pp_tp_llama.py:build --batch 8 --seq 512 --backend gloo-staged

The tracer runs one rank of it (``vramscope predict --model examples/distributed/pp_tp_llama.py:build
--world-size 4 --rank R --batch 8 --seq 512``); the built-in families' estimate of the layout is
``--pp 2 --tp 2 --sp --pp-impl torch``."""

import sys
from pathlib import Path

import torch.distributed as dist
import torch.nn as nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import Replicate, Shard
from torch.distributed.tensor.parallel import (ColwiseParallel, RowwiseParallel, SequenceParallel,
                                               parallelize_module)

sys.path.insert(0, str(Path(__file__).resolve().parent))
from pp_gpt import mesh_pipeline_step  # noqa: E402
from tp_llama import (HIDDEN, LAYERS, VOCAB, Block, apply_tensor_parallel,  # noqa: E402
                      vramscope_inputs, vramscope_loss)  # noqa: F401

PP = 2
_MESHES = {}
_SCHEDULES = {}


class DecoderStage(nn.Module):
    """Blocks [first, last) of tp_llama.py's decoder, with the embedding on the first stage and
    the final norm and head on the last (the names tp_llama.py's plan uses)."""

    def __init__(self, first: int, last: int, is_first: bool, is_last: bool):
        super().__init__()
        self.tok_embeddings = nn.Embedding(VOCAB, HIDDEN) if is_first else None
        self.layers = nn.ModuleList(Block() for _ in range(first, last))
        self.norm = nn.RMSNorm(HIDDEN) if is_last else None
        self.output = nn.Linear(HIDDEN, VOCAB, bias=False) if is_last else None

    def forward(self, x):
        if self.tok_embeddings is not None:
            x = self.tok_embeddings(x)
        for layer in self.layers:
            x = layer(x)
        if self.output is not None:
            x = self.output(self.norm(x))
        return x


def _parallelize(stage: DecoderStage, mesh) -> DecoderStage:
    """tp_llama.py's plan for the blocks; the embedding, final norm and head where the stage
    has them (the embedding's output, and every stage's input and output between blocks,
    sharded along the sequence)."""
    apply_tensor_parallel(stage, mesh, ends=False)
    plan = {}
    if stage.tok_embeddings is not None:
        plan["tok_embeddings"] = RowwiseParallel(input_layouts=Replicate(),
                                                 output_layouts=Shard(1))
    if stage.output is not None:
        plan["norm"] = SequenceParallel()
        plan["output"] = ColwiseParallel(input_layouts=Shard(1), output_layouts=Replicate())
    return parallelize_module(stage, mesh, plan) if plan else stage


def build():
    """This rank's stage (its pipeline coordinate), tensor-parallel over its tp group."""
    mesh = init_device_mesh("cuda", (PP, dist.get_world_size() // PP), mesh_dim_names=("pp", "tp"))
    stage = mesh["pp"].get_local_rank()
    model = DecoderStage(stage * LAYERS // PP, (stage + 1) * LAYERS // PP, stage == 0,
                         stage == PP - 1)
    _MESHES[id(model)] = mesh
    return _parallelize(model, mesh["tp"])


def _loss(logits, labels):
    return vramscope_loss(logits, (None, labels))


def vramscope_pipeline_step(model, batch):
    """One 1F1B step of this rank's stage over its pipeline group (the ranks of its tp index)."""
    return mesh_pipeline_step(model, batch, _MESHES[id(model)], _SCHEDULES, PP, _loss)
