"""NVML: the device's memory as nvidia-smi sees it (the sidecar's "nvml").

At CUDA's start, at the end of every phase, at an out-of-memory error and at the end, when
pynvml (nvidia-ml-py) imports: the device's total/used/free (and the driver's reserved memory,
NVML's v2 memory info), the compute processes on it (this one and the others) and torch's
reserved/allocated at the same moment, so a report can decompose nvidia-smi's figure. Only
NVML's cheap queries, only at phase boundaries; the latest samples and the largest other
processes are kept, as many as the vocabulary's ``CAPTURE_LIMITS`` say. Whatever fails is said in
one line and in the sidecar ("nvml": {"available": false, "why": ...}); nothing raises into the
program.
"""

import os

from ..vocabulary import CAPTURE_LIMITS
from .state import _say, _state

_NVML_NOT_AVAILABLE = (1 << 64) - 1  # NVML_VALUE_NOT_AVAILABLE (unsigned long long)


class _NvmlError(Exception):
    pass


def _nvml_text(value):
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


def _nvml_why(e):
    text = str(e) or type(e).__name__
    return (text if isinstance(e, _NvmlError) else f"{type(e).__name__}: {text}")[:300]


def _nvml_unavailable(why, hint=""):
    s = _state
    s.nvml = None
    s.nvml_info = {"available": False, "why": why}
    # One line for the whole run: every rank records why, the process of rank 0 (or the only
    # one) says it.
    if os.environ.get("RANK", "").strip() in ("", "0"):
        _say(f"NVML not available ({why}): the report will not decompose nvidia-smi's "
             f"figure{hint}")


def _nvml_start():
    """At CUDA's start (the CPU test mode: torch's import, with VRAMSCOPE_NVML=1): import pynvml,
    initialize NVML and take the first sample."""
    s = _state
    if s.nvml_mode == "0":
        s.nvml_info = {"available": False, "why": "turned off (VRAMSCOPE_NVML=0)"}
        return
    if s.cpu_mode and s.nvml_mode != "1":
        s.nvml_info = {"available": False,
                       "why": "not sampled in the CPU test mode (VRAMSCOPE_NVML=1 samples it)"}
        return
    try:
        import pynvml
    except ImportError:
        _nvml_unavailable("nvidia-ml-py is not installed", "; pip install nvidia-ml-py")
        return
    except Exception as e:
        _nvml_unavailable(f"importing pynvml failed: {_nvml_why(e)}")
        return
    try:
        pynvml.nvmlInit()
    except Exception as e:
        _nvml_unavailable(f"nvmlInit failed: {_nvml_why(e)}")
        return
    try:
        driver = _nvml_text(pynvml.nvmlSystemGetDriverVersion())
    except Exception:
        driver = None
    import collections

    s.nvml = pynvml
    s.nvml_handles = {}
    s.nvml_samples = collections.deque(maxlen=CAPTURE_LIMITS["max_nvml_samples"])
    s.nvml_taken = 0
    s.nvml_info = {"available": True, "driver": driver}
    try:
        counters = _torch_counters()
    except Exception:
        counters = None
    _nvml_sample("start", s.started_us, counters)


def _torch_counters():
    s = _state
    if s.cpu_mode:
        return None
    cuda = s.torch.cuda
    return {"allocated": cuda.memory_allocated(), "reserved": cuda.memory_reserved()}


def _visible_devices(text):
    """CUDA_VISIBLE_DEVICES as CUDA reads it: indices or GPU-/MIG- UUIDs, up to the first entry
    that is neither."""
    out = []
    for entry in text.split(","):
        entry = entry.strip()
        if entry.isdigit() or entry.startswith(("GPU-", "MIG-")):
            out.append(entry)
        else:
            break
    return out


def _nvml_call(fn, text):
    try:
        return fn(text)
    except TypeError:  # an old pynvml that wants bytes
        return fn(text.encode())


def _nvml_handle(torch_index):
    """NVML's handle of torch's device `torch_index` and its facts. Matched by the UUID
    CUDA_VISIBLE_DEVICES names, else by the PCI bus id torch reports, else through
    CUDA_VISIBLE_DEVICES' index, else the same index (NVML counts every device, in PCI order)."""
    s = _state
    cached = s.nvml_handles.get(torch_index)
    if cached is not None:
        return cached
    pynvml = s.nvml
    visible_text = os.environ.get("CUDA_VISIBLE_DEVICES")
    visible = _visible_devices(visible_text) if visible_text is not None else None
    if visible is not None and torch_index >= len(visible):
        raise _NvmlError(f"CUDA_VISIBLE_DEVICES={visible_text!r} shows no device {torch_index}")
    entry = visible[torch_index] if visible is not None else None
    handle, matched_by = None, None
    if entry is not None and not entry.isdigit():
        handle = _nvml_call(pynvml.nvmlDeviceGetHandleByUUID, entry)
        matched_by = "uuid"
    if handle is None and not s.cpu_mode:
        get_by_bus = getattr(pynvml, "nvmlDeviceGetHandleByPciBusId", None)
        props = s.torch.cuda.get_device_properties(torch_index)
        if get_by_bus is not None and getattr(props, "pci_bus_id", None) is not None:
            bus = (f"{getattr(props, 'pci_domain_id', 0):08x}:{props.pci_bus_id:02x}:"
                   f"{getattr(props, 'pci_device_id', 0):02x}.0")
            try:
                handle = _nvml_call(get_by_bus, bus)
                matched_by = "pci_bus_id"
            except Exception:
                handle = None
    if handle is None:
        index = int(entry) if entry is not None else torch_index
        handle = pynvml.nvmlDeviceGetHandleByIndex(index)
        matched_by = "CUDA_VISIBLE_DEVICES" if entry is not None else "index"
    facts = {"torch_device": torch_index, "matched_by": matched_by, "nvml_index": None,
             "pci_bus_id": None, "name": None, "memory_v2": True}
    try:
        facts["nvml_index"] = int(pynvml.nvmlDeviceGetIndex(handle))
    except Exception:
        if matched_by in ("index", "CUDA_VISIBLE_DEVICES"):
            facts["nvml_index"] = int(entry) if entry is not None else torch_index
    try:
        facts["pci_bus_id"] = _nvml_text(pynvml.nvmlDeviceGetPciInfo(handle).busId)
    except Exception:
        pass
    try:
        facts["name"] = _nvml_text(pynvml.nvmlDeviceGetName(handle))
    except Exception:
        pass
    s.nvml_handles[torch_index] = (handle, facts)
    return handle, facts


