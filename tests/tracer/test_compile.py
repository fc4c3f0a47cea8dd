"""The tracer's --compile and --cuda-graphs: the saved-for-backward set of a compiled step is
what AOTAutograd's partitioner keeps (obtained here independently, by compiling the same model
on real CPU tensors with a backend that records the partitioned backward graph's inputs), the
activations differ from eager's where the partitioner recomputes, CUDA graph allocations are
in a pool, graph breaks are handled, and `vramscope predict --compile` runs end to end."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_tracer import Stream, check_invariants, fails  # noqa: E402

from vramscope import tracer  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
MODELS = Path(__file__).resolve().parent / "compile_models.py"
BATCH = 4


def trace(tmp_path: Path, model: str, *args, out: str = "trace.jsonl") -> Stream:
    path = tmp_path / out
    inputs = ["--inputs", "gpt_inputs"] if model == "gpt_block" else []
    argv = ["--model", f"{MODELS}:{model}", "--batch", str(BATCH), "--steps", "2",
            "--optimizer", "sgd", *inputs, *args, "-o", str(path)]
    assert tracer.main(argv) == 0
    stream = Stream(path)
    check_invariants(stream)
    return stream


def partitioner_saved(model: str) -> dict[str, int]:
    """What min_cut_rematerialization_partition (with Inductor's decompositions) keeps for
    backward when the model is compiled on real CPU tensors: the partitioned backward graph's
    inputs other than the incoming gradients (tangents) and the graph's own inputs (primals:
    parameters and the batch). Node name -> bytes."""
    import compile_models
    from functorch.compile import make_boxed_func, min_cut_rematerialization_partition
    from torch._dynamo.backends.common import aot_autograd
    from torch._inductor.decomposition import select_decomp_table

    saved: dict[str, int] = {}

    def forward_compiler(gm, example_inputs):
        return make_boxed_func(gm.forward)

    def backward_compiler(gm, example_inputs):
        for node in gm.graph.nodes:
            if node.op == "placeholder" and not node.name.startswith(("tangents", "primals")):
                val = node.meta["val"]
                saved[node.name] = val.numel() * val.element_size()
        return make_boxed_func(gm.forward)

    backend = aot_autograd(fw_compiler=forward_compiler, bw_compiler=backward_compiler,
                           partition_fn=min_cut_rematerialization_partition,
                           decompositions=select_decomp_table())
    torch._dynamo.reset()
    torch.manual_seed(0)
    module = getattr(compile_models, model)()
    batch = (compile_models.gpt_inputs if model == "gpt_block" else
             compile_models.vramscope_inputs)(BATCH, 0, 0)
    out = torch.compile(module, backend=backend)(batch)
    compile_models.vramscope_loss(out, batch).backward()
    torch._dynamo.reset()
    assert saved, "the backward graph was not compiled"
    return saved


def compiled_activations(s: Stream, step: int = 1) -> dict[str, int]:
    """The step's allocations that the stream marks as saved for backward by a compiled graph:
    FX node name -> bytes."""
    out = {}
    for a in s.allocated(step, "forward", "activation"):
        assert "graph" in a, f"an activation outside the compiled graphs: {a}"
        node = a["name"].rpartition(":")[2]
        assert node not in out
        out[node] = a["bytes"]
    return out


@pytest.mark.parametrize("model", ["mlp", "gpt_block", "chain"])
def test_saved_set_is_the_partitioners(tmp_path, model):
    s = trace(tmp_path, model, "--compile")
    assert s.header["version"] == 2
    assert "captured 1 graph(s) (1 forward, 1 backward)" in s.notes()
    assert "lowering failed" not in s.notes()
    expected = partitioner_saved(model)
    assert compiled_activations(s, 1) == expected
    assert compiled_activations(s, 2) == expected  # the compiled graphs are reused
    # each saved tensor is freed in that step's backward (at its last use there)
    for a in s.allocated(1, "forward", "activation"):
        assert a["freed"] == (1, "backward"), a


def test_mlp_saved_set_by_hand(tmp_path):
    """The partitioner's choice for the MLP, worked out: it keeps the first matmul's output
    (GELU is recomputed from it), LayerNorm's mean and rstd, and LayerNorm's output (the input
    of the second matmul); GELU's output and LayerNorm's normalised input are recomputed."""
    s = trace(tmp_path, "mlp", "--compile")
    b, h = BATCH, 4 * 256
    assert compiled_activations(s) == {"addmm": b * h * 4, "getitem_1": b * 4, "rsqrt": b * 4,
                                       "add_2": b * h * 4}
    # Inductor's lowering fuses the GELU chain and LayerNorm's pointwise tail: in the forward
    # only matmul outputs, the LayerNorm statistics and its output are buffers
    fwd = [(a["node"], a["bytes"]) for a in s.allocated(1, "forward") if "graph" in a]
    assert fwd == [("addmm", b * h * 4), ("var_mean", b * 4), ("var_mean", b * 4),
                   ("rsqrt", b * 4), ("add_2", b * h * 4), ("addmm_1", b * 256 * 4)]


def test_compile_saves_less_than_eager_where_the_partitioner_recomputes(tmp_path):
    eager = trace(tmp_path, "chain", out="eager.jsonl")
    compiled = trace(tmp_path, "chain", "--compile", out="compiled.jsonl")
    b, h = BATCH, 4 * 256
    # eager autograd keeps the input of every op of the chain: up's output (sin's and
    # sigmoid's input), sin's and sigmoid's outputs (the product's inputs), the product (cos's
    # and the square's input) and tanh's output (down's input)
    eager_saved = sorted((a["name"], a["bytes"])
                         for a in eager.allocated(1, "forward", "activation"))
    assert eager_saved == [(f"Chain:aten::{op}", b * h * 4)
                           for op in ("addmm", "mul", "sigmoid", "sin", "tanh")]
    # the partitioner keeps up's output and tanh's output, and recomputes the chain between
    saved = compiled_activations(compiled)
    assert saved == {"addmm": b * h * 4, "tanh": b * h * 4} == partitioner_saved("chain")


def test_cuda_graphs_pool(tmp_path):
    s = trace(tmp_path, "mlp", "--cuda-graphs")
    assert s.header["setup"]["cuda_graphs"] is True and s.header["setup"]["compile"] is True
    assert "--cuda-graphs" in s.notes()
    graph_allocs = [a for a in s.allocs.values() if "graph" in a]
    assert graph_allocs and all(a["pool"] == 1 for a in graph_allocs)
    assert not any("pool" in a for a in s.allocs.values() if "graph" not in a)
    # the batch is copied into the forward graph's static input once, and kept
    statics = [a for a in graph_allocs if "static input" in a["name"]]
    assert [(a["category"], a["step"], a["bytes"], a["freed"]) for a in statics] == [
        ("input", 1, BATCH * 256 * 4, None), ("temporary", 1, BATCH * 256 * 4, None)]
    # the saved set is the same as without CUDA graphs
    assert compiled_activations(s) == compiled_activations(trace(tmp_path, "mlp", "--compile",
                                                                 out="c.jsonl"))


def test_graph_break_is_traced(tmp_path):
    s = trace(tmp_path, "graph_break", "--compile")
    assert "captured 2 graph(s) (2 forward, 2 backward); 1 graph break(s)" in s.notes()
    graphs = {a["graph"] for a in s.allocs.values() if "graph" in a}
    assert graphs == {1, 2, 3, 4}


def test_eager_stream_is_unchanged_by_the_compile_machinery(tmp_path):
    s = trace(tmp_path, "mlp")
    assert s.header["version"] == 1
    assert not any("graph" in a or "pool" in a for a in s.allocs.values())


def test_compile_of_a_missing_model_function_is_one_line(tmp_path, capsys):
    line = fails(tmp_path, capsys, "--model", f"{MODELS}:nothing", "--compile")
    assert "nothing" in line


BIN = Path(os.environ.get("VRAMSCOPE_BIN", str(ROOT / "build" / "vramscope"))).resolve()


def predict(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # the embedded copy only
    return subprocess.run([str(BIN), "predict", *args, "--python", sys.executable], cwd=cwd,
                          env=env, capture_output=True, text=True, timeout=600)


@pytest.mark.skipif(not BIN.exists(), reason=f"no vramscope binary at {BIN}")
def test_predict_compile_end_to_end(tmp_path):
    out = predict("--model", f"{MODELS}:mlp", "--compile", "--batch", "4", "--gpu", "h100-80gb",
                  "--json", "-q", "--emit-stream", str(tmp_path / "s.jsonl"), cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    assert report["predicted"] is True
    assumptions = "\n".join(report["prediction"]["assumptions"])
    assert "--compile: torch.compile" in assumptions and "Inductor's own lowering" in assumptions
    lines = (tmp_path / "s.jsonl").read_text().splitlines()
    activations = sorted(json.loads(l)["name"] for l in lines[1:]
                         if '"activation"' in l and '"alloc"' in l)
    assert activations == sorted(["0:addmm", "2:getitem_1", "2:rsqrt", "2:add_2"] * 3)


@pytest.mark.skipif(not BIN.exists(), reason=f"no vramscope binary at {BIN}")
def test_predict_cuda_graphs_pool_is_held(tmp_path):
    out = predict("--model", f"{MODELS}:mlp", "--cuda-graphs", "--batch", "4", "--gpu",
                  "h100-80gb", "--json", "-q", "--emit-stream", str(tmp_path / "s.jsonl"),
                  cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    assumptions = "\n".join(report["prediction"]["assumptions"])
    assert "CUDA graph pool 1: its" in assumptions
    assert "served from a private pool of the allocator model" in assumptions
    # The pool is the allocator model's private pool (0, 1), held to the end: the dump holds
    # its segments, and what the graphs freed stays reserved there.
    pools = report["devices"][0]["at_dump"]["private_pools"]
    assert pools["pools"] == 1 and pools["segments"] >= 1
    assert pools["reserved_bytes"] > 0
    lines = (tmp_path / "s.jsonl").read_text().splitlines()
    assert json.loads(lines[0])["version"] == 2
    events = [json.loads(l) for l in lines[1:]]
    pooled = [e for e in events if e["ev"] == "alloc" and e.get("pool") == 1]
    assert pooled and all(e["category"] != "weight" for e in pooled)


@pytest.mark.skipif(not BIN.exists(), reason=f"no vramscope binary at {BIN}")
def test_predict_compile_of_a_built_in_family_without_templates_is_refused(tmp_path):
    # Built-in --compile is the LLaMA family's (src/predict/compiled_step.h); --cuda-graphs
    # needs a traced model.
    out = predict("--model", "gpt2", "--compile", cwd=tmp_path)
    assert out.returncode == 2
    lines = [l for l in out.stderr.splitlines() if l.startswith("vramscope: error:")]
    assert len(lines) == 1 and "--compile is predicted for the LLaMA family" in lines[0]
    out = predict("--model", "gpt2", "--cuda-graphs", cwd=tmp_path)
    assert out.returncode == 2
    lines = [l for l in out.stderr.splitlines() if l.startswith("vramscope: error:")]
    assert len(lines) == 1 and "--cuda-graphs runs your model" in lines[0]


SMALL_GPT2 = {"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"], "n_layer": 2,
              "n_embd": 128, "n_head": 4, "vocab_size": 1000, "n_positions": 128}


def test_transformers_model_compiles(tmp_path):
    pytest.importorskip("transformers")
    config = tmp_path / "config.json"
    config.write_text(json.dumps(SMALL_GPT2))
    path = tmp_path / "gpt2.jsonl"
    assert tracer.main(["--model", f"hf:{config}", "--batch", "2", "--seq", "64", "--amp", "bf16",
                        "--compile", "--steps", "2", "-o", str(path)]) == 0
    s = Stream(path)
    check_invariants(s)
    # the model's forward is compiled (here in two graphs: transformers logs inside forward,
    # which Dynamo does not trace); the attention kernels are the fused ones an sm90 GPU runs
    assert "graph break(s)" in s.notes() and "efficient x" in s.notes()
    assert "post-grad passes failed" not in s.notes() and "lowering failed" not in s.notes()
    saved = s.allocated(1, "forward", "activation")
    assert saved and all("graph" in a for a in saved)
    assert any(a["name"].startswith("transformer.h.0.attn") for a in saved)


def test_compile_with_checkpointing_and_dropout_is_one_line(tmp_path):
    """Run as `vramscope predict` runs the tracer: in its own process (a compilation that fails
    inside AOTAutograd leaves references behind in the process, which would change a later
    in-process trace's buffer reuse)."""
    pytest.importorskip("transformers")
    config = tmp_path / "config.json"
    config.write_text(json.dumps(SMALL_GPT2))
    out = tmp_path / "out" / "trace.jsonl"
    out.parent.mkdir()
    env = dict(os.environ, PYTHONPATH=str(ROOT / "python"))
    proc = subprocess.run([sys.executable, "-m", "vramscope.tracer", "--model", f"hf:{config}",
                           "--batch", "2", "--seq", "64", "--compile", "--checkpointing",
                           "--steps", "1", "-o", str(out)], env=env, capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 1
    lines = [l for l in proc.stderr.splitlines() if l.startswith("vramscope tracer: ")]
    assert len(lines) == 1, proc.stderr
    assert "needs the CUDA generator's state" in lines[0]
    assert "without --checkpointing" in lines[0]
    assert list(out.parent.iterdir()) == []
