"""The example GPT (examples/training/models.py) under DistributedDataParallel, as
``train.py --parallel ddp`` (the default under torchrun) wraps it. Predict one rank of a
two-rank job without a GPU:

    vramscope predict --model examples/distributed/ddp_gpt.py:build --world-size 2 \\
        --batch 8 --seq 256 --python PYTHON_WITH_TORCH

The tracer sets up the fake process group and emulates DDP's reducer (its gradient buckets);
this function builds the model and wraps it, as a training script does after
``init_process_group``."""

import sys
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "training"))
from models import GPT, _GPT  # noqa: E402


def build():
    model = GPT(**_GPT)
    return DistributedDataParallel(model, device_ids=[torch.cuda.current_device()])


def vramscope_inputs(batch_size, seq_len, image_size):
    tokens = torch.randint(0, _GPT["vocab"], (batch_size, seq_len + 1))
    return tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()


def vramscope_forward(model, batch):
    return model(batch[0])


def vramscope_loss(logits, batch):
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), batch[1].reshape(-1),
                           ignore_index=-100)
