"""End-to-end checks of the attribution stage: every byte live at the peak gets a category, the
categories agree with each other, and the phases and iterations reach the report.

Real snapshots come from VRAMSCOPE_SHARED_DIR/fixtures/real (skipped when absent). The unknown
share at the peak is printed for each (run pytest with -s to see it) and asserted.
"""

import gzip
import json
import shutil
from pathlib import Path

import pytest

from conftest import BUILT_IN_PATH, REAL_FIXTURES, open_db

# The built-in example's file (a real H200 capture, the bytes embedded in the binary).
EXAMPLE = BUILT_IN_PATH

# Fixtures whose trace records C++ frames: the bar is under 5% unknown at the peak.
CPP_FRAMES = [
    "snapshot_2025_eor_cnn_small_fulltrace_snapshotmarkers.pickle",
    "snapshot_jun2024_deepseek1.3b_finetune_cppframes.pickle",
    "snapshot_torch2.6_cs336_2.7b_forward.pickle",
]
# Python-only or trace-less fixtures: as low as the data allows. These bounds are what the rules
# reach today; a change that makes them worse should fail here.
OTHERS = {
    "snapshot_torch2.11_windows_cs336_compilectx.pickle": 0.05,
    "snapshot_torch2.0_flexgen_opt_oom.pickle": 0.05,
    "snapshot_feb2024_diffusers_cuda1_nohistory.pickle": 0.05,
}


def fixture(name: str) -> Path:
    path = REAL_FIXTURES / name
    if not path.is_file():
        pytest.skip(f"{path} is absent")
    return path


def report(run, path: Path, out: Path) -> dict:
    rc, stdout, err = run("report", str(path), "--json", "-q", "-o", str(out), "--force",
                          timeout=300)
    assert rc == 0, err
    return json.loads(stdout)


def category_bytes(breakdown: dict) -> dict:
    return {c["category"]: c["bytes"] for c in breakdown["by_category"]}


@pytest.mark.parametrize("name", CPP_FRAMES + list(OTHERS))
def test_unknown_share_at_the_peak(name, run, tmp_path):
    data = report(run, fixture(name), tmp_path / "r.sqlite")
    for device in data["devices"]:
        b = device["breakdown_at_peak"]
        by = category_bytes(b)
        assert sum(by.values()) == b["bytes"]
        assert b["unknown_bytes"] == by["unknown"]
        share = b["unknown_share"]
        print(f"\n{name} cuda:{device['device']}: unknown {by['unknown']:,} B of "
              f"{b['bytes']:,} B live at the peak = {100 * share:.2f}% "
              f"(step {b['step']}, {b['phase']})")
        bound = 0.05 if name in CPP_FRAMES else OTHERS[name]
        assert share < bound
        # Every category row names its largest owners, largest first.
        for c in b["by_category"]:
            sizes = [o["bytes"] for o in c["largest_owners"]]
            assert sizes == sorted(sizes, reverse=True)
            if c["bytes"] > 0:
                assert c["largest_owners"], c


def weights_with_gradients(db) -> tuple[int, int, int]:
    """(trainable weight bytes, gradient bytes, optimizer-state bytes) alive at the end."""
    grad_sizes = {r[0] for r in db.execute(
        "SELECT DISTINCT requested_bytes FROM vramscope_allocations WHERE category='gradient'")}
    trainable = sum(r[1] for r in db.execute(
        "SELECT requested_bytes, size_bytes FROM vramscope_allocations "
        "WHERE category='weight' AND alive_at_end") if r[0] in grad_sizes)
    grads = db.execute("SELECT coalesce(sum(size_bytes),0) FROM vramscope_allocations "
                       "WHERE category='gradient' AND alive_at_end").fetchone()[0]
    state = db.execute("SELECT coalesce(sum(size_bytes),0) FROM vramscope_allocations "
                       "WHERE category='optimizer_state' AND alive_at_end").fetchone()[0]
    return trainable, grads, state


