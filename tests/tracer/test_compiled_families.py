"""`vramscope predict --compile` for the LLaMA family (src/predict/compiled_step.h) against the
tracer's --compile (torch.compile's own partitioner and lowering on fake CUDA tensors), at sizes
and a depth the templates were not made from: the peak of live bytes in each phase."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

ROOT = Path(__file__).resolve().parents[2]
BIN = str(Path(os.environ.get("VRAMSCOPE_BIN", str(ROOT / "build" / "vramscope"))).resolve())

from conftest import require_binary  # noqa: E402

# A LLaMA-3-shaped model (grouped-query attention, untied head) of 5 layers.
CONFIG = {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "num_hidden_layers": 5,
          "hidden_size": 768, "num_attention_heads": 12, "num_key_value_heads": 4,
          "intermediate_size": 2048, "vocab_size": 5000, "max_position_embeddings": 1024,
          "tie_word_embeddings": False}
BATCH, SEQ = 2, 200


def phase_peaks(path: Path) -> dict[str, int]:
    """The most bytes live within each phase of step 1 (no allocator)."""
    size, live, phase, out = {}, 0, None, {}
    for line in path.read_text().splitlines()[1:]:
        e = json.loads(line)
        if e["ev"] == "phase":
            phase = e["phase"] if e["step"] == 1 else None
            continue
        if e["ev"] == "alloc":
            size[e["id"]] = e["bytes"]
            live += e["bytes"]
        elif e["ev"] == "free":
            live -= size.pop(e["id"], 0)
        else:
            continue
        if phase:
            out[phase] = max(out.get(phase, 0), live)
    return out


# (config changes, tracer flags, predict flags): bf16 autocast; pure bf16 with a tied head, every
# layer checkpointed (the layers run eagerly between compiled graphs); and multi-head attention
# checkpointed under autocast (every layer's weight casts dropped when the forward ends).
CASES = {
    "gqa-bf16-amp": ({}, ["--amp", "bf16"], ["--dtype", "bf16-amp"]),
    "mha-bf16-amp-checkpointed": ({"num_key_value_heads": 12}, ["--amp", "bf16", "--checkpointing"],
                                  ["--dtype", "bf16-amp", "--checkpointing"]),
    "gqa-tied-bf16-checkpointed": ({"tie_word_embeddings": True},
                                   ["--dtype", "bf16", "--checkpointing"],
                                   ["--dtype", "bf16", "--checkpointing"]),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_compiled_llama_matches_the_tracer(tmp_path: Path, case: str) -> None:
    require_binary(BIN)
    changes, tracer_flags, predict_flags = CASES[case]
    config = tmp_path / "config.json"
    config.write_text(json.dumps({**CONFIG, **changes}))
    common = ["--batch", str(BATCH), "--seq", str(SEQ), "--steps", "1", "--optimizer", "adamw",
              "--compile"]
    traced = tmp_path / "traced.jsonl"
    env = dict(os.environ, PYTHONPATH=str(ROOT / "python"))
    done = subprocess.run([sys.executable, "-m", "vramscope.tracer", "--model", f"hf:{config}",
                           "-o", str(traced), *tracer_flags, *common], env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    predicted = tmp_path / "predicted.jsonl"
    done = subprocess.run([BIN, "predict", "--model", str(config), "--emit-stream",
                           str(predicted), "--force", "-q", *predict_flags, *common],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    ours, theirs = phase_peaks(predicted), phase_peaks(traced)
    for phase in ("forward", "backward", "optimizer"):
        assert ours[phase] == theirs[phase], (phase, ours, theirs)


def test_what_has_no_template_is_one_line(tmp_path: Path) -> None:
    require_binary(BIN)
    done = subprocess.run([BIN, "predict", "--model", "gpt2", "--compile", "--dtype", "bf16"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode != 0
    assert "--compile is predicted for the LLaMA family" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
