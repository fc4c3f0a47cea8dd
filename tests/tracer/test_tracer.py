"""Tests of the Python tracer (python/vramscope/tracer/): the stream it writes for small models
whose memory can be computed by hand, its invariants, scale, and its one-line errors.

    PYTHONPATH=python /tmp/hfv/bin/python -m pytest tests/tracer -q
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from vramscope import tracer  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
PHASE_ORDER = ("zero_grad", "inputs", "forward", "backward", "optimizer", "step_end")

# --------------------------------------------------------------------------------------- helpers

DENSE_MODELS = '''
import torch
import torch.nn as nn
import torch.nn.functional as F


def linear():
    return nn.Linear(1024, 1024)


def mlp():
    return nn.Sequential(nn.Linear(1024, 4096), nn.GELU(), nn.Linear(4096, 1024))


def vramscope_inputs(batch_size, seq_len, image_size):
    return torch.randn(batch_size, 1024), torch.randn(batch_size, 1024)


def vramscope_forward(model, batch):
    return model(batch[0])


def vramscope_loss(output, batch):
    return F.mse_loss(output, batch[1])
'''


class Stream:
    """A written stream, parsed, with every allocation's history resolved."""

    def __init__(self, path: Path):
        lines = path.read_text(encoding="utf-8").splitlines()
        self.header = json.loads(lines[0])
        self.events = [json.loads(line) for line in lines[1:]]
        self.allocs: dict[int, dict] = {}
        step = phase = None
        for e in self.events:
            if e["ev"] == "phase":
                step, phase = e["step"], e["phase"]
            elif e["ev"] == "alloc":
                self.allocs[e["id"]] = dict(e, step=step, phase=phase, first_category=e["category"],
                                            freed=None)
            elif e["ev"] == "set":
                a = self.allocs[e["id"]]
                a["category"] = e.get("category", a["category"])
                a["name"] = e.get("name", a["name"])
            elif e["ev"] == "free":
                self.allocs[e["id"]]["freed"] = (step, phase)

    def allocated(self, step=None, phase=None, category=None) -> list[dict]:
        return [a for a in self.allocs.values()
                if (step is None or a["step"] == step) and (phase is None or a["phase"] == phase)
                and (category is None or a["category"] == category)]

    def phases(self) -> list[tuple]:
        return [(e["step"], e["phase"]) for e in self.events if e["ev"] == "phase"]

    def live_at_end(self) -> list[dict]:
        return [a for a in self.allocs.values() if a["freed"] is None]

    def notes(self) -> str:
        return "\n".join(self.header["notes"])


def check_invariants(s: Stream) -> None:
    """Ids unique, frees of live allocations only, the end line's counts right, phases in order."""
    live, seen = set(), set()
    for e in s.events[:-1]:
        assert e["ev"] in ("phase", "alloc", "free", "set", "matmul", "conv"), e
        if e["ev"] == "alloc":
            assert e["id"] not in seen and e["bytes"] > 0
            assert e["category"] in tracer.CATEGORIES
            seen.add(e["id"])
            live.add(e["id"])
        elif e["ev"] == "free":
            assert e["id"] in live, f"free of a dead or unknown allocation: {e}"
            live.remove(e["id"])
        elif e["ev"] == "set":
            assert e["id"] in seen
        elif e["ev"] in ("matmul", "conv"):
            assert e["thread"] in ("forward", "backward")
    end = s.events[-1]
    assert end == {"ev": "end", "allocs": len(seen), "frees": len(seen) - len(live),
                   "live_at_end": len(live)}
    phases = s.phases()
    assert phases[0] == (0, "setup")
    setup = s.header["setup"]
    expected = [(0, "setup")]
    for step in range(1, setup["steps"] + 1):
        if setup["zero_grad"] != "none":
            expected.append((step, "zero_grad"))
        # a pipeline stage's schedule interleaves its micro-batches' forward and backward inside
        # one call: its step is one "forward" phase (the backward's allocations say so by thread)
        per_micro = (("inputs", "forward") if "torch.distributed.pipelining on rank" in s.notes()
                     else ("inputs", "forward", "backward"))
        expected += [(step, p) for p in per_micro] * setup["grad_accum"]
        expected += [(step, "optimizer"), (step, "step_end")]
    assert phases == expected