@pytest.mark.parametrize("name", CPP_FRAMES + list(OTHERS) + ["built-in"])
def test_categories_are_consistent(name, run, tmp_path):
    path = EXAMPLE if name == "built-in" else fixture(name)
    out = tmp_path / "r.sqlite"
    data = report(run, path, out)
    db = open_db(out)
    # Gradients never exceed the weights they belong to, at the peak and at the end.
    for device in data["devices"]:
        by = category_bytes(device["breakdown_at_peak"])
        assert by["gradient"] <= by["weight"], by
    trainable, grads, state = weights_with_gradients(db)
    assert grads <= max(trainable, 0) or grads == 0
    # Adam keeps two tensors per trained weight: where optimizer state exists, it is twice the
    # trained weights (the example and eor_cnn use Adam; the others show no optimizer step).
    if state > 0:
        assert state == 2 * trainable, (state, trainable)
    # Activations are created in forward (or before the trace) and gone after backward: every
    # activation freed in the trace is freed in a backward phase, and one alive at the end was
    # made in an iteration whose backward the trace does not reach.
    spans = db.execute("SELECT device, step, phase, first_event, last_event FROM vramscope_phases"
                       ).fetchall()

    def phase_of(device, event):
        for d, step, phase, first, last in spans:
            if d == device and first <= event <= last:
                return step, phase
        return None, None

    backward_steps = {(d, s) for d, s, p, _, _ in spans if p == "backward"}
    rows = db.execute("SELECT device, alloc_event, free_requested_event, free_completed_event, "
                      "alive_at_end, phase, step FROM vramscope_allocations "
                      "WHERE category='activation'").fetchall()
    for device, alloc, freed_req, freed_done, alive, phase, step in rows:
        assert phase in ("forward", "unknown"), phase
        assert (alloc is None) == (phase == "unknown")
        freed = freed_req if freed_req is not None else freed_done
        if freed is not None and spans:
            assert phase_of(device, freed)[1] == "backward"
        elif alive and alloc is not None:
            assert (device, step) not in backward_steps


def test_built_in_example_breakdown_and_iterations(run, tmp_path):
    out = tmp_path / "r.sqlite"
    data = report(run, EXAMPLE, out)
    device = data["devices"][0]
    b = device["breakdown_at_peak"]
    assert (b["step"], b["phase"]) == (1, "optimizer")
    by = category_bytes(b)
    # The example: a 2-layer MLP (4 parameter tensors, 32.02 MiB) trained with Adam.
    assert by["weight"] == by["gradient"] == 33_574_912
    assert by["optimizer_state"] == 2 * by["weight"]
    assert by["unknown"] == 0
    assert [it["step"] for it in device["iterations"]] == [1, 2, 3]
    for it in device["iterations"]:
        assert it["has_forward"] and it["has_backward"] and it["has_optimizer"]
        assert sum(it["at_peak_by_category"].values()) == it["peak_allocated_bytes"]
    assert data["attribution"]["phases_detected"]
    db = open_db(out)
    # The category timeline adds up to the allocated curve at every point it keeps.
    rows = db.execute(
        "SELECT c.weight + c.gradient + c.optimizer_state + c.activation + c.input + "
        "c.workspace + c.temporary + c.unknown, t.allocated_bytes FROM "
        "vramscope_category_timeline c JOIN vramscope_timeline t "
        "ON t.device = c.device AND t.event = c.event").fetchall()
    assert rows and all(total == allocated for total, allocated in rows)
    # Every allocation names its rule, phase and owner.
    missing = db.execute("SELECT count(*) FROM vramscope_allocations a LEFT JOIN vramscope_rules "
                         "r ON r.id = a.rule_id LEFT JOIN vramscope_owners o ON o.id = a.owner_id "
                         "WHERE r.text IS NULL OR r.text = '' OR o.label IS NULL OR o.label = ''"
                         ).fetchone()[0]
    assert missing == 0
    owners = db.execute("SELECT category, owner, bytes FROM vramscope_owners_at_peak "
                        "ORDER BY bytes DESC").fetchall()
    assert owners[0][0] == "optimizer_state"
    iterations = db.execute("SELECT step, peak_phase FROM vramscope_iterations").fetchall()
    assert iterations == [(1, "optimizer"), (2, "optimizer"), (3, "optimizer")]


def test_summary_leads_with_the_breakdown(run, tmp_path):
    rc, out, err = run("report", str(EXAMPLE), "-o", str(tmp_path / "r.sqlite"))
    assert rc == 0, err
    lines = out.splitlines()
    lead = next(line for line in lines if "at the peak of step" in line)
    # Largest category first: on the H200 the cuBLAS workspaces (32 MiB made by the first forward
    # addmm, 1 MiB of cuBLASLt workspace with it, 32 MiB by the first backward mm) outweigh Adam's
    # exp_avg/exp_avg_sq (64.04 MiB) by a little.
    assert lead.strip().startswith("at the peak of step 1 (optimizer): workspace 65.00 MiB "
                                   "(28.7%), optimizer_state 64.04 MiB (28.3%)"), lead
    assert "unknown 0 B (0.0%)" in lead
    assert any(line.startswith("  iterations: 3") for line in lines)


def test_gzipped_snapshot_reads_like_the_plain_one(run, tmp_path):
    # The example is stored gzipped (as the capture script writes it): compare with its inflation.
    unpacked = tmp_path / "example.pickle"
    unpacked.write_bytes(gzip.decompress(EXAMPLE.read_bytes()))
    plain = report(run, unpacked, tmp_path / "a.sqlite")
    zipped = report(run, EXAMPLE, tmp_path / "b.sqlite")
    assert zipped["devices"] == plain["devices"]


