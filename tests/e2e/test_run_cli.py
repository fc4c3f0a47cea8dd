"""`vramscope run` (the command line, its errors and exit codes) and `vramscope report FOLDER` on
captures laid out as `vramscope run` writes them.

The capture folders are made from real H200 goldens: each golden's snapshot becomes a rank's
`<rank>.pickle.gz`, and its sidecar (PyTorch's own tensors, addresses and phase times from the
same run, recorded by scripts/capture_goldens.py) is rewritten in the capture sidecar's format
(docs/design/capture.md). The bootstrap itself is tested with PyTorch in tests/capture.
"""

from __future__ import annotations

import json
import shutil
import sqlite3
import sys
from pathlib import Path

import pytest

from conftest import REPO, assert_one_error_line, run_binary

GOLDENS = REPO / "goldens" / "h200"
# Golden phases -> capture phases: what comes before forward in an iteration is "between".
PHASES = {"zero_grad": "between", "inputs": "between", "forward": "forward",
          "backward": "backward", "optimizer": "optimizer", "step_end": "between"}


def capture_sidecar(case: str, label: str, rank: int | None, world: int) -> dict:
    """The golden `case`'s sidecar in the capture format, as the bootstrap would have written it."""
    old = json.loads((GOLDENS / f"{case}.sidecar.json").read_text())
    phases = [{"step": p["step"], "phase": PHASES[p["phase"]], "begin_us": p["begin_us"],
               "end_us": p["end_us"]} for p in old["phases"] if p["phase"] in PHASES]
    end_of_step1 = next(p["begin_us"] for p in old["phases"]
                        if p["step"] == 1 and p["phase"] == "step_end")
    last = old["phases"][-1]["end_us"]
    tensors = []
    for when, seen in (("after_first_step", end_of_step1), ("end", last)):
        t = old["tensors"][when]
        for p in t["parameters"]:
            tensors.append({"kind": "parameter", "name": p["name"], "data_ptr": p["data_ptr"],
                            "nbytes": p["nbytes"], "seen_us": seen})
        for g in t["gradients"]:
            tensors.append({"kind": "gradient", "name": g["param"], "data_ptr": g["data_ptr"],
                            "nbytes": g["nbytes"], "seen_us": seen})
        for s in t["optimizer_state"]:
            if s["device"].startswith("cuda"):
                tensors.append({"kind": "optimizer_state", "name": f"{s['param']}.{s['key']}",
                                "data_ptr": s["data_ptr"], "nbytes": s["nbytes"],
                                "seen_us": seen})
    return {
        "format": "vramscope-capture", "version": 1, "snapshot": f"{label}.pickle.gz",
        "process": {"pid": 1000 + (rank or 0), "rank": rank, "local_rank": rank,
                    "world_size": world if rank is not None else None, "hostname": "h200-node",
                    "torch": "2.11.0+cu130", "device": 0, "device_name": "NVIDIA H200",
                    "framework": "plain"},
        "recording": {"stacks": "all", "context": "all", "max_entries": 1000000,
                      "fallback": None, "marks": "times"},
        "end": {"reason": "exit", "steps_completed": 3},
        "phases": phases, "tensors": tensors, "oom": None,
    }


def make_capture(folder: Path, case: str, label: str, rank: int | None, world: int = 1):
    shutil.copy(GOLDENS / f"{case}.pickle.gz", folder / f"{label}.pickle.gz")
    (folder / f"{label}.sidecar.json").write_text(
        json.dumps(capture_sidecar(case, label, rank, world)))


def golden(case: str) -> dict:
    return json.loads((GOLDENS / "metadata.json").read_text())["cases"][case]


def assert_failure(code, out, err, expected_code, phrase):
    """One error line holding `phrase`, the exit code, and nothing of vramscope's on stdout."""
    assert code == expected_code, f"exit code {code} (expected {expected_code}): {err!r}"
    assert out == "", out
    assert phrase in assert_one_error_line(err), err


needs_goldens = pytest.mark.skipif(not (GOLDENS / "metadata.json").exists(),
                                   reason="no H200 goldens")