def run(tmp_path: Path, *args, out: str = "trace.jsonl") -> Stream:
    path = tmp_path / out
    assert tracer.main([str(a) for a in args] + ["-o", str(path)]) == 0
    stream = Stream(path)
    check_invariants(stream)
    return stream


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return path


def fails(tmp_path: Path, capsys, *args) -> str:
    """Runs the tracer expecting a one-line error; returns it. No output may be left behind."""
    out = tmp_path / "out" / "trace.jsonl"
    out.parent.mkdir(exist_ok=True)
    capsys.readouterr()
    assert tracer.main([str(a) for a in args] + ["-o", str(out)]) == 1
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.startswith("vramscope tracer: ")]
    assert len(lines) == 1, err
    assert lines[0].startswith("vramscope tracer: error: ")
    assert lines[0].count(", ") >= 2  # what, where, what to do
    assert list(out.parent.iterdir()) == [], "a failed trace left files behind"
    return lines[0]


def hf_config(tmp_path: Path, name: str, **config) -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(config), encoding="utf-8")
    return path


# --------------------------------------------------------------------- exact bytes, by hand


def test_linear_sgd_exact_bytes(tmp_path):
    model = write(tmp_path, "dense.py", DENSE_MODELS)
    s = run(tmp_path, "--model", f"{model}:linear", "--batch", 64, "--optimizer", "sgd",
            "--steps", 1)
    weights = sorted((a["bytes"], a["name"]) for a in s.allocated(0, "setup"))
    assert weights == [(4096, "bias"), (4_194_304, "weight")]
    assert all(a["category"] == "weight" for a in s.allocated(0, "setup"))
    inputs = s.allocated(1, "inputs")
    assert sorted((a["bytes"], a["category"], a["name"]) for a in inputs) == [
        (262_144, "input", "input0"), (262_144, "input", "input1")]
    forward = s.allocated(1, "forward")
    output = [a for a in forward if a["op"] == "aten::addmm"]
    assert [a["bytes"] for a in output] == [262_144]
    assert output[0]["category"] == "activation"  # mse_loss saves it for backward
    grads = {a["name"]: a["bytes"] for a in s.allocated(1, "backward", "gradient")}
    assert grads == {"weight.grad": 4_194_304, "bias.grad": 4096}
    assert not s.allocated(category="optimizer_state")
    assert not s.allocated(1, "optimizer")  # plain SGD updates in place
    assert sorted(a["bytes"] for a in s.live_at_end()) == [4096, 4096, 4_194_304, 4_194_304]
    assert s.header["parameters"] == {"total": 1_049_600, "trainable": 1_049_600,
                                      "bytes": 4_198_400, "trainable_bytes": 4_198_400,
                                      "buffers_bytes": 0}
    assert s.header["device_emulation"] == "fake cuda"
    assert s.header["format"] == "vramscope-tensor-stream" and s.header["version"] == 1


@pytest.mark.parametrize("impl", ["--foreach", "--fused"])
def test_linear_adam_state(tmp_path, impl):
    model = write(tmp_path, "dense.py", DENSE_MODELS)
    s = run(tmp_path, "--model", f"{model}:linear", "--batch", 64, "--optimizer", "adam", impl,
            "--steps", 2)
    state = {a["name"]: a for a in s.allocated(category="optimizer_state")}
    expected = {"weight.exp_avg": 4_194_304, "weight.exp_avg_sq": 4_194_304,
                "bias.exp_avg": 4096, "bias.exp_avg_sq": 4096}
    if impl == "--fused":  # the fused kernel keeps its step counters on the device
        expected.update({"weight.step": 4, "bias.step": 4})
    assert {name: a["bytes"] for name, a in state.items()} == expected
    for a in state.values():
        assert (a["step"], a["phase"]) == (1, "optimizer")
        assert a["freed"] is None
    assert not s.allocated(2, "optimizer", "optimizer_state")
    if impl == "--foreach":  # torch._foreach_sqrt(exp_avg_sq): one temporary per parameter
        temps = s.allocated(1, "optimizer", "temporary")
        assert sorted(a["bytes"] for a in temps) == [4096, 4_194_304]
        assert all(a["freed"] == (1, "optimizer") for a in temps)


