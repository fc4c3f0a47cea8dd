"""`vramscope diff A B` (docs/guide/diff.md): two reports compared at their peaks, memory that
grows step over step, and the --fail-if gates for CI, on real goldens and on a synthetic leak."""

from __future__ import annotations

import json

import pytest

from conftest import (AUTOGRAD_PY, MODULE_PY, REPO, SnapshotBuilder, frame,
                      unpack_two_rank_capture, write_pickle)

GOLDENS = REPO / "goldens" / "h100"
FP32 = GOLDENS / "gpt_adamw_fp32.pickle.gz"
BF16 = GOLDENS / "gpt_adamw_bf16.pickle.gz"
OPTIM = "/usr/lib/python3/site-packages/torch/optim/adamw.py"
USER = "/home/user/proj/train.py"


def diff_json(run, *args):
    rc, out, err = run("diff", *map(str, args), "--json")
    assert rc == 0, err
    return json.loads(out)


def gpt_parameter_bytes() -> int:
    """The GPT of examples/training/models.py as the goldens ran it (vocab 8192, max_len 256,
    hidden 256, 4 blocks, MLP 1024, the head tied to the token embedding), in fp32: every
    parameter is its own allocation, and every size below is a multiple of 512 B, so the blocks
    are exactly the tensors."""
    vocab, max_len, hidden, layers, mlp = 8192, 256, 256, 4, 1024
    layer_norm = 2 * hidden
    block = (layer_norm + (3 * hidden * hidden + 3 * hidden) + (hidden * hidden + hidden)
             + layer_norm + (hidden * mlp + mlp) + (mlp * hidden + hidden))
    elements = vocab * hidden + max_len * hidden + layers * block + layer_norm
    return 4 * elements


def test_fp32_against_bf16_autocast_to_the_byte(run):
    """bf16 autocast keeps fp32 weights and AdamW's fp32 states: the weights (21,288,960 B, worked
    out from the model's shapes) and the two states per weight are the same on both sides, to the
    byte; the peaks are PyTorch's own max_memory_allocated/reserved of each run."""
    meta = json.loads((GOLDENS / "metadata.json").read_text())["cases"]
    d = diff_json(run, FP32, BF16)
    [device] = d["devices"]
    categories = {c["what"]: c for c in device["categories_at_peak"]}
    weights = gpt_parameter_bytes()
    assert weights == 21_288_960
    assert categories["weight"] == {"what": "weight", "a_bytes": weights, "b_bytes": weights,
                                    "delta_bytes": 0}
    assert categories["optimizer_state"]["a_bytes"] == 2 * weights
    assert categories["optimizer_state"]["delta_bytes"] == 0
    assert device["peak_allocated"]["a_bytes"] == meta["gpt_adamw_fp32"]["max_memory_allocated"]
    assert device["peak_allocated"]["b_bytes"] == meta["gpt_adamw_bf16"]["max_memory_allocated"]
    assert device["peak_reserved"]["b_bytes"] == meta["gpt_adamw_bf16"]["max_memory_reserved"]
    # What autocast changed: the categories' deltas add up to the change of the peak.
    assert sum(c["delta_bytes"] for c in device["categories_at_peak"]) == \
        device["peak_allocated"]["delta_bytes"]
    assert [s["what"] for s in device["step_peaks"]] == ["step 1", "step 2", "step 3"]
    assert device["growth_a"] is None and device["growth_b"] is None
    assert d["failed"] is False and d["gates"] == []


def leaking_snapshot(k: int, size: int, steps: int = 4) -> dict:
    """A training loop of `steps` steps (forward, backward, AdamW) that keeps `k` tensors of
    `size` bytes a step alive for good, as `history.append(loss)` without .item() does."""
    b = SnapshotBuilder()
    b.alloc(1 << 20, [frame(MODULE_PY, 1143, "_apply"), frame(USER, 5, "<module>")])
    for _ in range(steps):
        forward = [frame(MODULE_PY, 1527, "_call_impl"), frame(USER, 20, "<module>")]
        backward = [frame(AUTOGRAD_PY, 266, "backward"), frame(USER, 21, "<module>")]
        activation = b.alloc(4 << 20, forward)
        for _ in range(k):
            b.alloc(size, [frame(USER, 30, "<module>")])
        grad = b.alloc(1 << 20, backward)
        b.free(activation, backward)
        step = [frame(OPTIM, 80, "step"), frame(USER, 22, "<module>")]
        scratch = b.alloc(2 << 20, step)
        b.free(scratch, step)
        b.free(grad, [frame(USER, 23, "<module>")])
    return b.build()


def test_a_synthetic_leak_is_growth_per_step_with_its_owner(run, tmp_path):
    k, size = 3, 5 * 512
    clean = write_pickle(tmp_path / "clean.pickle", leaking_snapshot(0, size))
    leaky = write_pickle(tmp_path / "leaky.pickle", leaking_snapshot(k, size))
    d = diff_json(run, clean, leaky)
    [device] = d["devices"]
    assert device["growth_a"] is None
    growth = device["growth_b"]
    assert growth is not None, device
    assert growth["bytes_per_step"] == k * size
    assert (growth["first_step"], growth["last_step"]) == (2, 4)
    assert growth["owners"][0]["bytes_per_step"] == k * size
    assert "train.py:30" in growth["owners"][0]["owner"], growth["owners"]
    assert len(growth["owners"]) == 1  # nothing else grows
    rc, out, err = run("diff", str(clean), str(leaky), "--fail-if", "growth_per_step > 0")
    assert rc == 1 and f"B {k * size / 1024:.2f} KiB" in err, (out, err)
    assert "grows 7.50 KiB per step (live as steps 2 to 4 begin)" in out


