"""The menu's techniques in the built-in families against the tracer running the technique's
real PyTorch code: torchtune's chunked output and CEWithChunkedOutputLoss written out in a model
file (the head over the sequence's chunks, each chunk's logits upcast and its cross-entropy
summed, the logits dropped before backward), traced on fake tensors, against
`vramscope predict --loss-chunks` on the same GPT-2 config. The peaks agree within 2%, and the
tracer shows the saving the flag claims against the same loss computed whole. And torchtitan's
op-level selective checkpointing policy (torch.utils.checkpoint's selective contexts) on a
transformers LLaMA against `--checkpointing-ops`.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

ROOT = Path(__file__).resolve().parents[2]
BIN = str(Path(os.environ.get("VRAMSCOPE_BIN", str(ROOT / "build" / "vramscope"))).resolve())

from conftest import require_binary  # noqa: E402

TRAINING = str(ROOT / "examples" / "training")  # hf_models.py: the GPU techniques step's code

CONFIG = {"model_type": "gpt2", "n_layer": 2, "n_embd": 128, "n_head": 4, "vocab_size": 8000,
          "n_positions": 128}

MODEL = '''
import sys

import torch
import torch.nn.functional as F
from transformers import GPT2Config, GPT2LMHeadModel

sys.path.insert(0, {training!r})
from hf_models import chunked_loss  # the GPU techniques step's loss, the same code

CHUNKS = {chunks}
CONFIG = {config}


def build():
    return GPT2LMHeadModel(GPT2Config(**{{k: v for k, v in CONFIG.items() if k != "model_type"}}))


def vramscope_inputs(batch_size, seq_len, image_size):
    ids = torch.randint(0, CONFIG["vocab_size"], (batch_size, seq_len))
    return {{"input_ids": ids, "labels": ids.clone()}}


def vramscope_forward(model, batch):
    # The loss is computed here, so the logits are dropped when this returns (del logits).
    if CHUNKS > 1:
        return chunked_loss(model, batch, CHUNKS)
    h = model.transformer(input_ids=batch["input_ids"]).last_hidden_state
    labels = F.pad(batch["labels"], (0, 1), value=-100)[..., 1:]
    logits = model.lm_head(h)
    return F.cross_entropy(logits.float().reshape(-1, logits.size(-1)), labels.reshape(-1))


def vramscope_loss(output, batch):
    return output
'''

SETUP = ["--batch", "8", "--seq", "128", "--dtype", "bf16", "--steps", "2", "--json", "-q"]


def peak(*args: str, cwd: Path, setup: list[str] = SETUP) -> int:
    require_binary(BIN)  # a skip here, a failure in CI (VRAMSCOPE_REQUIRE_TORCH=1)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    out = subprocess.run([BIN, "predict", *args, *setup, "--python", sys.executable], cwd=cwd,
                         env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)["devices"][0]["peak_allocated"]["bytes"]


def test_chunked_cross_entropy_matches_the_traced_torchtune_loss(tmp_path: Path) -> None:
    config = tmp_path / "config.json"
    config.write_text(json.dumps(CONFIG))
    traced = {}
    for chunks in (1, 4):
        path = tmp_path / f"chunks{chunks}.py"
        path.write_text(MODEL.format(chunks=chunks, config=repr(CONFIG), training=TRAINING))
        traced[chunks] = peak("--model", f"{path}:build", cwd=tmp_path)
    built_in = peak("--model", str(config), "--loss-chunks", "4", cwd=tmp_path)
    # The logits (8 x 128 x 8000) in bf16 are 15.6 MiB, their fp32 upcast 31.3 MiB: chunking
    # upcasts a quarter at a time.
    assert traced[1] - traced[4] > 30 << 20
    assert abs(built_in - traced[4]) / traced[4] < 0.02, (built_in, traced[4])


LLAMA = {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "vocab_size": 8000,
         "hidden_size": 256, "num_hidden_layers": 2, "num_attention_heads": 4,
         "num_key_value_heads": 2, "intermediate_size": 688, "max_position_embeddings": 256,
         "tie_word_embeddings": False}

# Checkpointing as the GPU techniques step applies it (hf_models.apply_checkpointing: torchtitan's
# op-level policy, or blocks 2, 4, ... through transformers' per-layer switch), or on every block.
SAC_MODEL = '''
import sys

import torch
from transformers import LlamaConfig, LlamaForCausalLM

sys.path.insert(0, {training!r})
from hf_models import apply_checkpointing

CONFIG = {config}
TECHNIQUE = {technique!r}


def build():
    config = {{k: v for k, v in CONFIG.items() if k not in ("model_type", "architectures")}}
    model = LlamaForCausalLM(LlamaConfig(**config, attn_implementation="sdpa"))
    if TECHNIQUE:
        apply_checkpointing(model, TECHNIQUE)
    else:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={{"use_reentrant": False}})
    return model


def vramscope_inputs(batch_size, seq_len, image_size):
    ids = torch.randint(0, CONFIG["vocab_size"], (batch_size, seq_len))
    return {{"input_ids": ids, "labels": ids.clone()}}


def vramscope_forward(model, batch):
    return model(**batch)


def vramscope_loss(output, batch):
    return output.loss
'''


def test_op_level_checkpointing_matches_torchtitans_policy_traced(tmp_path: Path) -> None:
    config = tmp_path / "config.json"
    config.write_text(json.dumps(LLAMA))
    setup = ["--batch", "4", "--seq", "256", *SETUP[4:]]
    traced = {}
    for op_level in (False, True):
        path = tmp_path / f"llama_op{int(op_level)}.py"
        path.write_text(SAC_MODEL.format(config=repr(LLAMA), training=TRAINING,
                                         technique="ckptops" if op_level else ""))
        traced[op_level] = peak("--model", f"{path}:build", cwd=tmp_path, setup=setup)
    full = peak("--model", str(config), "--checkpointing", cwd=tmp_path, setup=setup)
    op_level = peak("--model", str(config), "--checkpointing-ops", cwd=tmp_path, setup=setup)
    # Measured here (torch 2.15, transformers 5.24): traced 221,560,320 and 227,591,680 B,
    # built-in 221,492,736 and 227,524,096 B: what the policy keeps costs the same 6,031,360 B.
    assert abs(op_level - traced[True]) / traced[True] < 0.005, (op_level, traced[True])
    kept_traced, kept = traced[True] - traced[False], op_level - full
    assert kept_traced > 4 << 20, kept_traced
    assert abs(kept - kept_traced) <= kept_traced // 100, (kept, kept_traced)


def test_checkpointing_every_second_block_matches_hfs_per_layer_switch(tmp_path: Path) -> None:
    """Blocks 2, 4, ... checkpointed (torchtitan's selective_ac_option "2"), here through
    transformers' per-layer gradient_checkpointing switch, against --checkpointing-every 2."""
    config = tmp_path / "config.json"
    config.write_text(json.dumps(LLAMA))
    setup = ["--batch", "4", "--seq", "256", *SETUP[4:]]
    path = tmp_path / "llama_every2.py"
    path.write_text(SAC_MODEL.format(config=repr(LLAMA), training=TRAINING, technique="ckpt2"))
    traced = peak("--model", f"{path}:build", cwd=tmp_path, setup=setup)
    every2 = peak("--model", str(config), "--checkpointing-every", "2", cwd=tmp_path, setup=setup)
    full = peak("--model", str(config), "--checkpointing", cwd=tmp_path, setup=setup)
    none = peak("--model", str(config), cwd=tmp_path, setup=setup)
    assert full < every2 < none
    assert abs(every2 - traced) / traced < 0.005, (every2, traced)


# torchao's float8 training on the LLaMA above, as torchtitan converts it (every nn.Linear but
# the head), traced on fake CUDA tensors: torchao's own casts and torch._scaled_mm run as they
# would on an H100 (the fake tensors need no float8 kernel).
FLOAT8_MODEL = '''
import torch
from torchao.float8 import convert_to_float8_training
from transformers import LlamaConfig, LlamaForCausalLM

CONFIG = {config}


def build():
    config = {{k: v for k, v in CONFIG.items() if k not in ("model_type", "architectures")}}
    model = LlamaForCausalLM(LlamaConfig(**config, attn_implementation="sdpa"))
    convert_to_float8_training(model, module_filter_fn=lambda module, fqn: fqn != "lm_head")
    return model


def vramscope_inputs(batch_size, seq_len, image_size):
    ids = torch.randint(0, CONFIG["vocab_size"], (batch_size, seq_len))
    return {{"input_ids": ids, "labels": ids.clone()}}


def vramscope_forward(model, batch):
    return model(**batch)


def vramscope_loss(output, batch):
    return output.loss
'''


def cast_sequences(stream: Path) -> dict[str, list[tuple[int, str]]]:
    """Each block linear's allocations of 512 B or more in order, but the products' outputs and
    what is saved for backward (named after the module that uses them, which the tracer and the
    simulator label differently): the float8 casts, forward and backward."""
    out: dict[str, list[tuple[int, str]]] = {}
    for line in stream.read_text().splitlines()[1:]:
        event = json.loads(line)
        if event["ev"] != "alloc" or event["bytes"] < 512 or event["category"] == "activation":
            continue
        name = event.get("name", "").split(" (")[0]
        if name.startswith("model.layers.") and name.endswith("_proj") and \
                event["op"] != "aten::mm":
            out.setdefault(name, []).append((event["bytes"], event["op"]))
    return out


@pytest.mark.parametrize("dtype", ["bf16", "bf16-amp"])
def test_float8_casts_match_torchaos_float8_linear_traced(tmp_path: Path, dtype: str) -> None:
    pytest.importorskip("torchao")
    config = tmp_path / "config.json"
    config.write_text(json.dumps(LLAMA))
    model = tmp_path / "llama_float8.py"
    model.write_text(FLOAT8_MODEL.format(config=repr(LLAMA)))
    setup = ["--batch", "8", "--seq", "256", "--dtype", dtype, "--steps", "2", "-q", "--json"]
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    streams, peaks = {}, {}
    for label, model_args in (("traced", ["--model", f"{model}:build", "--python", sys.executable]),
                              ("built-in", ["--model", str(config), "--fp8"])):
        require_binary(BIN)
        streams[label] = tmp_path / f"{label}.jsonl"
        out = subprocess.run([BIN, "predict", *model_args, *setup, "--emit-stream",
                              str(streams[label])], cwd=tmp_path, env=env, capture_output=True,
                             text=True, timeout=600)
        assert out.returncode == 0, out.stderr
        peaks[label] = json.loads(out.stdout)["devices"][0]["peak_allocated"]["bytes"]
    # The peaks too (the allocator model's): the engine frees each Float8Linear's saved input
    # after its backward, which the tracer did not until it released what a custom Function
    # unpacked (then bf16 was 1.2% apart).
    assert abs(peaks["built-in"] - peaks["traced"]) / peaks["traced"] < 0.01, peaks
    traced, built_in = cast_sequences(streams["traced"]), cast_sequences(streams["built-in"])
    # 2 blocks x 7 linears, each cast 6 times a step (input and weight in forward; the gradient twice,
    # the weight and the input in backward), 5 or 4 allocations a cast of 512 B or more.
    assert len(traced) == 14, sorted(traced)
    for name, sequence in traced.items():
        assert len(sequence) >= 24, (name, sequence)
        assert built_in.get(name) == sequence, name


def attention_allocations(stream: Path, tokens: int) -> list[tuple[int, str]]:
    """The packed attention's own allocations, forward and backward, in order: K and V repeated
    to every head (clones of [1, heads, T, d]), the bias made from the mask (and its padding),
    the efficient kernel's outputs and its backward's gradients, and the sums of the repeated
    gradients back to the KV heads (ops and sizes, not module labels, which the tracer and the
    simulator give differently)."""
    heads, kv = LLAMA["num_attention_heads"], LLAMA["num_key_value_heads"]
    d = LLAMA["hidden_size"] // heads
    repeated = {heads * tokens * d * size for size in (2, 4)}
    summed = {kv * tokens * d * size for size in (2, 4)}
    out = []
    for line in stream.read_text().splitlines()[1:]:
        event = json.loads(line)
        if event["ev"] != "alloc" or event["category"] in ("gradient", "input"):
            continue
        op, size = event["op"], event["bytes"]
        if (op.startswith("aten::_scaled_dot_product_efficient_attention") or op == "aten::where"
                or (op == "aten::constant_pad_nd" and size >= tokens * tokens)
                or (op == "aten::clone" and size in repeated)
                or (op == "aten::sum" and size in summed)):
            out.append((size, op))
    return out


def without_backward_delta(allocations: list, heads: int, tokens: int) -> list:
    """The family's allocations less the kernel's fp32 delta (heads x tokens x 4 B), which its
    backward makes on a GPU and the tracer's fake kernel does not (docs/accuracy.md,
    sdpa-backward-delta)."""
    delta = (heads * tokens * 4, "aten::_scaled_dot_product_efficient_attention_backward")
    return [a for a in allocations if a != delta]


@pytest.mark.parametrize("dtype, lengths", [("bf16", "100,60,96"), ("bf16-amp", "100,60,100")])
def test_packing_matches_transformers_packed_batch_traced(tmp_path: Path, dtype: str,
                                                         lengths: str) -> None:
    """--pack against transformers' LlamaForCausalLM traced on a packed row (the tracer's
    --pack: DataCollatorWithFlattening's position ids): the same mask, bias, repeated K/V and
    efficient-kernel allocations in the same order, and peaks within 1%. 260 tokens also
    checks the bias's padding to a multiple of 8."""
    config = tmp_path / "config.json"
    config.write_text(json.dumps(LLAMA))
    require_binary(BIN)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    traced = tmp_path / "traced.jsonl"
    tracer_dtype = ["--dtype", "fp32", "--amp", "bf16"] if dtype == "bf16-amp" else [
        "--dtype", dtype]
    out = subprocess.run([sys.executable, "-m", "vramscope.tracer", "--model", f"hf:{config}",
                          "--pack", lengths, *tracer_dtype, "--steps", "2", "-o", str(traced)],
                         cwd=tmp_path, env={**env, "PYTHONPATH": str(ROOT / "python")},
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    built_in = tmp_path / "built_in.jsonl"
    peaks = {}
    for label, args in (("traced", ["--model", str(traced)]),
                        ("built-in", ["--model", str(config), "--pack", lengths, "--dtype", dtype,
                                      "--steps", "2", "--emit-stream", str(built_in)])):
        out = subprocess.run([BIN, "predict", *args, "--json", "-q"], cwd=tmp_path, env=env,
                             capture_output=True, text=True, timeout=600)
        assert out.returncode == 0, out.stderr
        peaks[label] = json.loads(out.stdout)["devices"][0]["peak_allocated"]["bytes"]
    assert abs(peaks["built-in"] - peaks["traced"]) / peaks["traced"] < 0.01, peaks
    tokens = sum(int(n) for n in lengths.split(","))
    ours = without_backward_delta(attention_allocations(built_in, tokens),
                                  LLAMA["num_attention_heads"], tokens)
    theirs = attention_allocations(traced, tokens)
    # per layer and step: 2 repeats, the bias (and its padding), output and log-sum-exp, 3
    # gradients and 2 sums, for 2 layers x 2 steps
    assert len(theirs) >= 4 * 9, theirs
    assert ours == theirs