def test_mlp_saved_activations(tmp_path):
    model = write(tmp_path, "dense.py", DENSE_MODELS)
    s = run(tmp_path, "--model", f"{model}:mlp", "--batch", 64, "--optimizer", "sgd",
            "--steps", 1)
    forward = [(a["bytes"], a["op"], a["module"], a["category"], a["name"])
               for a in s.allocated(1, "forward")]
    assert forward == [
        # fc1's output: GELU saves its input
        (1_048_576, "aten::addmm", "0", "activation", "1:aten::addmm"),
        # GELU's output: fc2's addmm saves its input (mat1)
        (1_048_576, "aten::gelu", "1", "activation", "2:aten::gelu"),
        # fc2's output: mse_loss (outside the model) saves it
        (262_144, "aten::addmm", "2", "activation", "aten::addmm"),
        (4, "aten::mse_loss", "", "temporary", ""),
    ]
    # the hidden activations are released during backward, as their nodes run; the output is
    # the loop's `out` until step_end
    assert [a["freed"] for a in s.allocated(1, "forward", "activation")] == [
        (1, "backward"), (1, "backward"), (1, "step_end")]
    # the batch is not relabelled when saved (addmm saves x, mse_loss the target)
    assert {a["category"] for a in s.allocated(1, "inputs")} == {"input"}
    grads = {a["name"]: a["bytes"] for a in s.allocated(1, "backward", "gradient")}
    assert grads == {"0.weight.grad": 16_777_216, "0.bias.grad": 16_384,
                     "2.weight.grad": 16_777_216, "2.bias.grad": 4096}
    # backward attributes each kernel to the module whose forward created its node
    by_module = {a["module"] for a in s.allocated(1, "backward")}
    assert {"0", "1", "2"} <= by_module
    markers = [(e["ev"], e["thread"]) for e in s.events if e["ev"] == "matmul"]
    assert markers == [("matmul", "forward"), ("matmul", "backward")]


def test_backward_reuses_gradient_buffers_as_the_engine_does(tmp_path):
    """A residual join: the gradient that arrives first (dy, passed through the add) is held by
    the engine alone once the branch has used it, so the branch's gradient is added into it in
    place (PyTorch's engine on real tensors does the same: the same data_ptr comes out)."""
    model = write(tmp_path, "residual.py", DENSE_MODELS + '''
class Residual(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin1 = nn.Linear(1024, 1024)
        self.lin2 = nn.Linear(1024, 1024)

    def forward(self, x):
        h = self.lin1(x)
        return h + self.lin2(h)

def residual():
    return Residual()
''')
    s = run(tmp_path, "--model", f"{model}:residual", "--batch", 64, "--optimizer", "sgd",
            "--steps", 1)
    backward_ops = [a["op"] for a in s.allocated(1, "backward")]
    assert "aten::add" not in backward_ops
    # the weight gradients are the matmuls' own outputs, kept without a copy
    assert sorted(a["op"] for a in s.allocated(1, "backward", "gradient")) == [
        "aten::mm", "aten::mm", "aten::sum", "aten::sum"]


# ---------------------------------------------------------------------- loop variants


def test_grad_accum_and_zero_grad_modes(tmp_path):
    model = write(tmp_path, "dense.py", DENSE_MODELS)
    s = run(tmp_path, "--model", f"{model}:linear", "--batch", 8, "--optimizer", "adam",
            "--grad-accum", 2, "--zero-grad", "zero", "--steps", 2)
    # the first micro-batch allocates the gradients, the second adds into them in place
    grads = s.allocated(category="gradient")
    assert sorted(a["name"] for a in grads) == ["bias.grad", "weight.grad"]
    assert all((a["step"], a["phase"]) == (1, "backward") and a["freed"] is None for a in grads)
    s = run(tmp_path, "--model", f"{model}:linear", "--batch", 8, "--optimizer", "none",
            "--zero-grad", "none", "--steps", 2, out="none.jsonl")
    assert not s.allocated(category="optimizer_state")


