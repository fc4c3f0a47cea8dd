"""LitGPT's LoRA finetuning step, for the tracer: the model and step whose peak memory LitGPT
published in ``tutorials/resource-tables.md`` ("Finetuning with LoRA on 1 GPU", lit-gpt commit
8641822, 2023-10-20, one A100 40 GB, PyTorch 2.1, ``--precision bf16-true``), so that
``vramscope predict`` can be compared with a measurement made by others (docs/accuracy.md).

It imports LitGPT's own code from a checkout at that commit (nothing of it is copied here):

    git clone https://github.com/Lightning-AI/litgpt /tmp/lit-gpt
    git -C /tmp/lit-gpt checkout 8641822
    LIT_GPT_DIR=/tmp/lit-gpt LITGPT_MODEL=Llama-2-7b-hf vramscope predict \\
        --model examples/published/litgpt_lora.py:build --dtype bf16 --batch 1 --seq 1304 \\
        --optimizer adamw --grad-accum 2 --json

What ``finetune/lora.py`` does there, and so what this file does:

- ``LITGPT_MODEL`` names a LitGPT config (``Llama-2-7b-hf``, ``Llama-2-13b-hf``,
  ``stablelm-base-alpha-3b``, ``phi-1_5``); LoRA of rank 8 (alpha 16, dropout 0.05) on the
  attention's query and value only, every other weight frozen (``mark_only_lora_as_trainable``);
  the whole model in bf16 (``bf16-true``: ``--dtype bf16``), AdamW on the adapters;
- the model's ``max_seq_length`` is the longest training sample (the rotary cache's length),
  and the first micro-batch holds that sample, padded to it: ``--seq`` is that length (Alpaca's
  longest: 1,304 tokens for Llama 2, 1,034 for StableLM Alpha, 1,044 for phi-1.5);
- the forward computes the head in chunks of 128 tokens (a list of logits, the last one
  shifted), and the loss is ``chunked_cross_entropy`` over the chunks, divided by the gradient
  accumulation (128 samples per optimizer step: ``--grad-accum`` 2 already holds the adapters'
  gradients between micro-batches, as the later ones do)."""

import os
import sys

import torch

_LIT_GPT = os.environ.get("LIT_GPT_DIR")
if not _LIT_GPT or not os.path.isdir(os.path.join(_LIT_GPT, "lit_gpt")):
    raise ImportError("set LIT_GPT_DIR to a checkout of https://github.com/Lightning-AI/litgpt at "
                      "commit 8641822 (it has the lit_gpt package)")
sys.path.insert(0, _LIT_GPT)
from lit_gpt.lora import GPT, Config, mark_only_lora_as_trainable  # noqa: E402
from lit_gpt.utils import chunked_cross_entropy  # noqa: E402

MODEL = os.environ.get("LITGPT_MODEL", "Llama-2-7b-hf")
GRADIENT_ACCUMULATION = 128  # finetune/lora.py: batch_size 128, micro-batches of 1


def build():
    config = Config.from_name(MODEL, r=8, alpha=16, dropout=0.05, to_query=True, to_key=False,
                              to_value=True, to_projection=False, to_mlp=False, to_head=False)
    model = GPT(config)
    mark_only_lora_as_trainable(model)
    return model


def vramscope_inputs(batch_size, seq_len, image_size):
    """A micro-batch padded to ``seq_len`` (the longest sample): input ids and their labels."""
    ids = torch.randint(0, 32000, (batch_size, seq_len))
    return ids, ids.clone()


def vramscope_forward(model, batch):
    ids, _ = batch
    model.max_seq_length = ids.size(1)  # train(): the longest sample's length
    logits = model(ids, lm_head_chunk_size=128)
    logits[-1] = logits[-1][..., :-1, :]  # output n predicts token n + 1
    return logits


def vramscope_loss(logits, batch):
    _, targets = batch
    return chunked_cross_entropy(logits, targets[..., 1:]) / GRADIENT_ACCUMULATION
