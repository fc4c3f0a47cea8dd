"""The bootstrap's NVML samples (the sidecar's "nvml", docs/design/capture.md) against a scripted
pynvml (fake_nvml/pynvml.py): the numbers it says are the numbers recorded, per phase boundary;
without nvidia-ml-py, or with an NVML that fails, the program runs on and one line says so.

The CPU test mode samples NVML only with VRAMSCOPE_NVML=1 (on a GPU it is sampled by default)."""

import importlib.util
import os
import sys
import types
from pathlib import Path

import pytest

pytest.importorskip("torch")

HERE = Path(__file__).resolve().parent
FAKE = HERE / "fake_nvml"
PACKAGE = HERE.parents[1] / "python" / "vramscope"
MiB = 1 << 20
GiB = 1 << 30

TRAIN = r'''
import torch
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for i in range(3):
    model(torch.randn(2, 8)).sum().backward()
    opt.step()
    opt.zero_grad()
print("finished")
'''


def nvml_lines(run):
    return [line for line in run.vramscope_lines() if "NVML" in line]


def test_samples_hold_what_nvml_said_at_each_phase_boundary(run_script, tmp_path):
    log = tmp_path / "nvml.log"
    r = run_script(TRAIN, env={"VRAMSCOPE_NVML": "1", "CUDA_VISIBLE_DEVICES": "1",
                               "FAKE_NVML_LOG": str(log), "VRAMSCOPE_STEPS": "2"},
                   pythonpath_extra=[FAKE])
    assert r.rc == 0, r.stderr
    assert nvml_lines(r) == []
    s = r.sidecar()
    assert s["version"] == 1
    n = s["nvml"]
    assert n["available"] is True and n["driver"] == "999.99.01"
    # Torch's device 0 is NVML's device 1 through CUDA_VISIBLE_DEVICES (no PCI bus id on the CPU).
    assert (n["nvml_index"], n["pci_bus_id"], n["name"], n["matched_by"], n["torch_device"]) == (
        1, "00000000:3B:00.0", "Fake GPU 1", "CUDA_VISIBLE_DEVICES", 0)
    assert (n["samples_dropped"], n["samples_other_device"], n["pid_note"]) == (0, 0, None)
    samples, phases = n["samples"], s["phases"]
    # One sample at the start, one at the end of every phase (the last one: the capture's end).
    assert len(samples) == len(phases) + 1 == 1 + 1 + 4 * 2
    assert (samples[0]["at"], samples[0]["step"], samples[0]["phase"]) == ("start", 0, "setup")
    assert samples[0]["time_us"] == s["recording"]["started_us"]
    for p, x in zip(phases, samples[1:]):
        assert (x["step"], x["phase"], x["time_us"]) == (p["step"], p["phase"], p["end_us"])
    assert [x["at"] for x in samples[1:]] == ["phase_end"] * (len(phases) - 1) + ["end"]
    for k, x in enumerate(samples):
        assert x["device_total"] == 80 * GiB
        assert x["device_used"] == (1024 + 8 * k) * MiB
        assert x["device_free"] == 80 * GiB - x["device_used"]
        assert x["device_reserved"] == 512 * MiB
        assert x["process_listed"] is True and x["process_used"] == (600 + 8 * k) * MiB
        assert x["other_processes"] == [{"pid": 4242, "used": 300 * MiB},
                                        {"pid": 4343, "used": None}]
        assert x["other_processes_more"] == 0
        assert x["torch_reserved"] is None and x["torch_allocated"] is None  # the CPU
    # Cheap: the device is looked up once, then one memory and one process query per sample.
    calls = log.read_text().splitlines()
    assert calls.count("nvmlInit") == 1 and calls.count("nvmlDeviceGetHandleByIndex") == 1
    assert calls.count("nvmlDeviceGetMemoryInfo") == len(samples)
    assert calls.count("nvmlDeviceGetComputeRunningProcesses") == len(samples)


def test_in_a_container_this_process_is_not_found_and_the_sidecar_says_so(run_script):
    r = run_script(TRAIN, env={"VRAMSCOPE_NVML": "1", "CUDA_VISIBLE_DEVICES": "GPU-fake-0",
                               "FAKE_NVML": "container"}, pythonpath_extra=[FAKE])
    assert r.rc == 0, r.stderr
    n = r.sidecar()["nvml"]
    assert (n["nvml_index"], n["matched_by"]) == (0, "uuid")
    assert "not among NVML's compute processes" in n["pid_note"] and "container" in n["pid_note"]
    for x in n["samples"]:
        assert x["device_total"] == 40 * GiB
        assert x["process_listed"] is False and x["process_used"] is None
        assert [p["pid"] for p in x["other_processes"]] == [999999, 4242, 4343]