@needs_goldens
def test_one_capture_gets_recorded_phases_and_real_names(tmp_path):
    runs = tmp_path / "runs"
    runs.mkdir()
    make_capture(runs, "mlp_adam_fp32", "pid4242", None)
    code, out, err = run_binary("report", "--json", runs, "-o", runs / "report.sqlite",
                                cwd=tmp_path)
    assert code == 0, err
    report = json.loads(out)
    (device,) = report["devices"]
    case = golden("mlp_adam_fp32")
    assert device["peak_allocated"]["bytes"] == case["max_memory_allocated"]
    assert device["peak_reserved"]["bytes"] == case["max_memory_reserved"]
    # Three iterations, each with the phases the capture recorded, the peak where PyTorch saw it.
    steps = {it["step"]: it for it in device["iterations"]}
    assert sorted(steps) == [1, 2, 3]
    peak_step = max(steps, key=lambda s: steps[s]["peak_allocated_bytes"])
    assert steps[peak_step]["peak_phase"] == case["peak_at"]["phase"]
    notes = "\n".join(report["notes"] if "notes" in report else [])
    text = json.dumps(report)
    assert "phases recorded by the capture" in text
    assert "captured by 'vramscope run': process 1000 on h200-node, NVIDIA H200" in text
    # The weights, gradients and Adam's state carry their names in the database.
    db = sqlite3.connect(runs / "report.sqlite")
    names = {n for (n,) in db.execute("SELECT name FROM weight_entries")}
    assert {"fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"} <= names, names
    assert notes is not None


@needs_goldens
def test_a_folder_of_ranks_gets_a_per_rank_table(tmp_path):
    runs = tmp_path / "runs"
    runs.mkdir()
    # Two ranks of different size: rank 1 bounds the job.
    make_capture(runs, "mlp_sgd_fp32", "rank0", 0, 2)
    make_capture(runs, "mlp_adam_fp32", "rank1", 1, 2)
    code, out, err = run_binary("report", runs, cwd=tmp_path)
    assert code == 0, err
    assert "2 processes captured; per rank:" in out
    lines = {line.split()[0]: line for line in out.splitlines() if line.startswith("  rank")}
    assert "(reported below)" in lines["rank1"] and "(reported below)" not in lines["rank0"]
    assert "h200-node:cuda:0" in lines["rank0"]

    code, out, err = run_binary("report", "--json", "-o", tmp_path / "r.sqlite", "--force", runs,
                                cwd=tmp_path)
    assert code == 0, err
    ranks = json.loads(out)["ranks"]
    assert [r["label"] for r in ranks] == ["rank0", "rank1"]
    for r, case in zip(ranks, ("mlp_sgd_fp32", "mlp_adam_fp32")):
        assert r["peak_allocated_bytes"] == golden(case)["max_memory_allocated"], r
        assert r["peak_reserved_bytes"] == golden(case)["max_memory_reserved"], r
        assert r["steps"] == 3 and r["end_reason"] == "exit" and r["oom"] is False
    assert [r["reported"] for r in ranks] == [False, True]
    # The report of the bounding rank, with every rank in vramscope_ranks.
    report = json.loads(out)
    assert report["devices"][0]["peak_allocated"]["bytes"] == golden("mlp_adam_fp32")[
        "max_memory_allocated"]
    db = sqlite3.connect(tmp_path / "r.sqlite")
    rows = db.execute("SELECT label, rank, peak_reserved_bytes, reported FROM vramscope_ranks "
                      "ORDER BY rank").fetchall()
    assert rows == [("rank0", 0, golden("mlp_sgd_fp32")["max_memory_reserved"], 0),
                    ("rank1", 1, golden("mlp_adam_fp32")["max_memory_reserved"], 1)]
    # Why rank 1 bounds the job: Adam's state, which the SGD rank does not hold.
    compared = json.loads(out)["ranks_compared"]
    bounding = compared["bounding"]
    assert bounding["label"] == "rank1" and bounding["others"] == 1
    assert bounding["peak_allocated_bytes"] - bounding["others_median_peak_allocated_bytes"] == (
        golden("mlp_adam_fp32")["max_memory_allocated"]
        - golden("mlp_sgd_fp32")["max_memory_allocated"])
    # Adam's moments: 4 x 16 MiB for the weights, 2 x (16 + 4) KiB for the biases.
    assert bounding["category_excess_bytes"]["optimizer_state"] == 67_149_824
    alone = {o["owner"] for o in bounding["held_alone"]}
    assert {"fc1.weight.exp_avg", "fc1.weight.exp_avg_sq", "fc2.weight.exp_avg",
            "fc2.weight.exp_avg_sq"} <= alone, alone
    assert not any("fc1.weight" == o for o in alone)  # both ranks hold the weights
    steps = {s["step"]: s for s in compared["by_step"]}
    assert sorted(steps) == [1, 2, 3]
    for s in steps.values():
        assert s["ranks"] == 2 and s["highest_label"] == "rank1"
        assert s["highest_bytes"] == golden("mlp_adam_fp32")["max_memory_allocated"]
    # Aligned by phase too: in every step the optimizer's peak is rank 1's alone (SGD's step
    # allocates nothing), and both ranks run the same forward in step 1.
    phases = {(p["step"], p["phase"]): p for p in compared["by_phase"]}
    for step in (1, 2, 3):
        assert phases[(step, "optimizer")]["ranks"] == 1
        assert phases[(step, "optimizer")]["highest_label"] == "rank1"
        assert phases[(step, "backward")]["ranks"] == 2
    assert phases[(1, "forward")]["lowest_bytes"] == phases[(1, "forward")]["highest_bytes"]
    db = sqlite3.connect(tmp_path / "r.sqlite")
    assert db.execute("SELECT count(*) FROM vramscope_rank_steps").fetchone() == (6,)
    assert db.execute("SELECT peak_allocated_bytes FROM vramscope_rank_phases WHERE label = "
                      "'rank1' AND step = 1 AND phase = 'optimizer'").fetchone() == (
        golden("mlp_adam_fp32")["max_memory_allocated"],)
    assert db.execute("SELECT bytes FROM vramscope_rank_categories WHERE label = 'rank1' AND "
                      "category = 'optimizer_state'").fetchone() == (67_149_824,)
    assert db.execute("SELECT owner FROM vramscope_rank_owners WHERE label = 'rank1' AND "
                      "position = 0").fetchone() is not None
    code, out, err = run_binary("report", "--summary-only", runs, cwd=tmp_path)
    assert "why rank1 bounds the job: its peak allocated is 95.06 MiB above the median" in out, out
    assert "optimizer_state +64.04 MiB" in out