def test_freeze(tmp_path):
    model = write(tmp_path, "dense.py", DENSE_MODELS)
    s = run(tmp_path, "--model", f"{model}:mlp", "--freeze", "0.*", "--steps", 1)
    assert sorted(a["name"] for a in s.allocated(category="gradient")) == [
        "2.bias.grad", "2.weight.grad"]
    assert s.header["parameters"]["trainable"] == 4096 * 1024 + 1024


def test_value_reads_of_batch_derived_tensors(tmp_path):
    """Reading values that follow from the batch alone (a count of real tokens, a boolean mask of
    labels) works, as on a GPU; the mask's positions are an allocation of their own."""
    model = write(tmp_path, "masked.py", '''
        import torch
        import torch.nn as nn
        import torch.nn.functional as F

        class Tagger(nn.Module):
            def __init__(self):
                super().__init__()
                self.emb = nn.Embedding(100, 32)
                self.out = nn.Linear(32, 100)

            def forward(self, ids):
                real = int((ids != 0).sum())           # .item() of a batch-derived value
                assert real == ids.numel() - 4
                return self.out(self.emb(ids))

        def build():
            return Tagger()

        def vramscope_inputs(batch_size, seq_len, image_size):
            ids = torch.arange(1, batch_size * seq_len + 1).reshape(batch_size, seq_len) % 100 + 1
            ids[0, :4] = 0
            labels = ids.clone()
            labels[:, ::2] = -100
            return ids, labels

        def vramscope_forward(model, batch):
            return model(batch[0])

        def vramscope_loss(logits, batch):
            keep = batch[1] != -100
            return F.cross_entropy(logits[keep], batch[1][keep])  # boolean-mask indexing
    ''')
    s = run(tmp_path, "--model", f"{model}:build", "--batch", 2, "--seq", 16, "--steps", 1)
    nonzero = [a for a in s.allocated(1, "forward") if a["op"] == "aten::nonzero"]
    assert nonzero and all(a["bytes"] == 16 * 8 for a in nonzero)  # 16 kept positions, int64
    kept = [a for a in s.allocated(1, "forward") if a["op"] == "aten::index"]
    assert sorted(a["bytes"] for a in kept) == [16 * 8, 16 * 100 * 4]  # labels, logits


# -------------------------------------------------------------------- the repository's examples


def example_model(tmp_path: Path, name: str, loss: str) -> Path:
    """A model file for one of examples/training/models.py's models (imported, not modified)."""
    return write(tmp_path, f"example_{name}.py", f'''
        import sys
        sys.path.insert(0, {str(REPO / "examples" / "training")!r})
        import torch
        from models import MODELS

        SPEC = MODELS[{name!r}]

        def build():
            return SPEC.build()

        def vramscope_inputs(batch_size, seq_len, image_size):
            return SPEC.make_batch(torch.Generator().manual_seed(1))

        def vramscope_forward(model, batch):
            return model(batch[0])

        def vramscope_loss(output, batch):
            return SPEC.loss(output, batch[1])
    ''')


def test_example_resnet18_convolutions(tmp_path):
    model = example_model(tmp_path, "resnet18", "cross_entropy")
    s = run(tmp_path, "--model", f"{model}:build", "--optimizer", "momentum", "--steps", 1)
    convs = [e["thread"] for e in s.events if e["ev"] == "conv"]
    assert convs.count("forward") == 20  # 1 stem + 16 block convs + 3 downsample convs
    assert convs.count("backward") == 20
    buffers = {a["name"] for a in s.allocated(0, "setup") if a["name"].endswith("running_mean")}
    assert "bn1.running_mean" in buffers
    momentum = [a for a in s.allocated(1, "optimizer", "optimizer_state")]
    assert momentum and all(a["name"].endswith(".momentum_buffer") for a in momentum)
    assert sum(a["bytes"] for a in momentum) == s.header["parameters"]["trainable_bytes"]


