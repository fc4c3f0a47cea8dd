"""The menu's techniques in the built-in families against the tracer running the technique's
real PyTorch code: torchtune's chunked output and CEWithChunkedOutputLoss written out in a model
file (the head over the sequence's chunks, each chunk's logits upcast and its cross-entropy
summed, the logits dropped before backward), traced on fake tensors, against
`vramscope predict --loss-chunks` on the same GPT-2 config. The peaks agree within 2%, and the
tracer shows the saving the flag claims against the same loss computed whole.
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

CONFIG = {"model_type": "gpt2", "n_layer": 2, "n_embd": 128, "n_head": 4, "vocab_size": 8000,
          "n_positions": 128}

MODEL = '''
import torch
import torch.nn.functional as F
from transformers import GPT2Config, GPT2LMHeadModel

CHUNKS = {chunks}
CONFIG = {config}


def build():
    return GPT2LMHeadModel(GPT2Config(**{{k: v for k, v in CONFIG.items() if k != "model_type"}}))


def vramscope_inputs(batch_size, seq_len, image_size):
    ids = torch.randint(0, CONFIG["vocab_size"], (batch_size, seq_len))
    return {{"input_ids": ids, "labels": ids.clone()}}


def vramscope_forward(model, batch):
    # The loss is computed here, so the logits are dropped when this returns (del logits).
    h = model.transformer(input_ids=batch["input_ids"]).last_hidden_state
    labels = F.pad(batch["labels"], (0, 1), value=-100)[..., 1:]
    if CHUNKS == 1:
        logits = model.lm_head(h)
        return F.cross_entropy(logits.float().reshape(-1, logits.size(-1)), labels.reshape(-1))
    logits = [model.lm_head(c) for c in h.chunk(CHUNKS, dim=1)]
    total = None
    for part, target in zip(logits, labels.chunk(CHUNKS, dim=1)):
        loss = F.cross_entropy(part.float().reshape(-1, part.size(-1)), target.reshape(-1),
                               reduction="sum")
        total = loss if total is None else total + loss
    return total / labels.numel()


def vramscope_loss(output, batch):
    return output
'''

SETUP = ["--batch", "8", "--seq", "128", "--dtype", "bf16", "--steps", "2", "--json", "-q"]


def peak(*args: str, cwd: Path) -> int:
    require_binary(BIN)  # a skip here, a failure in CI (VRAMSCOPE_REQUIRE_TORCH=1)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    out = subprocess.run([BIN, "predict", *args, *SETUP, "--python", sys.executable], cwd=cwd,
                         env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)["devices"][0]["peak_allocated"]["bytes"]


def test_chunked_cross_entropy_matches_the_traced_torchtune_loss(tmp_path: Path) -> None:
    config = tmp_path / "config.json"
    config.write_text(json.dumps(CONFIG))
    traced = {}
    for chunks in (1, 4):
        path = tmp_path / f"chunks{chunks}.py"
        path.write_text(MODEL.format(chunks=chunks, config=repr(CONFIG)))
        traced[chunks] = peak("--model", f"{path}:build", cwd=tmp_path)
    built_in = peak("--model", str(config), "--loss-chunks", "4", cwd=tmp_path)
    # The logits (8 x 128 x 8000) in bf16 are 15.6 MiB, their fp32 upcast 31.3 MiB: chunking
    # upcasts a quarter at a time.
    assert traced[1] - traced[4] > 30 << 20
    assert abs(built_in - traced[4]) / traced[4] < 0.02, (built_in, traced[4])
