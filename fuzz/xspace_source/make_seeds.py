"""Cuts fuzz seeds from the real TensorFlow profile in tests/data/xspace: its host plane with the
first memory events of its first three lines (and every vramscope.variable mark and tf.function call before them), so
that the seeds are small and have the real file's names, stats and shapes.

    python fuzz/xspace_source/make_seeds.py   # with tensorflow installed (tensorflow-cpu)
"""

import gzip
import os

from tensorflow.tsl.profiler.protobuf import xplane_pb2

here = os.path.dirname(os.path.abspath(__file__))
source = os.path.join(here, "..", "..", "tests", "data", "xspace", "keras_mlp_adam.xplane.pb.gz")
space = xplane_pb2.XSpace()
space.ParseFromString(gzip.open(source).read())
host = space.planes[0]
wanted = {k for k, m in host.event_metadata.items()
          if m.name.startswith(("Memory", "vramscope.", "EagerLocalExecute: __inference_"))}

for name, keep in (("keras_first_memory_events.pb", 12), ("keras_with_marks.pb", 6)):
    cut = xplane_pb2.XSpace()
    plane = cut.planes.add()
    plane.CopyFrom(host)
    del plane.lines[:]
    for line in host.lines:
        events = sorted((e for e in line.events if e.metadata_id in wanted),
                        key=lambda e: e.offset_ps)
        marks = [e for e in events if host.event_metadata[e.metadata_id].name.startswith("vramscope")]
        kept = [e for e in events if not host.event_metadata[e.metadata_id].name.startswith("vramscope")][:keep]
        if name == "keras_with_marks.pb":
            kept += marks[:8]
        if not kept or len(plane.lines) == 3:
            continue
        out = plane.lines.add()
        out.CopyFrom(line)
        del out.events[:]
        out.events.extend(kept)
    used = {e.metadata_id for line in plane.lines for e in line.events}
    for k in list(plane.event_metadata):
        if k not in used:
            del plane.event_metadata[k]
    stats = {s.metadata_id for line in plane.lines for e in line.events for s in e.stats}
    stats |= {s.ref_value for line in plane.lines for e in line.events for s in e.stats
              if s.WhichOneof("value") == "ref_value"}
    for k in list(plane.stat_metadata):
        if k not in stats:
            del plane.stat_metadata[k]
    del plane.stats[:]
    with open(os.path.join(here, "corpus", name), "wb") as f:
        f.write(cut.SerializeToString())
    print(name, os.path.getsize(os.path.join(here, "corpus", name)))

# What no real file here shows: TensorFlow's GPU allocator names ("GPU_<n>_bfc") beside its
# pinned host allocator, a free of memory allocated before the profile, a mark and a call.
gpu = xplane_pb2.XSpace()
plane = gpu.planes.add()
plane.name = "/host:CPU"
for k, name in enumerate(["MemoryAllocation", "MemoryDeallocation", "vramscope.variable",
                          "EagerLocalExecute: __inference_train_step_42"], start=1):
    plane.event_metadata[k].id = k
    plane.event_metadata[k].name = name
stat_names = ["addr", "allocation_bytes", "requested_bytes", "bytes_allocated", "allocator_name",
              "tf_op", "region_type", "shape", "data_type", "path", "role", "bytes",
              "bytes_available", "peak_bytes_in_use"]
for k, name in enumerate(stat_names, start=10):
    plane.stat_metadata[k].id = k
    plane.stat_metadata[k].name = name
ids = {name: k for k, name in enumerate(stat_names, start=10)}
line = plane.lines.add()
line.name = "tf_Compute"
line.timestamp_ns = 1_796_195_361_000_000_000


def event(kind, offset_ps, **stats):
    e = line.events.add()
    e.metadata_id = kind
    e.offset_ps = offset_ps
    for key, value in stats.items():
        s = e.stats.add()
        s.metadata_id = ids[key]
        if isinstance(value, str):
            s.str_value = value
        else:
            s.int64_value = value
    return e


event(4, 1_000, )
line.events[-1].duration_ps = 90_000_000
event(1, 2_000_000, addr=0x7F0000100000, allocation_bytes=4096, requested_bytes=4000,
      bytes_allocated=1 << 20, allocator_name="GPU_0_bfc", tf_op="model/dense/MatMul",
      region_type="output", shape="[32,32]", data_type=1, bytes_available=(80 << 30) - (1 << 20),
      peak_bytes_in_use=1 << 20)
event(1, 3_000_000, addr=0x5000, allocation_bytes=256, bytes_allocated=256,
      allocator_name="gpu_host_bfc")
event(1, 4_000_000, addr=0x7F0000200000, allocation_bytes=4096, bytes_allocated=(1 << 20) + 4096,
      allocator_name="GPU_0_bfc", tf_op="gradient_tape/model/dense/MatMul/MatMul_1",
      region_type="output", shape="[32,32]", data_type=1)
event(1, 5_000_000, addr=0x7F1000000000, allocation_bytes=512, bytes_allocated=512,
      allocator_name="GPU_1_bfc", tf_op="model/dense/Relu", region_type="temp", shape="[]")
event(2, 6_000_000, addr=0x7F0000000000, allocation_bytes=8192, bytes_allocated=(1 << 20) - 4096,
      allocator_name="GPU_0_bfc")
event(3, 7_000_000, path="model/dense/kernel", addr=0x7F0000100000, bytes=4096, role="weight",
      shape="[32, 32]")
event(2, 8_000_000, addr=0x7F0000200000, allocation_bytes=4096, bytes_allocated=(1 << 20) - 8192,
      allocator_name="GPU_0_bfc")
with open(os.path.join(here, "corpus", "gpu_allocators.pb"), "wb") as f:
    f.write(gpu.SerializeToString())