@needs_goldens
def test_a_folder_of_many_ranks_is_read_in_parallel_and_each_row_is_its_own_report(tmp_path):
    """40 ranks from five different real captures: every row equals the report of that rank's
    file alone, whatever order the workers read them in, and the bounding rank is the same."""
    runs = tmp_path / "runs"
    runs.mkdir()
    cases = ["mlp_sgd_fp32", "mlp_adam_fp32", "linear_sgd_fp32", "mlp_sgd_bf16", "linear_adam_fp32"]
    for rank in range(40):
        make_capture(runs, cases[rank % len(cases)], f"rank{rank}", rank, 40)
    code, out, err = run_binary("report", "--json", "--summary-only", runs, cwd=tmp_path,
                                timeout=300)
    assert code == 0, err
    doc = json.loads(out)
    ranks = doc["ranks"]
    assert [r["label"] for r in ranks] == [f"rank{i}" for i in range(40)]
    for rank, r in enumerate(ranks):
        case = golden(cases[rank % len(cases)])
        assert (r["peak_allocated_bytes"], r["peak_reserved_bytes"]) == (
            case["max_memory_allocated"], case["max_memory_reserved"]), r
    # mlp_adam_fp32 has the highest reserved peak; rank 1 is its lowest rank.
    assert [r["label"] for r in ranks if r["reported"]] == ["rank1"]
    assert doc["ranks_compared"]["bounding"]["others"] == 39
    assert all(s["ranks"] == 40 for s in doc["ranks_compared"]["by_step"])



@needs_goldens
def test_a_snapshot_given_directly_picks_up_its_sidecar(tmp_path):
    make_capture(tmp_path, "linear_sgd_fp32", "rank0", 0)
    code, out, err = run_binary("report", "--summary-only", "rank0.pickle.gz", cwd=tmp_path)
    assert code == 0, err
    assert "phases recorded by the capture" in out


@pytest.mark.parametrize("damage,message", [
    ("{", "rank0.sidecar.json: is not valid JSON"),
    ('{"format": "vramscope-capture", "version": 7}', "version 7 sidecar"),
    ('{"format": "vramscope-capture", "version": 1, "tensors": 3}', "tensors is not a list"),
])
@needs_goldens
def test_a_damaged_sidecar_is_one_clear_line(tmp_path, damage, message):
    shutil.copy(GOLDENS / "linear_sgd_fp32.pickle.gz", tmp_path / "rank0.pickle.gz")
    (tmp_path / "rank0.sidecar.json").write_text(damage)
    code, out, err = run_binary("report", tmp_path, cwd=tmp_path)
    assert_failure(code, out, err, 1, message)
    assert not (tmp_path / "report.sqlite").exists()


