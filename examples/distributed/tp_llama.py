"""A small LLaMA-style decoder under tensor and sequence parallelism, with torchtitan's plan:
q/k/v and the MLP's gate and up column-parallel, the attention output and the MLP's down
row-parallel, the norms sequence-parallel (activations between the blocks sharded along the
sequence), the embedding row-parallel into a sequence-sharded output, and the head
column-parallel with its logits gathered. Predict one rank of a two-rank job without a GPU:

    vramscope predict --model examples/distributed/tp_llama.py:build --world-size 2 \\
        --batch 4 --seq 512 --python PYTHON_WITH_TORCH

The tracer sets up the fake process group; this function builds the model and parallelises it,
as a training script does after ``init_process_group``."""

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import Replicate, Shard
from torch.distributed.tensor.parallel import (ColwiseParallel, PrepareModuleInput,
                                               RowwiseParallel, SequenceParallel,
                                               parallelize_module)

VOCAB, HIDDEN, LAYERS, HEADS, FFN = 8192, 512, 4, 8, 1408


class Attention(nn.Module):
    def __init__(self):
        super().__init__()
        self.wq = nn.Linear(HIDDEN, HIDDEN, bias=False)
        self.wk = nn.Linear(HIDDEN, HIDDEN, bias=False)
        self.wv = nn.Linear(HIDDEN, HIDDEN, bias=False)
        self.wo = nn.Linear(HIDDEN, HIDDEN, bias=False)

    def forward(self, x):
        b, s, _ = x.shape
        # -1 heads: under tensor parallelism each rank holds HEADS / TP of them
        q, k, v = (w(x).view(b, s, -1, HIDDEN // HEADS).transpose(1, 2)
                   for w in (self.wq, self.wk, self.wv))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.wo(y.transpose(1, 2).reshape(b, s, -1))


class FeedForward(nn.Module):
    def __init__(self):
        super().__init__()
        self.w1 = nn.Linear(HIDDEN, FFN, bias=False)
        self.w3 = nn.Linear(HIDDEN, FFN, bias=False)
        self.w2 = nn.Linear(FFN, HIDDEN, bias=False)

    def forward(self, x):
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.attention_norm = nn.RMSNorm(HIDDEN)
        self.attention = Attention()
        self.ffn_norm = nn.RMSNorm(HIDDEN)
        self.feed_forward = FeedForward()

    def forward(self, x):
        x = x + self.attention(self.attention_norm(x))
        return x + self.feed_forward(self.ffn_norm(x))


class Decoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.tok_embeddings = nn.Embedding(VOCAB, HIDDEN)
        self.layers = nn.ModuleList(Block() for _ in range(LAYERS))
        self.norm = nn.RMSNorm(HIDDEN)
        self.output = nn.Linear(HIDDEN, VOCAB, bias=False)

    def forward(self, ids):
        x = self.tok_embeddings(ids)
        for layer in self.layers:
            x = layer(x)
        return self.output(self.norm(x))


def apply_tensor_parallel(model, mesh, ends: bool = True):
    """torchtitan's plan for this decoder over the 1-D tensor-parallel mesh ``mesh``; with
    ``ends=False`` only its blocks' (a pipeline stage may lack the embedding or the head)."""
    if ends:
        parallelize_module(model, mesh, {
            "tok_embeddings": RowwiseParallel(input_layouts=Replicate(), output_layouts=Shard(1)),
            "norm": SequenceParallel(),
            "output": ColwiseParallel(input_layouts=Shard(1), output_layouts=Replicate()),
        })
    for block in model.layers:
        parallelize_module(block, mesh, {
            "attention_norm": SequenceParallel(),
            "attention": PrepareModuleInput(input_layouts=(Shard(1),),
                                            desired_input_layouts=(Replicate(),)),
            "attention.wq": ColwiseParallel(),
            "attention.wk": ColwiseParallel(),
            "attention.wv": ColwiseParallel(),
            "attention.wo": RowwiseParallel(output_layouts=Shard(1)),
            "ffn_norm": SequenceParallel(),
            "feed_forward": PrepareModuleInput(input_layouts=(Shard(1),),
                                               desired_input_layouts=(Replicate(),)),
            "feed_forward.w1": ColwiseParallel(),
            "feed_forward.w2": RowwiseParallel(output_layouts=Shard(1)),
            "feed_forward.w3": ColwiseParallel(),
        })
    return model


def build():
    model = Decoder()
    mesh = init_device_mesh("cuda", (torch.distributed.get_world_size(),))
    return apply_tensor_parallel(model, mesh)


def vramscope_inputs(batch_size, seq_len, image_size):
    tokens = torch.randint(0, VOCAB, (batch_size, seq_len + 1))
    return tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()


def vramscope_forward(model, batch):
    return model(batch[0])


def vramscope_loss(logits, batch):
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), batch[1].reshape(-1))
