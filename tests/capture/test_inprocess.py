"""In-process capture (python/vramscope/inprocess.py): `with vramscope.capture(steps=N)` and
`@vramscope.profile` on real CPU training loops, through the bootstrap's CPU test mode (no
snapshot on a CPU; the sidecar holds the phases, names and end). The GPU path, with its snapshot
and report, runs in scripts/gpu_session.sh's pytest_plugin step (the plugin measures through it).
"""

import json

TRAIN = """
import json, sys, torch, vramscope
from pathlib import Path

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2))
opt = torch.optim.AdamW(model.parameters())


def step():
    model(torch.randn(4, 8)).sum().backward()
    opt.step()
    opt.zero_grad()


def sidecar(cap):
    [path] = [p for p in cap.files if p.name.endswith(".sidecar.json")]
    return json.loads(path.read_text())


out = {}
with vramscope.capture(steps=2, folder=Path(sys.argv[1]) / "a") as cap:
    for _ in range(5):
        step()
a = sidecar(cap)
out["a"] = {"end": a["end"]["reason"], "steps": a["end"]["steps_completed"],
            "phases": sorted({(p["step"], p["phase"]) for p in a["phases"]}),
            "tensors": sorted({(t["kind"], t["name"]) for t in a["tensors"]})}
try:
    with vramscope.capture(folder=Path(sys.argv[1]) / "b") as cap_b:
        step()
        with vramscope.capture():
            pass
except vramscope.UsageError as e:
    out["nested"] = str(e)
out["b"] = sidecar(cap_b)["end"]["reason"]


@vramscope.profile(steps=1, folder=Path(sys.argv[1]) / "c")
def train_step():
    step()


for _ in range(3):
    train_step()
c = sidecar(train_step.capture)
out["c"] = [c["end"]["reason"], c["end"]["steps_completed"]]
try:
    with vramscope.capture(folder=Path(sys.argv[1]) / "d"):
        step()
        raise RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB")
except RuntimeError:
    pass
d = json.loads((Path(sys.argv[1]) / "d").glob("*.sidecar.json").__next__().read_text())
out["d"] = [d["end"]["reason"], d["end"]["exception"]]
print(json.dumps(out))
"""


def test_captures_in_process_one_after_another(run_script, tmp_path):
    run = run_script(TRAIN, capture_dir=False,
                     args=[str(tmp_path / "caps")])
    assert run.rc == 0, run.stderr
    got = json.loads(run.stdout.strip().splitlines()[-1])
    # Two steps of three phases each, then the recording stopped while the loop went on.
    assert got["a"]["end"] == "steps" and got["a"]["steps"] == 2
    assert {(1, "forward"), (1, "backward"), (1, "optimizer"), (2, "forward"), (2, "backward"),
            (2, "optimizer")} <= {tuple(p) for p in got["a"]["phases"]}
    assert not any(p[0] > 2 for p in got["a"]["phases"])
    names = {tuple(t) for t in got["a"]["tensors"]}
    assert {("parameter", "0.weight"), ("parameter", "2.bias"), ("gradient", "0.weight"),
            ("optimizer_state", "0.weight.exp_avg"),
            ("optimizer_state", "2.bias.exp_avg_sq")} <= names
    # One at a time: the inner one is refused, and the refusal ends the outer one's block, which
    # records it as the end (as any exception leaving the block).
    assert "already recording" in got["nested"] and got["b"] == "exception"
    assert got["c"] == ["steps", 1]
    assert got["d"] == ["exception", "RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB"]


def test_the_cell_magic_captures_a_cell_in_a_real_notebook(tmp_path, monkeypatch):
    """`%%vramscope 1` in a notebook (nbclient, an ipykernel of this Python): the cell runs under
    a capture of one optimizer step, its variables stay defined, and on the CPU the magic says
    there is no snapshot to report (the sidecar is written)."""
    from pathlib import Path

    import pytest

    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    pytest.importorskip("ipykernel")
    repo = Path(__file__).resolve().parents[2]
    monkeypatch.setenv("PYTHONPATH", str(repo / "python"))
    monkeypatch.setenv("VRAMSCOPE_CAPTURE_CPU", "1")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(c) for c in [
        "%load_ext vramscope",
        "%%vramscope 1\n"
        "import torch\n"
        "model = torch.nn.Linear(4, 2)\n"
        "opt = torch.optim.Adam(model.parameters())\n"
        "for _ in range(3):\n"
        "    model(torch.randn(3, 4)).sum().backward()\n"
        "    opt.step()\n"
        "shape = tuple(model.weight.shape)",
        "shape",
    ]]
    nbclient.NotebookClient(nb, timeout=300, kernel_name="python3",
                            resources={"metadata": {"path": str(tmp_path)}}).execute()
    [shown] = [o for o in nb.cells[1].outputs if o.get("output_type") == "execute_result"]
    assert "the cell made no snapshot in" in shown["data"]["text/html"]
    folder = shown["data"]["text/html"].split("the cell made no snapshot in ")[1].split(" (")[0]
    [sidecar] = Path(folder).glob("*.sidecar.json")
    assert json.loads(sidecar.read_text())["end"]["reason"] == "steps"
    [value] = [o for o in nb.cells[2].outputs if o.get("output_type") == "execute_result"]
    assert value["data"]["text/plain"] == "(2, 4)"
