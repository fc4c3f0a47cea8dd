"""End-to-end tests of the menu of memory-saving techniques in `vramscope predict`: each flag
lowers the predicted peak of a step where it should, the summary and the JSON say what each one
saves (against the same set-up without it) and what host memory it adds, and flags that cannot go
together, or with a model or layout they do not apply to, fail in one line with exit 2.
"""

from __future__ import annotations

import sqlite3

import pytest

from conftest import assert_failure, predict_json, run_binary
BASE = ["--model", "gpt2", "--batch", "4", "--seq", "512", "--dtype", "bf16", "--steps", "2"]


def peak(document: dict) -> int:
    return document["devices"][0]["peak_reserved"]["bytes"]


@pytest.fixture(scope="module")
def run_module(vramscope_bin, tmp_path_factory):
    """run(*args, cwd=...) for the module's tests (the baseline is predicted once)."""
    scratch = tmp_path_factory.mktemp("techniques")

    def _run(*args, cwd=None, timeout: float = 60):
        return run_binary(*args, cwd=cwd or scratch, timeout=timeout)

    return _run


@pytest.fixture(scope="module")
def baseline(run_module):
    return predict_json(run_module, *BASE)


@pytest.mark.parametrize("flags, fact", [
    (["--loss-chunks", "8"], "chunked cross-entropy (8 chunks)"),
    (["--fused-linear-ce"], "fused linear cross-entropy"),
    (["--checkpointing-every", "2"], "activation checkpointing (every 2 blocks)"),
    (["--checkpointing-ops"], "op-level selective checkpointing"),
    (["--optimizer", "adamw8bit"], "8-bit AdamW states (bitsandbytes)"),
    (["--optimizer", "adamw4bit"], "4-bit AdamW states (torchao)"),
    (["--optimizer", "adamw-fp8"], "FP8 AdamW states (torchao)"),
    (["--offload-optimizer"], "optimizer offloaded to the host"),
    (["--offload-activations"], "activations offloaded to the host"),
])
def test_each_technique_saves_and_says_how_much(run_module, baseline, flags, fact):
    doc = predict_json(run_module, *BASE, *flags)
    assert peak(doc) < peak(baseline)
    text = doc["prediction"]["facts"][fact]
    assert text.startswith("saves "), text


def test_qlora_against_lora(run_module):
    """--qlora is LoRA over NF4 base weights: its effect line is against plain LoRA, and the
    weights shrink by about 4x for the blocks' linears (gpt2: 84,934,656 of its 124,439,808
    parameters are in the blocks' Conv1D linears)."""
    lora = predict_json(run_module, *BASE, "--lora", "16")
    qlora = predict_json(run_module, *BASE, "--qlora", "16")
    assert peak(qlora) < peak(lora)
    assert qlora["prediction"]["facts"]["QLoRA's NF4 base weights (against LoRA)"].startswith(
        "saves ")
    assert "QLoRA r=16 (NF4 base weights)" in qlora["prediction"]["setup"]
    # Two bytes of bf16 per block weight become half a byte of NF4 codes.
    saved = lora["prediction"]["parameter_bytes"] - qlora["prediction"]["parameter_bytes"]
    assert saved == 84_934_656 * 3 // 2


def test_offloading_reports_host_memory(run_module):
    doc = predict_json(run_module, *BASE, "--offload-optimizer")
    # gpt2: 124,439,808 bf16 parameters; on the host an fp32 copy, its gradient and two states.
    assert doc["prediction"]["host_bytes"] == 124_439_808 * 4 * 4
    assert "host memory" in doc["prediction"]["facts"]
    paged = predict_json(run_module, *BASE, "--optimizer", "paged-adamw8bit")
    assert 0 < paged["prediction"]["paged_bytes"] == paged["prediction"]["host_bytes"]


def test_summary_names_each_effect(run_module):
    rc, out, err = run_module("predict", *BASE, "--loss-chunks", "8", "--optimizer-in-backward")
    assert rc == 0, err
    assert "chunked cross-entropy (8 chunks)" in out
    assert "optimizer step in backward" in out