def test_an_empty_folder_says_what_it_expected(tmp_path):
    code, out, err = run_binary("report", tmp_path, cwd=tmp_path)
    assert_failure(code, out, err, 1, "holds no captures (expected rank<N>.pickle")


# --- vramscope run: its command line -------------------------------------------------------------

@pytest.mark.parametrize("args,code,message", [
    (["run"], 2, "no command to run; give it after '--'"),
    (["run", "--"], 2, "no command to run"),
    (["run", "--stacks", "cpp", "--", "true"], 2, "--stacks"),
    (["run", "--steps", "-1", "--", "true"], 2, "--steps"),
    (["run", "--keep-running", "--", "true"], 2, "--keep-running needs --steps N"),
    (["run", "--no-python", "--", "true"], 2, "--no-python captures nothing without --native"),
    (["run", "--on-oom", "--steps", "3", "--", "true"], 2,
     "--on-oom records until the program runs out of GPU memory or exits; drop --steps"),
    (["run", "--on-oom", "--native", "--", "true"], 2,
     "--on-oom with --native: the native trace is written as the program runs"),
    (["run", "--on-oom", "--native", "--no-python", "--", "true"], 2,
     "--on-oom keeps PyTorch's allocator history; it needs the PyTorch bootstrap"),
    (["run", "--", "no-such-program-vramscope"], 1,
     "cannot run 'no-such-program-vramscope': No such file or directory (is it on PATH?)"),
])
def test_run_usage_errors(tmp_path, args, code, message):
    got, out, err = run_binary(*args, cwd=tmp_path)
    assert_failure(got, out, err, code, message)


@pytest.mark.parametrize("folder", [None, "out"])
def test_run_of_a_program_without_cuda_captures_nothing_and_says_so(tmp_path, folder):
    """The program succeeded, so run does too (its status is kept); one line says what was not
    captured, and the folder made for the captures, left empty, is removed."""
    args = ["-o", folder] if folder else []
    for _ in range(2):
        code, out, err = run_binary("run", *args, "--", sys.executable, "-c", "print('hello')",
                                    cwd=tmp_path)
        assert code == 0, err
        assert out == "hello\n"  # the program's own output passes through, and nothing else
        (line,) = err.splitlines()
        assert line.startswith("vramscope: nothing was captured: no process of "), line
        assert "no snapshot and no report" in line
        assert list(tmp_path.iterdir()) == []
    # A failing program's status is kept the same way.
    code, out, err = run_binary("run", *args, "--", sys.executable, "-c", "raise SystemExit(4)",
                                cwd=tmp_path)
    assert code == 4
    assert "the program exited with status 4" in err and "nothing was captured" in err


def test_run_without_o_replaces_an_earlier_runs_captures(tmp_path):
    """The default folder is vramscope's own: a second run replaces the captures of the first
    (and says so); a file of the user's in it stays."""
    default = tmp_path / "vramscope-run"
    default.mkdir()
    (default / "rank0.pickle").write_bytes(b"old")
    (default / "rank0.sidecar.json").write_text("{}")
    (default / "notes.txt").write_text("mine")
    code, out, err = run_binary("run", "--", "true", cwd=tmp_path)
    assert code == 0, err
    assert "replacing the captures of an earlier run in vramscope-run (2 files)" in err
    assert sorted(p.name for p in default.iterdir()) == ["notes.txt"]
    # -q silences the note, not the error-free outcome.
    (default / "rank0.pickle").write_bytes(b"old")
    code, out, err = run_binary("run", "-q", "--", "true", cwd=tmp_path)
    assert code == 0 and "replacing" not in err


def test_run_keeps_the_program_exit_code_and_its_arguments(tmp_path):
    script = tmp_path / "prog.py"
    script.write_text("import sys\nprint(sys.argv[1:])\nsys.exit(7)\n")
    code, out, err = run_binary("run", "-o", "out", sys.executable, script, "--epochs", "1",
                                "-o", "x", cwd=tmp_path)
    assert code == 7, err
    assert "['--epochs', '1', '-o', 'x']" in out
    assert "the program exited with status 7" in err


