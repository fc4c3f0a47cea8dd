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