@pytest.mark.parametrize("args, phrases", [
    (["--loss-chunks", "8", "--fused-linear-ce"], ["choose one"]),
    (["--optimizer-in-backward", "--grad-accum", "2"], ["--grad-accum"]),
    (["--offload-gradients"], ["--offload-optimizer"]),
    (["--offload-optimizer", "--optimizer", "adamw8bit"], ["choose one"]),
    (["--optimizer", "adamw8bit", "--master-weights"], ["--master-weights"]),
    (["--optimizer", "adamw2bit"], ["adamw8bit", "adamw4bit"]),
    (["--loss-chunks", "1"], ["--loss-chunks"]),
    (["--checkpointing-ops", "--checkpointing-every", "2"], ["--checkpointing-every",
                                                             "choose one"]),
    (["--checkpointing-ops", "--checkpointing-offload"], ["--checkpointing-offload"]),
    (["--qlora", "16", "--lora", "8"], ["--lora", "--qlora", "choose one"]),
    (["--qlora", "16", "--zero", "3", "--world-size", "2"], ["--qlora", "one GPU"]),
])
def test_conflicting_flags_fail_in_one_line(run_module, tmp_path, args, phrases):
    rc, out, err = run_module("predict", *BASE, *args, cwd=tmp_path)
    assert_failure(rc, out, err, 2, phrases, tmp_path)


def test_loss_flags_need_a_causal_lm(run_module, tmp_path):
    rc, out, err = run_module("predict", "--model", "resnet18", "--loss-chunks", "4", cwd=tmp_path)
    assert_failure(rc, out, err, 2, ["--loss-chunks", "causal language model"], tmp_path)


@pytest.mark.parametrize("flag", ["--checkpointing", "--checkpointing-ops"])
def test_checkpointing_needs_transformer_blocks(run_module, tmp_path, flag):
    rc, out, err = run_module("predict", "--model", "resnet18", flag, cwd=tmp_path)
    assert_failure(rc, out, err, 2, ["transformer block", "resnet"], tmp_path)


def test_techniques_are_refused_for_parallel_layouts(run_module, tmp_path):
    rc, out, err = run_module("predict", "--model", "llama3-8b", "--tp", "2",
                              "--fused-linear-ce", cwd=tmp_path)
    assert_failure(rc, out, err, 2, ["--fused-linear-ce", "per-rank estimate"], tmp_path)


@pytest.mark.parametrize("optimizer", ["adamw8bit", "adamw8bit-ao", "adamw4bit", "adamw-fp8"])
def test_quantised_states_per_rank_equal_the_one_gpu_prediction(run_module, tmp_path, optimizer):
    """The per-rank estimate (--dp 1: a layout of one rank) counts the quantised states tensor by
    tensor as the step simulator does: the same requested bytes, GPT-2's small biases and norms
    (fp32 or zeros_like states) included; the paged optimizer's codes live outside the GPU's
    allocator, which the per-rank estimate does not count, so it is refused there."""

    flags = [*BASE, "--optimizer", optimizer]
    rc, _, err = run_module("predict", *flags, "-o", tmp_path / "one.sqlite", "-q")
    assert rc == 0, err
    with sqlite3.connect(tmp_path / "one.sqlite") as c:
        (one_gpu,) = c.execute("SELECT SUM(requested_bytes) FROM vramscope_allocations "
                               "WHERE category = 'optimizer_state' AND alive_at_end = 1").fetchone()
    per_rank = predict_json(run_module, *flags, "--dp", "1")["parallel"]["roles"]
    assert [r["optimizer_bytes"] for r in per_rank] == [one_gpu]
    native = predict_json(run_module, *BASE, "--optimizer", "adamw", "--dp", "1")
    assert one_gpu < native["parallel"]["roles"][0]["optimizer_bytes"] * 0.6


def test_checkpointing_every_kth_layer_per_rank(run_module, tmp_path):
    """Under a layout each layer's saved set goes by its index: GPT-2's 12 layers with every 2nd
    checkpointed (1, 3, ..., 11) hold half of what none holds and half of what full
    checkpointing does, on the one rank of --dp 1 and on each stage of --pp 2 (6 layers each,
    3 of them checkpointed)."""
    def activations(*flags):
        roles = predict_json(run_module, *BASE, *flags)["parallel"]["roles"]
        return [r["activation_bytes_per_micro_batch"] for r in roles]

    for layout in (["--dp", "1"], ["--pp", "2"]):
        none = activations(*layout)
        full = activations(*layout, "--checkpointing")
        every2 = activations(*layout, "--checkpointing-every", "2")
        assert all(f < n for f, n in zip(full, none))
        assert all(abs(e - (n + f) / 2) <= 1 for e, n, f in zip(every2, none, full)), \
            (layout, none, full, every2)
    # A technique the per-rank estimate does not model is still refused beside one it does.
    rc, out, err = run_module("predict", "--model", "llama3-8b", "--tp", "2",
                              "--checkpointing-every", "2", "--offload-activations",
                              cwd=tmp_path)
    assert_failure(rc, out, err, 2, ["--offload-activations", "per-rank estimate"], tmp_path)