def test_run_refuses_to_mix_with_an_earlier_capture(tmp_path):
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    (out_dir / "rank0.pickle").write_bytes(b"old")
    code, out, err = run_binary("run", "-o", out_dir, "--", "true", cwd=tmp_path)
    assert_failure(code, out, err, 1, "holds the captures of an earlier run (rank0.pickle)")
    assert (out_dir / "rank0.pickle").read_bytes() == b"old"
    # --force clears them first.
    code, out, err = run_binary("run", "--force", "-o", out_dir, "--", "true", cwd=tmp_path)
    assert code == 0 and "nothing was captured" in err
    assert not (out_dir / "rank0.pickle").exists()


def test_run_output_must_be_a_folder(tmp_path):
    (tmp_path / "file").write_text("x")
    code, out, err = run_binary("run", "-o", "file", "--", "true", cwd=tmp_path)
    assert_failure(code, out, err, 1, "-o file: is a file; give a folder for the captures")
    (tmp_path / "vramscope-run").write_text("x")
    code, out, err = run_binary("run", "--", "true", cwd=tmp_path)
    assert_failure(code, out, err, 1, "vramscope-run: is a file, and run writes its captures into "
                   "a folder of that name by default; give another folder with -o")


def nvml_record(reserved: int) -> dict:
    """The sidecar's "nvml" record as the bootstrap writes it (docs/design/capture.md), from a
    fake NVML: an H200 with this process (pid 1000) and two others."""
    mib = 1 << 20
    own = reserved + 800 * mib  # PyTorch's reservation + what the model expects + 127 MiB
    others = [{"pid": 2001, "used": 3 << 30}, {"pid": 2002, "used": 1 << 30}]
    used = own + (4 << 30) + 250 * mib
    sample = {"time_us": 1, "step": 2, "phase": "backward", "at": "phase_end",
              "device_total": 150 << 30, "device_used": used, "device_free": (150 << 30) - used,
              "device_reserved": 250 * mib, "process_listed": True, "process_used": own,
              "other_processes": others, "other_processes_more": 0,
              "torch_reserved": reserved, "torch_allocated": reserved // 2}
    start = dict(sample, step=0, phase="setup", at="start", device_used=used // 4,
                 process_used=600 * mib, torch_reserved=0, torch_allocated=0)
    return {"available": True, "driver": "580.65.06", "nvml_index": 0,
            "pci_bus_id": "00000000:18:00.0", "name": "NVIDIA H200", "matched_by": "pci_bus_id",
            "torch_device": 0, "samples_dropped": 0, "samples_other_device": 0,
            "pid_note": None, "samples": [start, sample]}


def capture_with(tmp_path: Path, **sidecar_fields) -> Path:
    """A one-process capture of the mlp_adam_fp32 golden whose sidecar has `sidecar_fields` set
    (as a bootstrap that recorded them would have written them); returns the folder."""
    runs = tmp_path / "runs"
    runs.mkdir()
    make_capture(runs, "mlp_adam_fp32", "pid1000", None)
    sidecar_path = runs / "pid1000.sidecar.json"
    sidecar = json.loads(sidecar_path.read_text())
    sidecar.update(sidecar_fields)
    sidecar_path.write_text(json.dumps(sidecar))
    return runs


@needs_goldens
def test_a_capture_with_nvml_samples_decomposes_nvidia_smi(tmp_path):
    reserved = golden("mlp_adam_fp32")["max_memory_reserved"]
    runs = capture_with(tmp_path, nvml=nvml_record(reserved))
    code, out, err = run_binary("report", "--json", "-o", tmp_path / "r.sqlite", runs,
                                cwd=tmp_path)
    assert code == 0, err
    usage = json.loads(out)["device_usage"]
    assert usage["available"] and usage["samples"] == 2
    assert (usage["step"], usage["phase"]) == (2, "backward")
    # The parts add up to what nvidia-smi showed, exactly.
    assert sum(p["bytes"] for p in usage["parts"]) == usage["device_used"]
    parts = {p["what"]: p["bytes"] for p in usage["parts"]}
    assert parts["reserved by PyTorch"] == reserved
    # H200 (sm_90): 610 MiB context + 76 MiB libraries expected (measured on our H100);
    # 800 - 686 = 114 MiB unexplained.
    assert parts["CUDA context"] == 610 << 20
    assert usage["unexplained_bytes"] == 114 << 20
    assert parts["2 other processes"] == 4 << 30
    assert usage["model_gpu"] == "NVIDIA H200"
    code, out, err = run_binary("report", "--summary-only", runs, cwd=tmp_path)
    assert code == 0, err
    assert "nvidia-smi's figure, decomposed" in out
    assert "the model leaves 114.00 MiB of this process unexplained" in out


@needs_goldens
def test_a_capture_without_nvml_says_why(tmp_path):
    runs = capture_with(tmp_path, nvml={"available": False, "why": "nvidia-ml-py is not installed"})
    code, out, err = run_binary("report", "--summary-only", runs, cwd=tmp_path)
    assert code == 0, err
    assert "nvidia-smi's figure: not sampled (nvidia-ml-py is not installed)" in out


@needs_goldens
def test_a_captured_oom_message_is_explained_in_the_report(tmp_path):
    """The capture's end reason is an OOM with PyTorch's message (here the one our H200 printed
    under a 3 GiB memory fraction, goldens/h200/oom_gpt_fp32.json): the report explains it as
    `vramscope explain` does."""
    message = json.loads((GOLDENS / "oom_gpt_fp32.json").read_text())["failure"]["message"]
    runs = capture_with(tmp_path, end={"reason": "oom", "steps_completed": 0},
                        oom={"requested_bytes": 256 << 20, "device_free": 146_362_000_000,
                             "step": 1, "phase": "forward", "message": message})
    code, out, err = run_binary("report", "--json", "-o", tmp_path / "r.sqlite", runs,
                                cwd=tmp_path)
    assert code == 0, err
    explained = json.loads(out)["oom_message"]
    assert explained["verdict"]["holder"] == "cap"
    assert explained["cause"] == "memory_fraction_cap"
    assert "allowed 3.00 GiB" in explained["findings"][0]["arithmetic"]
    code, out, err = run_binary("report", "--summary-only", runs, cwd=tmp_path)
    assert "PyTorch's out-of-memory message, explained" in out
    assert "verdict (cap): A memory cap of 3.00 GiB stopped PyTorch" in out
    assert "why this request failed: memory_fraction_cap (decisive)" in out


def test_a_capture_without_stacks_keeps_its_categories_and_owners(tmp_path):
    """What `run --on-oom` (`--stacks none`) records: the H100 GPT capture with every traceback
    removed reports the same categories at the peak, parameters and optimizer state under their
    names; only cuBLAS's workspace, known by its stack, becomes temporary."""
    import gzip
    import pickle

    case = REPO / "goldens" / "h100" / "run" / "gpt_adamw_fp32"
    side = json.loads(case.with_suffix(".sidecar.json").read_text())
    label = side["snapshot"].removesuffix(".pickle")
    snapshot = pickle.loads(gzip.decompress(case.with_suffix(".pickle.gz").read_bytes()))
    reports = {}
    for name, strip in (("stacks", False), ("none", True)):
        folder = tmp_path / name
        folder.mkdir()
        if strip:
            for segment in snapshot["segments"]:
                for block in segment["blocks"]:
                    block["frames"] = []
            for trace in snapshot["device_traces"]:
                for entry in trace:
                    entry["frames"] = []
        (folder / f"{label}.pickle").write_bytes(pickle.dumps(snapshot, protocol=4))
        shutil.copy(case.with_suffix(".sidecar.json"), folder / f"{label}.sidecar.json")
        code, out, err = run_binary("report", folder, "--json", cwd=tmp_path)
        assert code == 0, err
        device = json.loads(out)["devices"][0]
        reports[name] = {c["category"]: c for c in device["breakdown_at_peak"]["by_category"]}
    full, bare = reports["stacks"], reports["none"]
    for category in ("activation", "optimizer_state", "weight", "input"):
        assert bare[category]["bytes"] == full[category]["bytes"], category
    assert bare["temporary"]["bytes"] == full["temporary"]["bytes"] + full["workspace"]["bytes"]
    assert bare.get("workspace", {"bytes": 0})["bytes"] == 0
    assert bare["optimizer_state"]["largest_owners"][0]["owner"] == "wte.weight.exp_avg"
    assert bare["weight"]["largest_owners"][0]["owner"] == "wte.weight"