def test_example_gpt_sdpa_and_tied_weights(tmp_path):
    model = example_model(tmp_path, "gpt", "cross_entropy")
    s = run(tmp_path, "--model", f"{model}:build", "--amp", "bf16", "--steps", 1)
    # lm_head.weight is wte.weight: one storage, one gradient
    names = [a["name"] for a in s.allocated(0, "setup")]
    assert "wte.weight" in names and "lm_head.weight" not in names
    assert [a["name"] for a in s.allocated(category="gradient")].count("wte.weight.grad") == 1
    # F.scaled_dot_product_attention reached a fused kernel, not the math path
    assert "scaled_dot_product_attention: " in s.notes()
    assert "math" not in s.notes().split("scaled_dot_product_attention: ")[1].split("(")[0]
    fused = [a for a in s.allocated(1, "forward") if "scaled_dot_product" in a["op"]]
    assert fused and not [a for a in s.allocated(1, "forward") if a["op"] == "aten::_safe_softmax"]


# ------------------------------------------------------------------------- Hugging Face models


def test_gpt2_small_from_config(tmp_path):
    pytest.importorskip("transformers")
    config = hf_config(tmp_path, "gpt2.json", model_type="gpt2",
                       architectures=["GPT2LMHeadModel"])  # GPT2Config() defaults: GPT-2 small
    s = run(tmp_path, "--model", f"hf:{config}", "--batch", 2, "--seq", 128, "--amp", "bf16",
            "--optimizer", "adamw", "--steps", 2)
    params = s.header["parameters"]
    assert s.header["model_class"] == "GPT2LMHeadModel"
    assert params["total"] == 124_439_808 and params["bytes"] == 497_759_232
    assert sum(a["bytes"] for a in s.allocated(0, "setup")) == 497_759_232
    grads = s.allocated(1, "backward", "gradient")
    assert sum(a["bytes"] for a in grads) == 497_759_232 and len(grads) == 148
    state = s.allocated(1, "optimizer", "optimizer_state")
    assert sum(a["bytes"] for a in state) == 2 * 497_759_232  # exp_avg, exp_avg_sq (steps: CPU)
    logits = [a for a in s.allocated(1, "forward") if a["bytes"] == 2 * 128 * 50257 * 2]
    assert logits, "bf16 logits [2, 128, 50257] under autocast"
    assert {e["thread"] for e in s.events if e["ev"] == "matmul"} == {"forward", "backward"}
    if tracer._torch_version() >= (2, 9):
        assert "scaled_dot_product_attention: cudnn x24" in s.notes()
    inputs = sorted(a["name"] for a in s.allocated(1, "inputs"))
    assert inputs == ["input_ids", "labels"]


def test_hf_gradient_checkpointing(tmp_path):
    pytest.importorskip("transformers")
    config = hf_config(tmp_path, "gpt2.json", model_type="gpt2", n_layer=4, n_embd=256,
                       n_head=4, vocab_size=1000, n_positions=256)
    plain = run(tmp_path, "--model", f"hf:{config}", "--batch", 4, "--seq", 128, "--steps", 1,
                out="plain.jsonl")
    ckpt = run(tmp_path, "--model", f"hf:{config}", "--batch", 4, "--seq", 128, "--steps", 1,
               "--checkpointing", out="ckpt.jsonl")

    def activations(s):
        return sum(a["bytes"] for a in s.allocated(1, "forward", "activation"))
    assert activations(ckpt) < activations(plain) / 2
    # recomputation happens during backward, inside the blocks' forward
    recomputed = [a for a in ckpt.allocated(1, "backward") if a["op"] == "aten::native_layer_norm"]
    assert recomputed and all(a["module"].startswith("transformer.h.") for a in recomputed)