def test_without_nvidia_ml_py_the_run_works_and_says_so_in_one_line(run_script, tmp_path):
    missing = tmp_path / "no_pynvml"
    missing.mkdir()
    (missing / "pynvml.py").write_text("raise ImportError(\"No module named 'pynvml'\")\n")
    r = run_script(TRAIN, env={"VRAMSCOPE_NVML": "1"}, pythonpath_extra=[missing])
    assert r.rc == 0, r.stderr
    assert r.stdout.strip() == "finished"
    assert r.vramscope_lines() == [
        "vramscope: NVML not available (nvidia-ml-py is not installed): the report will not "
        "decompose nvidia-smi's figure; pip install nvidia-ml-py"]
    s = r.sidecar()
    assert s["nvml"] == {"available": False, "why": "nvidia-ml-py is not installed"}
    assert s["end"]["reason"] == "exit" and len(s["phases"]) == 1 + 4 * 3


def test_an_nvml_that_fails_to_start_is_one_line_too(run_script):
    r = run_script(TRAIN, env={"VRAMSCOPE_NVML": "1", "FAKE_NVML": "init_fails"},
                   pythonpath_extra=[FAKE])
    assert r.rc == 0, r.stderr
    assert r.vramscope_lines() == [
        "vramscope: NVML not available (nvmlInit failed: NVMLError: Driver Not Loaded): the "
        "report will not decompose nvidia-smi's figure"]
    assert r.sidecar()["nvml"] == {"available": False,
                                   "why": "nvmlInit failed: NVMLError: Driver Not Loaded"}


def test_the_cpu_test_mode_does_not_sample_unless_asked(run_script):
    r = run_script(TRAIN, pythonpath_extra=[FAKE])
    assert r.rc == 0 and r.vramscope_lines() == [], r.stderr
    assert r.sidecar()["nvml"] == {
        "available": False, "why": "not sampled in the CPU test mode (VRAMSCOPE_NVML=1 samples it)"}
    r = run_script(TRAIN, env={"VRAMSCOPE_NVML": "yes"}, pythonpath_extra=[FAKE])
    assert r.vramscope_lines() == [
        "vramscope: VRAMSCOPE_NVML='yes' is not '0' or '1'; this process runs on without capture"]


# ------------------------------------------------ in this process: the GPU paths, with fakes


class FakeCuda:
    def __init__(self):
        self.device = 0
        self.reserved, self.allocated = 2 * MiB, 1 * MiB

    def current_device(self):
        return self.device

    def get_device_properties(self, i):
        # torch's device i is the card on PCI bus 0x3B + i... of which only 0x3B exists in NVML
        return types.SimpleNamespace(pci_domain_id=0, pci_bus_id=0x3B + i, pci_device_id=0)

    def memory_reserved(self):
        return self.reserved

    def memory_allocated(self):
        return self.allocated


@pytest.fixture
def nvml(monkeypatch, capsys):
    """(the bootstrap's nvml module, fake pynvml) loaded afresh, the bootstrap's state as on a GPU
    after CUDA's start; call start() to set NVML up."""
    loaded = []

    def load(mode="ok", visible=None, rank=None):
        monkeypatch.setenv("FAKE_NVML", mode)
        if visible is None:
            monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
        else:
            monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
        if rank is None:
            monkeypatch.delenv("RANK", raising=False)
        else:
            monkeypatch.setenv("RANK", rank)
        fake = _load("pynvml", FAKE / "pynvml.py")
        monkeypatch.setitem(sys.modules, "pynvml", fake)
        name = f"vramscope_fresh_{len(loaded)}_{mode}"
        loaded.append(name)
        b = _load_package(name).bootstrap.nvml
        s = b._state
        s.cpu_mode, s.nvml_mode, s.started_us, s.step, s.phase = False, "", 100, 0, "setup"
        s.torch = types.SimpleNamespace(cuda=FakeCuda())
        return b, fake

    yield load
    for key in [k for k in sys.modules if k.split(".")[0] in loaded]:
        del sys.modules[key]


