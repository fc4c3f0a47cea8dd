"""A scripted stand-in for nvidia-ml-py's pynvml, for the capture bootstrap's tests (on sys.path
through PYTHONPATH). Two devices; each memory query of a device counts as one sample `n`, and
what NVML says at sample n is (MiB = 2**20):

  device_total     40 GiB on index 0, 80 GiB on index 1
  device_used      (1024 + 8 n) MiB      device_reserved (v2)  512 MiB      free = total - used
  processes        this one: (600 + 8 n) MiB; pid 4242: 300 MiB; pid 4343: None (not available)

FAKE_NVML selects a scenario: "ok" (default), "init_fails" (nvmlInit raises), "no_v2" (no
nvmlMemory_v2: v1 only), "container" (NVML lists host pids: this process's is not among them),
"many" (70 other processes), "break_after_3" (every query after the third sample fails).
FAKE_NVML_LOG, when set, is a file each call is appended to (one line: the function's name).
"""

import os

MiB = 1 << 20
GiB = 1 << 30
MODE = os.environ.get("FAKE_NVML", "ok")
NVML_VALUE_NOT_AVAILABLE_ulonglong = (1 << 64) - 1
TOTALS = [40 * GiB, 80 * GiB]
BUS_IDS = ["00000000:1A:00.0", "00000000:3B:00.0"]
UUIDS = ["GPU-fake-0", "GPU-fake-1"]
_calls = {"memory": [0, 0]}
_initialized = False


class NVMLError(Exception):
    pass


def _log(name):
    path = os.environ.get("FAKE_NVML_LOG")
    if path:
        with open(path, "a") as f:
            f.write(name + "\n")


class _Handle:
    def __init__(self, index):
        self.index = index


class _Struct:
    def __init__(self, **kw):
        self.__dict__.update(kw)


if MODE != "no_v2":
    nvmlMemory_v2 = 0x02000028


def _check(handle=None):
    if not _initialized:
        raise NVMLError("Uninitialized")
    if handle is not None and MODE == "break_after_3" and _calls["memory"][handle.index] >= 3:
        raise NVMLError("GPU is lost")


def nvmlInit():
    global _initialized
    _log("nvmlInit")
    if MODE == "init_fails":
        raise NVMLError("Driver Not Loaded")
    _initialized = True


def nvmlSystemGetDriverVersion():
    _check()
    return "999.99.01"


def nvmlDeviceGetCount():
    _check()
    return 2


def nvmlDeviceGetHandleByIndex(index):
    _log("nvmlDeviceGetHandleByIndex")
    _check()
    if not 0 <= index < 2:
        raise NVMLError("Invalid Argument")
    return _Handle(index)


def nvmlDeviceGetHandleByPciBusId(bus_id):
    _log("nvmlDeviceGetHandleByPciBusId")
    _check()
    for i, b in enumerate(BUS_IDS):
        if b.lower() == bus_id.lower():
            return _Handle(i)
    raise NVMLError("Not Found")


def nvmlDeviceGetHandleByUUID(uuid):
    _log("nvmlDeviceGetHandleByUUID")
    _check()
    if uuid in UUIDS:
        return _Handle(UUIDS.index(uuid))
    raise NVMLError("Not Found")


def nvmlDeviceGetIndex(handle):
    _check()
    return handle.index


def nvmlDeviceGetPciInfo(handle):
    _check()
    return _Struct(busId=BUS_IDS[handle.index])


def nvmlDeviceGetName(handle):
    _check()
    return f"Fake GPU {handle.index}"


def nvmlDeviceGetMemoryInfo(handle, version=None):
    _log("nvmlDeviceGetMemoryInfo")
    _check(handle)
    n = _calls["memory"][handle.index]
    _calls["memory"][handle.index] += 1
    total = TOTALS[handle.index]
    used = (1024 + 8 * n) * MiB
    if version is None:
        return _Struct(total=total, used=used, free=total - used)
    return _Struct(total=total, used=used, free=total - used, reserved=512 * MiB,
                   version=version)


def nvmlDeviceGetComputeRunningProcesses(handle):
    _log("nvmlDeviceGetComputeRunningProcesses")
    _check(handle)
    n = _calls["memory"][handle.index] - 1  # the sample the memory query just counted
    me = 999999 if MODE == "container" else os.getpid()
    processes = [_Struct(pid=me, usedGpuMemory=(600 + 8 * n) * MiB),
                 _Struct(pid=4242, usedGpuMemory=300 * MiB),
                 _Struct(pid=4343, usedGpuMemory=None)]
    if MODE == "many":
        processes += [_Struct(pid=10000 + i, usedGpuMemory=i * MiB) for i in range(70)]
    return processes