@pytest.mark.parametrize("gate, crossed", [
    # B (bf16) 424,896,000 B against A (fp32) 539,186,176 B: -21.2%.
    ("peak_allocated > -25%", True),
    ("peak_allocated > -20%", False),
    ("peak_allocated < -20%", True),
    # B's peak reserved is 452,984,832 B (432 MiB) exactly.
    ("peak_reserved > 432MiB", False),
    ("peak_reserved >= 432MiB", True),
    ("peak_reserved > 40GiB", False),
    # The temporaries at the peak fall by exactly 96 MiB.
    ("temporary < -96MiB", False),
    ("temporary <= -96MiB", True),
    ("weight > +0%", False),
    ("weight >= +0%", True),
])
def test_each_gate_fails_exactly_when_crossed(run, gate, crossed):
    rc, out, err = run("diff", str(FP32), str(BF16), "--fail-if", gate)
    assert rc == (1 if crossed else 0), (gate, out, err)
    assert (f"FAILED {gate}:" if crossed else f"passed {gate}:") in out
    if crossed:
        assert err.count("\n") == 1 and err.startswith("vramscope: error: 1 of 1 --fail-if")


def test_gates_are_joined_by_or(run):
    rc, out, err = run("diff", str(FP32), str(BF16), "--fail-if", "peak_reserved > 40GiB",
                       "--fail-if", "peak_allocated < -20%")
    assert rc == 1 and "1 of 2 --fail-if checks crossed" in err, err


@pytest.mark.parametrize("gate, why", [
    ("peak_vram > +10%", "unknown metric 'peak_vram'"),
    ("peak_allocated +10%", "no comparison"),
    ("peak_allocated > 10%", "a percentage needs a sign"),
    ("peak_allocated > lots", "'lots' is not a size"),
    ("> 1GiB", "no metric"),
])
def test_a_malformed_gate_is_a_usage_error_before_reading(run, tmp_path, gate, why):
    rc, out, err = run("diff", str(tmp_path / "missing-a"), str(tmp_path / "missing-b"),
                       "--fail-if", gate)
    assert rc == 2, (out, err)
    assert err.count("\n") == 1 and why in err and "METRIC OP LIMIT" in err, err
    assert out == ""


def test_a_report_database_against_its_own_snapshot_is_no_change(run, tmp_path):
    db = tmp_path / "fp32.sqlite"
    rc, _, err = run("report", str(FP32), "-o", str(db), "-q")
    assert rc == 0, err
    d = diff_json(run, db, FP32)
    [device] = d["devices"]
    assert device["peak_allocated"]["delta_bytes"] == 0
    assert device["owners_at_peak"] == [] and device["sites_at_peak"] == []
    assert all(c["delta_bytes"] == 0 for c in device["categories_at_peak"])


def test_two_ranks_of_one_job(run, tmp_path):
    """The two ranks of a DDP job, each against PyTorch's figures for it: balanced, so no
    change, and the imbalance gate passes."""
    runs, case = unpack_two_rank_capture(tmp_path)
    rank0, rank1 = sorted(runs.glob("*.pickle"))
    d = diff_json(run, rank0, rank1)
    [device] = d["devices"]
    assert device["peak_allocated"]["a_bytes"] == case["ranks"]["rank0"]["max_memory_allocated"]
    assert device["peak_allocated"]["b_bytes"] == case["ranks"]["rank1"]["max_memory_allocated"]
    rc, _, err = run("diff", str(rank0), str(rank1), "--fail-if", "peak_allocated > +1%")
    assert rc == 0, err


def test_a_missing_input_is_one_line(run, tmp_path):
    rc, out, err = run("diff", str(FP32), str(tmp_path / "nope.pickle"))
    assert rc == 1 and out == ""
    assert err == f"vramscope: error: {tmp_path / 'nope.pickle'}: no such file\n"


def test_a_damaged_report_is_one_line_not_an_overflow(run, tmp_path):
    """Sizes no device could hold (a damaged or hand-edited database) are refused as damage,
    never summed into an overflow."""
    import sqlite3

    db = tmp_path / "damaged.sqlite"
    rc, _, err = run("report", str(FP32), "-o", str(db), "-q")
    assert rc == 0, err
    with sqlite3.connect(db) as c:
        c.execute("UPDATE vramscope_allocations SET size_bytes = 9223372036854775807 "
                  "WHERE id = (SELECT min(id) FROM vramscope_allocations)")
    rc, out, err = run("diff", str(FP32), str(db))
    assert rc == 1 and out == "", err
    assert err.count("\n") == 1 and "cannot read the report" in err and "no device could hold" \
        in err, err