def script_level_tensor_snapshot(adam_leaf: bool = False) -> dict:
    """The shape of a real run that was misreported (issue 15): Python-only stacks, a Linear moved
    to the GPU with .cuda(), and `x = torch.randn(1, 256, device="cuda")` made at script level and
    fed to the module for two steps of SGD. Only the module's parameters get gradients."""
    from conftest import AUTOGRAD_PY, MODULE_PY, SnapshotBuilder, frame

    user = "/home/user/proj/train.py"
    optim = "/usr/lib/python3/site-packages/torch/optim/sgd.py"
    b = SnapshotBuilder()
    to_device = [frame(MODULE_PY, 1143, "_apply"), frame(MODULE_PY, 1178, "cuda"),
                 frame(user, 4, "<module>")]
    weight = b.alloc(256 * 256 * 4, to_device)
    bias = b.alloc(256 * 4, to_device)
    x = b.alloc(256 * 4, [frame(user, 5, "<module>")])
    # With adam_leaf, a leaf made at script level that the optimizer trains too (requires_grad,
    # given to Adam): it gets a gradient and two state tensors of its size.
    leaf = b.alloc(3 * 512, [frame(user, 6, "<module>")]) if adam_leaf else None
    grads = []
    for step in range(2):
        forward = [frame(MODULE_PY, 1527, "_call_impl"), frame(user, 9, "<module>")]
        backward = [frame(AUTOGRAD_PY, 266, "backward"), frame(user, 10, "<module>")]
        out = b.alloc(256 * 4, forward)
        loss = b.alloc(4, [frame(user, 9, "<module>")])
        if step == 0:
            grads = [b.alloc(256 * 256 * 4, backward), b.alloc(256 * 4, backward)]
            if adam_leaf:
                grads.append(b.alloc(3 * 512, backward))
                state = [frame(optim, 70, "_init_group"), frame(user, 11, "<module>")]
                grads += [b.alloc(3 * 512, state), b.alloc(3 * 512, state)]
        b.free(out, backward)
        scratch = b.alloc(256 * 256 * 4, [frame(optim, 80, "step"), frame(user, 11, "<module>")])
        b.free(scratch, [frame(optim, 80, "step"), frame(user, 11, "<module>")])
        b.free(loss, [frame(user, 12, "<module>")])
    del weight, bias, x, grads, leaf
    return b.build()


def test_a_script_level_tensor_is_an_input_not_a_weight(run, tmp_path):
    """No module created `x` and no gradient flows to it: it is an input. Weights are what modules
    create (or what the optimizer steps), so Skyline's weight_entries hold the Linear's two
    parameters, each with its gradient's size, and nothing with a gradient of 0."""
    from conftest import write_pickle

    snapshot = write_pickle(tmp_path / "script.pickle", script_level_tensor_snapshot())
    rc, out, err = run("report", str(snapshot), "-o", str(tmp_path / "r.sqlite"), "--json")
    assert rc == 0, err
    with open_db(tmp_path / "r.sqlite") as db:
        x = db.execute("SELECT a.category, r.text FROM vramscope_allocations a JOIN "
                       "vramscope_rules r ON r.id = a.rule_id JOIN vramscope_sites s ON "
                       "s.id = a.site_id WHERE s.label LIKE '%train.py:5 <module>'").fetchall()
        assert len(x) == 1 and x[0][0] == "input", x
        weights = db.execute("SELECT size_bytes, grad_size_bytes FROM weight_entries "
                             "ORDER BY size_bytes DESC").fetchall()
        assert weights == [(262144, 262144), (1024, 1024)], weights


def test_a_script_level_leaf_the_optimizer_trains_is_a_weight(run, tmp_path):
    """What the optimizer steps is a weight even when no module made it: a leaf made at script
    level with a gradient and Adam's two state tensors of its size."""
    from conftest import write_pickle

    snapshot = write_pickle(tmp_path / "leaf.pickle", script_level_tensor_snapshot(adam_leaf=True))
    rc, out, err = run("report", str(snapshot), "-o", str(tmp_path / "r.sqlite"), "--json")
    assert rc == 0, err
    with open_db(tmp_path / "r.sqlite") as db:
        by_site = dict(db.execute(
            "SELECT s.label, a.category FROM vramscope_allocations a JOIN vramscope_sites s ON "
            "s.id = a.site_id WHERE s.label LIKE '%train.py:5 <module>' OR "
            "s.label LIKE '%train.py:6 <module>'").fetchall())
        assert sorted(by_site.values()) == ["input", "weight"], by_site
        assert next(c for label, c in by_site.items() if label.endswith(":6 <module>")) == "weight"