def test_lora(tmp_path):
    pytest.importorskip("transformers")
    pytest.importorskip("peft")
    config = hf_config(tmp_path, "llama.json", model_type="llama",
                       architectures=["LlamaForCausalLM"], hidden_size=256,
                       intermediate_size=512, num_hidden_layers=2, num_attention_heads=4,
                       num_key_value_heads=2, vocab_size=1000)
    s = run(tmp_path, "--model", f"hf:{config}", "--batch", 2, "--seq", 64, "--lora", 8,
            "--amp", "bf16", "--steps", 2)
    # q_proj 256->256: A 8x256 + B 256x8; v_proj 256->128: A 8x256 + B 128x8; two layers
    assert s.header["parameters"]["trainable"] == 2 * (4096 + 3072)
    assert s.header["model_class"] == "LlamaForCausalLM"
    grads = s.allocated(1, category="gradient")  # set-to-none: each step allocates them anew
    assert len(grads) == 8 and all(".lora_" in a["name"] for a in grads)
    state = s.allocated(category="optimizer_state")
    assert len(state) == 16 and all(".lora_" in a["name"] for a in state)
    assert not [a for a in s.allocated() if a["op"] == "aten::native_dropout"]
    # --lora-dropout P: peft's lora_dropout on each adapter's input, its output and mask kept
    # (2 layers x 2 adapters x 2 per step)
    s = run(tmp_path, "--model", f"hf:{config}", "--batch", 2, "--seq", 64, "--lora", 8,
            "--lora-dropout", 0.05, "--amp", "bf16", "--steps", 1)
    assert "lora_dropout=0.05" in s.notes(), s.notes()
    dropout = [a["bytes"] for a in s.allocated(1) if a["op"] == "aten::native_dropout"]
    assert sorted(dropout) == [2 * 64 * 256] * 4 + [2 * 64 * 256 * 4] * 4, dropout


def test_llama_7b_scale(tmp_path):
    """A 7B-class config traces without real memory, quickly, in a process of its own."""
    pytest.importorskip("transformers")
    config = hf_config(tmp_path, "llama7b.json", model_type="llama",
                       architectures=["LlamaForCausalLM"], hidden_size=4096,
                       intermediate_size=11008, num_hidden_layers=32, num_attention_heads=32,
                       num_key_value_heads=8, vocab_size=32000, max_position_embeddings=4096)
    out = tmp_path / "llama7b.jsonl"
    env = dict(os.environ, PYTHONPATH=str(REPO / "python"))
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "vramscope.tracer", "--model", f"hf:{config}",
                           "--batch", "1", "--seq", "128", "--amp", "bf16", "--steps", "1",
                           "-o", str(out)], env=env, capture_output=True, text=True, timeout=300)
    elapsed = time.monotonic() - started
    assert proc.returncode == 0, proc.stderr
    peak_rss_kib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    assert peak_rss_kib < 4 * 1024 * 1024, f"peak RSS {peak_rss_kib} KiB"
    assert elapsed < 60, f"{elapsed:.1f} s"
    s = Stream(out)
    check_invariants(s)
    # embedding + untied head 2 x 32000 x 4096; per layer q, o 4096^2, k, v 4096 x 1024,
    # gate/up/down 3 x 4096 x 11008, 2 norms; final norm
    per_layer = 2 * 4096 * 4096 + 2 * 4096 * 1024 + 3 * 4096 * 11008 + 2 * 4096
    total = 2 * 32000 * 4096 + 32 * per_layer + 4096
    assert s.header["parameters"]["total"] == total == 5_933_109_248
    assert sum(a["bytes"] for a in s.allocated(0, "setup", "weight")) >= 4 * total


# -------------------------------------------------------------------------------------- errors


def test_error_missing_file(tmp_path, capsys):
    line = fails(tmp_path, capsys, "--model", tmp_path / "nope.py:build")
    assert "does not exist" in line


def test_error_function_not_found(tmp_path, capsys):
    model = write(tmp_path, "dense.py", DENSE_MODELS)
    assert "function 'nothere' not found" in fails(tmp_path, capsys, "--model",
                                                   f"{model}:nothere")


def test_error_no_inputs_function(tmp_path, capsys):
    model = write(tmp_path, "bare.py", "import torch.nn as nn\ndef build():\n"
                                       "    return nn.Linear(4, 4)\n")
    assert "vramscope_inputs" in fails(tmp_path, capsys, "--model", f"{model}:build")