def test_op_level_checkpointing_per_rank_keeps_what_the_step_keeps(run_module, tmp_path):
    """--checkpointing-ops under a layout keeps, per layer, what the single-GPU step simulator
    keeps for the same model: its layer inputs and the outputs the policy saves (every other
    aten::mm, the attention kernel's outputs), to the byte. Qwen2-0.5B: q, k and v have biases
    (addmm, never kept), so o_proj's and up_proj's outputs are the kept mm outputs."""
    setup = ["--model", "qwen2-0.5b", "--batch", "2", "--seq", "256", "--dtype", "bf16",
             "--checkpointing-ops"]
    rc, _, err = run_module("predict", *setup, "--steps", "1", "-o", "ops.sqlite",
                            cwd=tmp_path)
    assert rc == 0, err
    with sqlite3.connect(tmp_path / "ops.sqlite") as c:
        kept = dict(c.execute(
            "SELECT operation, SUM(requested_bytes) FROM vramscope_allocations "
            "WHERE category = 'activation' AND phase = 'forward' "
            "AND operation IN ('aten::mm', 'aten::_scaled_dot_product_attention') "
            "GROUP BY operation").fetchall())
    layers, hidden, tokens = 24, 896, 2 * 256
    inputs = layers * tokens * hidden * 2
    per_rank = predict_json(run_module, *setup, "--dp", "1")["parallel"]["roles"]
    assert per_rank[0]["activation_bytes_per_micro_batch"] == \
        inputs + kept["aten::mm"] + kept["aten::_scaled_dot_product_attention"]
    # o_proj (896 wide) and up_proj (4,864) per layer, in bf16.
    assert kept["aten::mm"] == layers * tokens * (896 + 4864) * 2
    # Megatron's TP has no op-level policy, nor does a mixture of experts' grouped GEMM.
    for flags, words in ((["--model", "qwen2-7b", "--tp", "2"], ["--tp-impl torch"]),
                         (["--model", "mixtral-8x7b"], ["mixture-of-experts"])):
        empty = tmp_path / "refused"
        empty.mkdir(exist_ok=True)
        rc, out, err = run_module("predict", *flags, "--checkpointing-ops", cwd=empty)
        assert_failure(rc, out, err, 2, ["--checkpointing-ops", *words], empty)