def _nvml_memory(handle, facts):
    """(total, used, free, reserved): NVML's v2 memory info where the library and driver have it
    (`reserved`: the driver's own), else v1 (reserved None)."""
    pynvml = _state.nvml
    version = getattr(pynvml, "nvmlMemory_v2", None)
    if version is not None and facts["memory_v2"]:
        try:
            m = pynvml.nvmlDeviceGetMemoryInfo(handle, version=version)
            return int(m.total), int(m.used), int(m.free), _nvml_bytes(getattr(m, "reserved", None))
        except Exception:
            facts["memory_v2"] = False
    m = pynvml.nvmlDeviceGetMemoryInfo(handle)
    return int(m.total), int(m.used), int(m.free), None


def _nvml_bytes(value):
    if value is None:
        return None
    value = int(value)
    return None if value < 0 or value >= _NVML_NOT_AVAILABLE else value


def _nvml_sample(at, now, counters):
    """One sample; `counters` holds torch's allocated/reserved at the same moment (None on the
    CPU). The first failure stops the sampling (said once), never the program."""
    s = _state
    pynvml = s.nvml
    if pynvml is None or s.nvml_samples is None or os.getpid() != s.pid:
        return
    try:
        torch_index = 0 if s.cpu_mode else int(s.torch.cuda.current_device())
        handle, facts = _nvml_handle(torch_index)
        total, used, free, reserved = _nvml_memory(handle, facts)
        try:
            processes = [(int(p.pid), _nvml_bytes(getattr(p, "usedGpuMemory", None)))
                         for p in pynvml.nvmlDeviceGetComputeRunningProcesses(handle)]
        except Exception:
            processes = None  # NVML cannot list them here (permissions, some MIG set-ups)
        sample = {"time_us": now, "step": s.step, "phase": s.phase, "at": at,
                  "device_total": total, "device_used": used, "device_free": free,
                  "device_reserved": reserved, "process_listed": False, "process_used": None,
                  "other_processes": None, "other_processes_more": 0,
                  "torch_reserved": None, "torch_allocated": None, "_device": torch_index}
        if counters is not None:
            sample["torch_reserved"] = counters.get("reserved")
            sample["torch_allocated"] = counters.get("allocated")
        if processes is not None:
            mine = [u for pid, u in processes if pid == s.pid]
            others = [{"pid": pid, "used": u} for pid, u in processes if pid != s.pid]
            others.sort(key=lambda p: -1 if p["used"] is None else p["used"], reverse=True)
            sample["process_listed"] = bool(mine)
            if mine and all(u is not None for u in mine):
                sample["process_used"] = sum(mine)
            sample["other_processes"] = others[:CAPTURE_LIMITS["max_nvml_processes"]]
            sample["other_processes_more"] = max(
                0, len(others) - CAPTURE_LIMITS["max_nvml_processes"])
        s.nvml_samples.append(sample)
        s.nvml_taken += 1
    except Exception as e:
        why = _nvml_why(e)
        if not s.nvml_samples:
            _nvml_unavailable(f"NVML could not read torch's device: {why}")
        else:
            s.nvml = None
            s.nvml_info["stopped"] = f"sampling stopped after {s.nvml_taken} samples: {why}"
            _say(f"NVML sampling stopped ({why}); the capture goes on", error=False)


def _nvml_sidecar():
    """The sidecar's "nvml": the device torch used last, its samples, and what NVML could not
    tell."""
    s = _state
    info = dict(s.nvml_info or {"available": False, "why": "NVML was not set up"})
    if not info.get("available"):
        return info
    samples = list(s.nvml_samples or ())
    device = samples[-1]["_device"] if samples else None
    # A sample taken while torch was on another device (CUDA starts inside the user's
    # torch.cuda.set_device, on device 0) describes another card: left out.
    kept = [x for x in samples if x["_device"] == device]
    for x in kept:
        del x["_device"]
    facts = s.nvml_handles.get(device, (None, {}))[1]
    info.update(nvml_index=facts.get("nvml_index"), pci_bus_id=facts.get("pci_bus_id"),
                name=facts.get("name"), matched_by=facts.get("matched_by"), torch_device=device,
                samples_dropped=s.nvml_taken - len(samples),
                samples_other_device=len(samples) - len(kept), pid_note=None)
    listed = [x for x in kept if x["other_processes"] is not None]
    if listed and not any(x["process_listed"] for x in listed):
        info["pid_note"] = (f"this process (pid {s.pid}) is not among NVML's compute processes: "
                            "in a container NVML reports the host's pids, so its memory is among "
                            "the other processes'")
    elif kept and not listed:
        info["pid_note"] = "NVML could not list the device's processes (permissions, MIG)"
    info["samples"] = kept
    return info