def test_error_model_construction(tmp_path, capsys):
    model = write(tmp_path, "broken.py", DENSE_MODELS + "\ndef broken():\n"
                                                          "    raise ValueError('no config')\n")
    line = fails(tmp_path, capsys, "--model", f"{model}:broken")
    assert "building the model failed" in line and "no config" in line


def test_error_data_dependent_forward(tmp_path, capsys):
    model = write(tmp_path, "dynamic.py", DENSE_MODELS + '''
class Dynamic(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(1024, 1024)

    def forward(self, x):
        h = self.lin(x)
        if h.mean().item() > 0:   # a value of an activation: fake tensors have none
            h = h * 2
        return h

def dynamic():
    return Dynamic()
''')
    line = fails(tmp_path, capsys, "--model", f"{model}:dynamic")
    assert "aten::_local_scalar_dense" in line and "shape-static" in line
    assert "step 1 forward" in line


def test_error_hf_config(tmp_path, capsys):
    pytest.importorskip("transformers")
    assert "does not exist" in fails(tmp_path, capsys, "--model", "hf:/no/such/config.json")
    config = hf_config(tmp_path, "bad.json", n_layer=2)
    assert "model_type" in fails(tmp_path, capsys, "--model", f"hf:{config}")


def test_error_bad_arguments(tmp_path, capsys):
    model = write(tmp_path, "dense.py", DENSE_MODELS)
    assert "--batch must be at least 1" in fails(tmp_path, capsys, "--model", f"{model}:linear",
                                                 "--batch", 0)
    assert "bad arguments" in fails(tmp_path, capsys, "--model", f"{model}:linear",
                                    "--optimizer", "lion")
    assert "matches no parameter" in fails(tmp_path, capsys, "--model", f"{model}:linear",
                                           "--freeze", "encoder.*")


def test_error_output_directory(tmp_path, capsys):
    model = write(tmp_path, "dense.py", DENSE_MODELS)
    capsys.readouterr()
    assert tracer.main(["--model", f"{model}:linear", "-o", str(tmp_path / "no" / "t.jsonl")]) == 1
    assert "output directory" in capsys.readouterr().err


def test_error_missing_packages(tmp_path, capsys, monkeypatch):
    config = hf_config(tmp_path, "gpt2.json", model_type="gpt2")
    monkeypatch.setitem(sys.modules, "transformers", None)  # import transformers -> ImportError
    assert "pip install transformers" in fails(tmp_path, capsys, "--model", f"hf:{config}")
    monkeypatch.undo()
    model = write(tmp_path, "dense.py", DENSE_MODELS)
    monkeypatch.setitem(sys.modules, "peft", None)
    assert "pip install peft" in fails(tmp_path, capsys, "--model", f"{model}:linear",
                                       "--lora", 8)


def test_error_keeps_previous_output(tmp_path, capsys):
    model = write(tmp_path, "dense.py", DENSE_MODELS)
    out = tmp_path / "keep.jsonl"
    out.write_text("previous\n")
    assert tracer.main(["--model", f"{model}:nothere", "-o", str(out)]) == 1
    assert out.read_text() == "previous\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dense.py", "keep.jsonl"]


def test_error_without_torch(tmp_path):
    """The tracer's own interpreter without torch: one line that says how to install it."""
    candidates = [shutil.which("python3"), "/usr/bin/python3"]
    python = next((p for p in candidates if p and subprocess.run(
        [p, "-c", "import torch"], capture_output=True).returncode != 0), None)
    if python is None:
        pytest.skip("every python here has torch")
    env = dict(os.environ, PYTHONPATH=str(REPO / "python"))
    proc = subprocess.run([python, "-m", "vramscope.tracer", "--model", "x.py:f", "-o",
                           str(tmp_path / "t.jsonl")], env=env, capture_output=True, text=True)
    assert proc.returncode == 1
    assert proc.stderr.strip().splitlines() == [proc.stderr.strip()]
    assert "PyTorch is not installed" in proc.stderr and "pip install torch" in proc.stderr
