"""The capture bootstrap on plain PyTorch loops, run on the CPU (VRAMSCOPE_CAPTURE_CPU=1)."""

import os
import signal

import pytest

pytest.importorskip("torch")

PHASES = ["forward", "backward", "optimizer", "between"]

# An MLP trained with Adam; argv[1] says how many iterations, optional argv[2] a mode.
PLAIN = r'''
import sys
import torch

steps = int(sys.argv[1]) if len(sys.argv) > 1 else 5
mode = sys.argv[2] if len(sys.argv) > 2 else ""
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
model.register_buffer("scale", torch.ones(4))
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
for i in range(steps):
    x = torch.randn(2, 8)
    if mode == "oom" and i == 1:
        class Boom(torch.nn.Module):
            def forward(self, x):
                raise torch.cuda.OutOfMemoryError(
                    "CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of "
                    "79.19 GiB of which 1.50 GiB is free. Including non-PyTorch memory, this "
                    "process has 77.68 GiB memory in use. Of the allocated memory 75.00 GiB is "
                    "allocated by PyTorch, and 2.00 GiB is reserved by PyTorch but unallocated.")
        model.append(Boom())
    if mode == "error" and i == 1:
        raise ValueError("the data ran out")
    loss = model(x).sum()
    loss.backward()
    opt.step()
    opt.zero_grad()
print("finished", steps)
'''


def test_steps_stop_the_program(run_script, helpers):
    r = run_script(PLAIN, env={"VRAMSCOPE_STEPS": "3"}, args=["6"])
    assert r.rc == 0, r.stderr
    assert "finished" not in r.stdout
    assert r.vramscope_lines() == [
        "vramscope: captured 3 steps; stopping the program "
        "(vramscope run --keep-running to let it finish)"]
    assert r.files() == [f"pid{r.sidecar()['process']['pid']}.sidecar.json"]
    s = r.sidecar()
    assert s["format"] == "vramscope-capture" and s["version"] == 1
    assert s["snapshot"] is None
    assert s["end"]["reason"] == "steps" and s["end"]["steps_completed"] == 3
    assert s["process"]["framework"] == "plain"
    assert s["process"]["rank"] is None
    assert s["recording"]["marks"] == "times"

    # Set-up, then forward, backward, optimizer, between for each step, in time order.
    steps = helpers.phases_by_step(s)
    assert steps == {0: ["setup"], 1: PHASES, 2: PHASES, 3: PHASES}
    times = [(p["begin_us"], p["end_us"]) for p in s["phases"]]
    for (b0, e0), (b1, e1) in zip(times, times[1:]):
        assert b0 <= e0 == b1 <= e1
    assert all(p["memory"] is None for p in s["phases"])
    assert s["recording"]["started_us"] == s["phases"][0]["begin_us"]

    params = {t["name"]: t for t in helpers.tensors(s, "parameter")}
    assert set(params) == {"0.weight", "0.bias", "2.weight", "2.bias"}
    assert params["0.weight"]["nbytes"] == 16 * 8 * 4
    assert params["0.weight"]["shape"] == [16, 8]
    assert params["0.weight"]["dtype"] == "float32"
    assert [t["name"] for t in helpers.tensors(s, "buffer")] == ["scale"]

    grads = helpers.tensors(s, "gradient")
    assert sorted({t["step"] for t in grads}) == [1, 2, 3]
    step1 = {t["name"]: t for t in grads if t["step"] == 1}
    assert set(step1) == set(params)
    assert step1["2.weight"]["nbytes"] == 4 * 16 * 4 and step1["2.bias"]["shape"] == [4]
    # Gradients are seen at the optimizer step's start.
    optimizer1 = next(p for p in s["phases"] if p["step"] == 1 and p["phase"] == "optimizer")
    assert all(optimizer1["begin_us"] <= t["seen_us"] <= optimizer1["end_us"]
               for t in step1.values())

    state = {t["name"]: t for t in helpers.tensors(s, "optimizer_state") if t["step"] == 1}
    assert state["0.weight.exp_avg"]["nbytes"] == 16 * 8 * 4
    assert state["0.weight.exp_avg_sq"]["shape"] == [16, 8]
    assert state["2.bias.exp_avg"]["nbytes"] == 16
    for t in s["tensors"]:
        assert t["data_ptr"] > 0 and isinstance(t["seen_us"], int)