def test_the_optimizer_on_the_host_per_rank(run_module, tmp_path):
    """--offload-optimizer under a layout (DeepSpeed's offload_optimizer, Megatron-Core's
    --optimizer-cpu-offload): each rank holds no optimizer state on the GPU and its optimizer
    shard on the host, as much as the step simulator counts for one GPU (--dp 1), and 1/4 of it
    under ZeRO-1 over 4 ranks; the table gets a host column."""
    one_gpu = predict_json(run_module, *BASE, "--offload-optimizer")["prediction"]["host_bytes"]
    for flags, share in ((["--dp", "1"], 1), (["--dp", "4", "--zero", "1"], 4)):
        roles = predict_json(run_module, *BASE, "--offload-optimizer", *flags)["parallel"]["roles"]
        assert [(r["optimizer_bytes"], r["host_bytes"]) for r in roles] == \
            [(0, one_gpu // share)], flags
        on_gpu = predict_json(run_module, *BASE, *flags)["parallel"]["roles"]
        assert on_gpu[0]["optimizer_bytes"] > 0 and on_gpu[0]["host_bytes"] == 0
        assert roles[0]["peak_allocated_bytes"] < on_gpu[0]["peak_allocated_bytes"]
    rc, out, err = run_module("predict", *BASE, "--offload-optimizer", "--dp", "2", cwd=tmp_path)
    assert rc == 0, err
    assert " host" in out and "pinned host memory per rank" in out
    # Gradients offloaded as they are made are still the step simulator's alone.
    rc, out, err = run_module("predict", *BASE, "--offload-optimizer", "--offload-gradients",
                              "--dp", "2", cwd=tmp_path)
    assert_failure(rc, out, err, 2, ["--offload-gradients", "per-rank estimate"], tmp_path)


@pytest.mark.parametrize("flags, words", [
    (["--model", "llama3-8b", "--dp", "2", "--lora", "8"], ["--lora", "freezes weights"]),
    (["--model", "mixtral-8x7b", "--freeze", "model.embed_tokens.*"], ["--freeze"]),
    (["--model", "mixtral-8x7b", "--cuda-graphs"], ["--cuda-graphs", "predicted eager"]),
])
def test_what_the_per_rank_estimate_would_ignore_is_refused(run_module, tmp_path, flags, words):
    """The per-rank terms count every weight as trained and every family eager: LoRA, --freeze
    and --compile used to be accepted there and change nothing (the setup line even said
    "LoRA r=8"); they are refused in one line."""
    rc, out, err = run_module("predict", *flags, cwd=tmp_path)
    assert_failure(rc, out, err, 2, words, tmp_path)


def test_the_paged_optimizer_is_refused_for_parallel_layouts(run_module, tmp_path):
    rc, out, err = run_module("predict", "--model", "llama3-8b", "--tp", "2",
                              "--optimizer", "paged-adamw8bit", cwd=tmp_path)
    assert_failure(rc, out, err, 2, ["--optimizer paged-adamw8bit", "per-rank estimate"],
                   tmp_path)


def test_fp8_says_what_torchaos_casts_cost(run_module):
    """--fp8 on a LLaMA-family preset: the summary names torchao's float8 linears and what they
    change against the same set-up in bf16; under bf16 autocast the blocks' weights are no
    longer copied to bf16 (Float8Linear casts the fp32 weight itself), which saves memory."""
    setup = ["--model", "qwen2-0.5b", "--batch", "2", "--seq", "512", "--steps", "1"]
    amp = predict_json(run_module, *setup, "--dtype", "bf16-amp")
    fp8 = predict_json(run_module, *setup, "--dtype", "bf16-amp", "--fp8")
    fact = fp8["prediction"]["facts"]["float8 linears (torchao)"]
    assert fact.startswith(("saves ", "costs ")), fact
    assert "float8 linears" in fp8["prediction"]["setup"], fp8["prediction"]
    assert peak(fp8) != peak(amp)


@pytest.mark.parametrize("args, phrases", [
    (["--model", "gpt2", "--dtype", "bf16"], ["--fp8", "Conv1D"]),
    (["--model", "qwen2-0.5b"], ["--fp8", "--dtype bf16 or bf16-amp", "fp32"]),
    (["--model", "qwen2-0.5b", "--dtype", "bf16", "--lora", "8"], ["--fp8", "--lora"]),
    (["--model", "llama3-8b", "--dtype", "bf16", "--tp", "2"], ["--fp8", "parallel layouts"]),
])
def test_fp8_refusals_say_why(run_module, tmp_path, args, phrases):
    rc, out, err = run_module("predict", *args, "--fp8", cwd=tmp_path)
    assert_failure(rc, out, err, 2, phrases, tmp_path)


def test_pack_weighs_packing_against_padding_the_same_samples(run_module):
    """--pack on a LLaMA-family preset: one row of the samples' sum, the summary's set-up names
    the samples, and the effect line compares the packed row with the same samples padded to
    the longest (batch 3 x 2048 here), in the direction the two predictions' peaks differ."""
    setup = ["--model", "qwen2-0.5b", "--dtype", "bf16", "--steps", "1"]
    packed = predict_json(run_module, *setup, "--pack", "1024,512,2048")
    padded = predict_json(run_module, *setup, "--batch", "3", "--seq", "2048")
    assert "batch 1, seq 3584 (packed: 1024+512+2048 tokens)" in packed["prediction"]["setup"]
    fact = packed["prediction"]["facts"][
        "packing 3 samples in one row (against padding them to 2048)"]
    # Qwen2's 151,936-token head makes fp32 logits of 0.6 MB a token: 3,584 packed tokens
    # against 6,144 padded ones outweigh the 24 layers' 3584 x 3584 bf16 biases.
    assert peak(padded) > peak(packed)
    assert fact.startswith("saves "), fact
    # The flag repeated is the same as one comma-separated list (the Python API repeats it).
    repeated = predict_json(run_module, *setup, "--pack", "1024", "--pack", "512",
                            "--pack", "2048")
    assert peak(repeated) == peak(packed)


@pytest.mark.parametrize("args, phrases", [
    (["--model", "gpt2"], ["--pack", "LLaMA family", "gpt2"]),
    (["--model", "qwen2-0.5b", "--batch", "2"], ["--pack", "drop --batch 2"]),
    (["--model", "qwen2-0.5b", "--seq", "512"], ["--pack", "drop --seq"]),
    (["--model", "llama3-8b", "--tp", "2"], ["--pack", "per-rank estimate"]),
    (["--model", "qwen2-0.5b", "--fit", "h100-80gb"], ["--fit", "--pack", "fixes"]),
])
def test_pack_refusals_say_why(run_module, tmp_path, args, phrases):
    rc, out, err = run_module("predict", *args, "--pack", "512,256", cwd=tmp_path)
    assert_failure(rc, out, err, 2, phrases, tmp_path)


@pytest.mark.parametrize("value", ["0,512", "512,x", "", "-3"])
def test_pack_takes_positive_lengths_only(run_module, tmp_path, value):
    rc, out, err = run_module("predict", "--model", "qwen2-0.5b", "--pack", value, cwd=tmp_path)
    assert_failure(rc, out, err, 2, ["--pack"], tmp_path)