def _load(name, path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _load_package(name):
    """python/vramscope loaded afresh as the package `name` (its own capture state), with its
    capture package imported; the caller removes `name` and its modules from sys.modules."""
    spec = importlib.util.spec_from_file_location(name, PACKAGE / "__init__.py",
                                                  submodule_search_locations=[str(PACKAGE)])
    package = importlib.util.module_from_spec(spec)
    sys.modules[name] = package
    spec.loader.exec_module(package)
    importlib.import_module(f"{name}.bootstrap.nvml")
    return package


def test_on_a_gpu_the_device_is_matched_by_pci_bus_id_and_torch_counters_recorded(nvml, capsys):
    b, fake = nvml()
    b._nvml_start()
    b._state.step, b._state.phase = 1, "forward"
    b._nvml_sample("phase_end", 200, {"allocated": 5, "reserved": 7})
    n = b._nvml_sidecar()
    assert capsys.readouterr().err == ""
    assert (n["nvml_index"], n["pci_bus_id"], n["matched_by"]) == (1, "00000000:3B:00.0",
                                                                  "pci_bus_id")
    start, forward = n["samples"]
    assert (start["time_us"], start["torch_reserved"], start["torch_allocated"]) == (
        100, 2 * MiB, 1 * MiB)
    assert (forward["time_us"], forward["step"], forward["phase"]) == (200, 1, "forward")
    assert (forward["torch_reserved"], forward["torch_allocated"]) == (7, 5)
    assert forward["device_used"] == (1024 + 8) * MiB and forward["process_used"] == 608 * MiB


def test_a_uuid_in_cuda_visible_devices_wins_over_the_bus_id(nvml):
    b, _ = nvml(visible="GPU-fake-0")
    b._nvml_start()
    n = b._nvml_sidecar()
    assert (n["nvml_index"], n["matched_by"]) == (0, "uuid")
    b, _ = nvml(visible="3")
    b._nvml_start()  # an index in CUDA_VISIBLE_DEVICES: the PCI bus id wins
    n = b._nvml_sidecar()
    assert n["available"] is True and n["matched_by"] == "pci_bus_id"


def test_samples_of_another_device_are_left_out(nvml):
    """CUDA starts inside torch.cuda.set_device(local_rank), on device 0: the start sample is of
    another card than the training's."""
    b, _ = nvml()
    b._nvml_start()  # torch's device 0: bus 0x3B, NVML 1
    b._state.torch.cuda.device = 1  # bus 0x3C: not in NVML's PCI list, so NVML index 1 -> none
    b._state.torch.cuda.get_device_properties = lambda i: types.SimpleNamespace(
        pci_domain_id=0, pci_bus_id=0x1A, pci_device_id=0)
    b._nvml_sample("phase_end", 200, None)
    n = b._nvml_sidecar()
    assert (n["torch_device"], n["nvml_index"], n["samples_other_device"]) == (1, 0, 1)
    assert len(n["samples"]) == 1 and n["samples"][0]["device_total"] == 40 * GiB


def test_v1_memory_info_leaves_reserved_unknown(nvml):
    b, _ = nvml("no_v2")
    b._nvml_start()
    x = b._nvml_sidecar()["samples"][0]
    assert x["device_reserved"] is None and x["device_used"] == 1024 * MiB


def test_other_processes_are_bounded(nvml):
    b, _ = nvml("many")
    b._nvml_start()
    x = b._nvml_sidecar()["samples"][0]
    assert len(x["other_processes"]) == b.CAPTURE_LIMITS["max_nvml_processes"] == 64
    assert x["other_processes_more"] == 72 - 64
    assert x["other_processes"][0] == {"pid": 4242, "used": 300 * MiB}  # the largest first
    assert x["other_processes"][1] == {"pid": 10069, "used": 69 * MiB}


def test_an_nvml_that_breaks_mid_run_stops_sampling_with_one_line(nvml, capsys):
    b, _ = nvml("break_after_3")
    b._nvml_start()
    for t in range(5):
        b._nvml_sample("phase_end", 200 + t, None)
    n = b._nvml_sidecar()
    assert len(n["samples"]) == 3
    assert n["stopped"] == "sampling stopped after 3 samples: NVMLError: GPU is lost"
    assert capsys.readouterr().err == (
        "vramscope: NVML sampling stopped (NVMLError: GPU is lost); the capture goes on\n")


def test_only_rank_zero_says_nvml_is_missing(nvml, capsys):
    b, _ = nvml("init_fails", rank="3")
    b._nvml_start()
    assert capsys.readouterr().err == ""
    assert b._nvml_sidecar()["why"] == "nvmlInit failed: NVMLError: Driver Not Loaded"
    b, _ = nvml(visible="")  # CUDA_VISIBLE_DEVICES="" hides every device
    b._nvml_start()
    assert b._nvml_sidecar() == {
        "available": False,
        "why": "NVML could not read torch's device: CUDA_VISIBLE_DEVICES='' shows no device 0"}
    assert "NVML not available (NVML could not read" in capsys.readouterr().err