def test_keep_running_stops_recording_and_lets_it_finish(run_script, helpers):
    r = run_script(PLAIN, env={"VRAMSCOPE_STEPS": "2", "VRAMSCOPE_AFTER_STEPS": "continue"},
                   args=["5"])
    assert r.rc == 0, r.stderr
    assert r.stdout.strip() == "finished 5"
    assert r.vramscope_lines() == []
    s = r.sidecar()
    assert s["end"]["reason"] == "steps" and s["end"]["steps_completed"] == 2
    assert max(helpers.phases_by_step(s)) == 2


def test_capture_until_exit(run_script, helpers):
    r = run_script(PLAIN, env={"VRAMSCOPE_STEPS": "0", "VRAMSCOPE_QUIET": "1"}, args=["4"])
    assert r.rc == 0, r.stderr
    assert r.stdout.strip() == "finished 4"
    assert r.stderr == ""
    s = r.sidecar()
    assert s["end"]["reason"] == "exit" and s["end"]["steps_completed"] == 4
    steps = helpers.phases_by_step(s)
    assert [steps[i] for i in range(1, 5)] == [PHASES] * 4


def test_rank_label(run_script):
    r = run_script(PLAIN, env={"RANK": "1", "LOCAL_RANK": "1", "WORLD_SIZE": "2"}, args=["2"])
    assert r.rc == 0, r.stderr
    assert r.files() == ["rank1.sidecar.json"]
    p = r.sidecar("rank1")["process"]
    assert (p["rank"], p["local_rank"], p["world_size"]) == (1, 1, 2)


def test_uncaught_out_of_memory(run_script):
    r = run_script(PLAIN, args=["5", "oom"])
    assert r.rc == 1
    assert "OutOfMemoryError" in r.stderr  # the program's own traceback, unchanged
    assert r.vramscope_lines() == []
    s = r.sidecar()
    assert s["end"]["reason"] == "oom"
    assert s["end"]["steps_completed"] == 1
    assert "OutOfMemoryError" in s["end"]["exception"]
    oom = s["oom"]
    assert oom["requested_bytes"] == 2 << 30
    assert oom["device_free"] == int(1.5 * (1 << 30))
    assert oom["allocated"] == 75 << 30 and oom["reserved"] == 77 << 30
    assert (oom["step"], oom["phase"]) == (2, "forward")
    assert oom["message"].startswith("CUDA out of memory. Tried to allocate 2.00 GiB")


def test_uncaught_exception(run_script):
    r = run_script(PLAIN, args=["5", "error"])
    assert r.rc == 1 and "ValueError: the data ran out" in r.stderr
    s = r.sidecar()
    assert s["end"]["reason"] == "exception"
    assert s["end"]["exception"] == "ValueError: the data ran out"
    assert s["oom"] is None


def test_sigterm_writes_and_chains_to_the_programs_handler(run_script):
    source = r'''
import os, signal, sys
def handler(signum, frame):
    print("program's handler", flush=True)
    sys.exit(7)
signal.signal(signal.SIGTERM, handler)
import torch
model = torch.nn.Linear(4, 4)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for i in range(2):
    model(torch.randn(1, 4)).sum().backward()
    opt.step()
os.kill(os.getpid(), signal.SIGTERM)
print("not reached")
'''
    r = run_script(source)
    assert r.rc == 7, r.stderr
    assert r.stdout.strip() == "program's handler"
    s = r.sidecar()
    assert s["end"]["reason"] == "signal" and s["end"]["steps_completed"] == 2


def test_sigterm_default_action_still_kills(run_script):
    source = r'''
import os, signal, torch
model = torch.nn.Linear(4, 4)
model(torch.randn(1, 4))
os.kill(os.getpid(), signal.SIGTERM)
print("not reached")
'''
    r = run_script(source)
    assert r.rc == -signal.SIGTERM
    assert r.stdout == ""
    assert r.sidecar()["end"]["reason"] == "signal"


def test_closure_and_gradient_accumulation(run_script, helpers):
    """optimizer.step(closure) runs forward and backward inside the step (Lightning, LBFGS): the
    optimizer phase begins when the closure returns. Two forward/backward rounds before a step
    (gradient accumulation) stay one iteration."""
    source = r'''
import torch
model = torch.nn.Linear(4, 2)
opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
def closure():
    opt.zero_grad()
    loss = model(torch.randn(3, 4)).sum()
    loss.backward()
    return loss
opt.step(closure)
opt.step(closure=closure)
for _ in range(2):
    model(torch.randn(3, 4)).sum().backward()
opt.step()
'''
    r = run_script(source)
    assert r.rc == 0, r.stderr
    s = r.sidecar()
    steps = helpers.phases_by_step(s)
    assert steps[1] == PHASES and steps[2] == PHASES
    assert steps[3] == ["forward", "backward", "forward", "backward", "optimizer", "between"]
    assert s["end"]["steps_completed"] == 3
    state = {t["name"] for t in helpers.tensors(s, "optimizer_state")}
    assert state == {"weight.momentum_buffer", "bias.momentum_buffer"}
    assert {t["step"] for t in helpers.tensors(s, "gradient")} == {1, 2, 3}


def test_views_record_their_storage(run_script, helpers):
    """Parameters that are views into one flat buffer (FSDP's flat parameters, DDP's gradient
    buckets): data_ptr is the tensor's own first byte, storage_data_ptr the buffer's."""
    source = r'''
import torch
flat = torch.zeros(20)
model = torch.nn.Linear(4, 4)
model.weight = torch.nn.Parameter(flat[4:].view(4, 4))
model(torch.randn(1, 4))
'''
    r = run_script(source)
    assert r.rc == 0, r.stderr
    params = {t["name"]: t for t in helpers.tensors(r.sidecar(), "parameter")}
    w = params["weight"]
    assert w["storage_data_ptr"] == w["data_ptr"] - 16
    assert w["storage_nbytes"] == 80 and w["nbytes"] == 64
    assert "storage_data_ptr" not in params["bias"]


def test_root_forward_names_relative_to_the_calling_module(run_script, helpers):
    """A module whose method calls a submodule directly (a LightningModule's training_step calling
    self.model(x)): names are the outer module's."""
    source = r'''
import torch
class Task(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.model = torch.nn.Sequential(torch.nn.Linear(4, 4))
    def training_step(self, x):
        return self.model(x).sum()
task = Task()
opt = torch.optim.SGD(task.parameters(), lr=0.1)
task.training_step(torch.randn(2, 4)).backward()
opt.step()
'''
    r = run_script(source)
    assert r.rc == 0, r.stderr
    s = r.sidecar()
    assert {t["name"] for t in helpers.tensors(s, "parameter")} == {"model.0.weight",
                                                                     "model.0.bias"}
    assert {t["name"] for t in helpers.tensors(s, "gradient")} == {"model.0.weight",
                                                                    "model.0.bias"}



def test_the_first_batch_is_freed_when_the_program_drops_it(run_script):
    """Finding a root forward's owner reads "self" in the calling frames; it must not keep a
    snapshot of a long-lived frame's locals (Python 3.12 and older cache one on the frame when
    f_locals is read), which held the first step's batch alive to the end of a real capture
    (goldens/h100/run/ranks2_tp_llama_adamw_fp32, 2 x 16 KiB: torch itself frees it)."""
    source = r'''
import gc, weakref
import torch
def main():
    model = torch.nn.Linear(4, 4)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    kept = []
    for step in range(3):
        x = torch.randn(2, 4)
        kept.append(weakref.ref(x))
        loss = model(x).sum()
        loss.backward()
        opt.step()
        opt.zero_grad()
        del x, loss
        gc.collect()
        print("alive", [r() is not None for r in kept])
main()
'''
    r = run_script(source, env={"VRAMSCOPE_STEPS": "5"})
    assert r.rc == 0, r.stderr
    assert r.stdout.splitlines()[-1] == "alive [False, False, False]", r.stdout

NO_TORCH = r'''
import sys
print("hello", "torch" in sys.modules)
sys.exit(3)
'''


def test_a_program_without_torch_is_unaffected(run_script):
    r = run_script(NO_TORCH)
    assert (r.rc, r.stdout, r.stderr) == (3, "hello False\n", "")
    assert r.files() == []


def test_nothing_happens_without_a_capture_dir(run_script):
    r = run_script(PLAIN, capture_dir=None, args=["2"])
    assert (r.rc, r.stdout.strip(), r.stderr) == (0, "finished 2", "")


def test_torch_import_does_not_start_capture_without_cuda(run_script):
    """Without the CPU test mode, a process that imports torch but never initializes CUDA (a
    torchrun launcher, a DataLoader worker) records nothing and writes nothing."""
    r = run_script(PLAIN, cpu=False, args=["2"])
    assert (r.rc, r.stdout.strip(), r.stderr) == (0, "finished 2", "")
    assert r.files() == []


def test_chains_to_the_shadowed_sitecustomize(run_script, tmp_path):
    other = tmp_path / "other_site"
    other.mkdir()
    (other / "sitecustomize.py").write_text(
        "import sys\nprint('chained sitecustomize', __name__, file=sys.stderr)\n")
    r = run_script(PLAIN, pythonpath_extra=[other], args=["1"])
    assert r.rc == 0, r.stderr
    assert r.stderr.splitlines() == ["chained sitecustomize sitecustomize"]
    assert r.sidecar()["end"]["reason"] == "exit"
    # And without capture: still chained.
    r = run_script(NO_TORCH, capture_dir=None, pythonpath_extra=[other])
    assert (r.rc, r.stdout, r.stderr) == (3, "hello False\n", "chained sitecustomize sitecustomize\n")


def test_a_capture_dir_that_is_not_a_folder(run_script, tmp_path):
    not_a_dir = tmp_path / "a_file"
    not_a_dir.write_text("")
    source = PLAIN + "\nraise SystemExit(5)\n"
    r = run_script(source, capture_dir=not_a_dir, args=["2"])
    assert r.rc == 5
    assert r.stdout.strip() == "finished 2"
    lines = r.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("vramscope: VRAMSCOPE_CAPTURE_DIR=")
    assert "this process runs on without capture" in lines[0]


def test_a_write_that_fails(run_script, out_dir):
    source = PLAIN + f"\nimport shutil\nshutil.rmtree({str(out_dir)!r})\nraise SystemExit(4)\n"
    r = run_script(source, args=["2"])
    assert r.rc == 4
    lines = r.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("vramscope: could not write the capture to ")


def test_a_broken_bootstrap_prints_one_line(run_script, inject_dir):
    broken = inject_dir / "vramscope" / "bootstrap" / "__init__.py"
    broken.write_text("raise RuntimeError('broken')\n")
    r = run_script(NO_TORCH)
    assert (r.rc, r.stdout) == (3, "hello False\n")
    assert r.stderr == ("vramscope: could not load the capture bootstrap (RuntimeError: broken); "
                        "the program runs without capture\n")


def test_a_bad_setting_prints_one_line(run_script):
    r = run_script(PLAIN, env={"VRAMSCOPE_STEPS": "three"}, args=["2"])
    assert (r.rc, r.stdout.strip()) == (0, "finished 2")
    assert r.vramscope_lines() == [
        "vramscope: VRAMSCOPE_STEPS='three' is not a whole number; unset it or use "
        "'vramscope run'; this process runs on without capture"]
    assert r.files() == []


def test_a_misspelled_phase_is_a_bug(run_script):
    """Phases are named from the one vocabulary (src/model/vocabulary.h's capture phases): entering
    one it does not have is a ValueError (in a hook: capture stops with one line), recording or
    not."""
    source = r'''
from vramscope.bootstrap import phases
for name in ("setup", "forward", "backward", "optimizer", "between"):
    phases._enter_phase(1, name)
try:
    phases._enter_phase(1, "forwards")
except ValueError as e:
    print("ValueError:", e)
'''
    r = run_script(source)
    assert (r.rc, r.stderr) == (0, ""), r.stderr
    assert r.stdout.startswith("ValueError: 'forwards' is no capture phase "), r.stdout


def test_forked_children_do_not_write(run_script):
    source = r'''
import os, torch
model = torch.nn.Linear(2, 2)
model(torch.randn(1, 2))
pid = os.fork()
if pid == 0:
    import sys
    sys.exit(0)  # a child that exits normally runs atexit handlers
os.waitpid(pid, 0)
'''
    r = run_script(source)
    assert r.rc == 0, r.stderr
    assert len(r.files()) == 1
    assert r.sidecar()["process"]["pid"] != 0
