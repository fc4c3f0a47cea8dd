"""``--world-size N --rank R``: the step as one rank of a torch.distributed job, on a fake process
group (no GPU, no other process), as torchtitan's memory estimator runs it.

The user's model function sets the parallelism up itself, as a training script does:
``init_device_mesh("cuda", ...)``, then ``parallelize_module`` (tensor and sequence parallelism,
DTensor) and/or ``fully_shard`` (FSDP2). The tracer provides what those need on a CPU-only
machine:

- the process group: ``torch.distributed`` initialised with the ``fake`` backend
  (``torch.testing._internal.distributed.fake_pg``) for this rank of ``world_size``; every
  collective returns at once, its output tensors made as on a GPU (their bytes are traced);
- the CUDA device queries FSDP2 and DeviceMesh ask (``current_device``, ``device_count``,
  ``set_device``) answered for this rank (its GPU is the trace's one device, ``cuda:0``), and
  CUDA streams and events emulated as objects that order nothing: the trace is one sequence of
  allocations, each marked with the stream whose ``torch.cuda.stream(...)`` context was open
  when it was made (FSDP2's all-gather copy-in and reduce-scatter streams), because the caching
  allocator keeps each stream's blocks apart and so must the allocator model;
- the model built inside fake-tensor mode (FSDP2 makes small device tensors when it wraps a
  module), on the meta device as always;
- what torchrun gives a script: ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``... in the environment,
  and ``init_process_group``/``destroy_process_group`` calls of the script itself answered by
  the fake group already in place.

``DistributedDataParallel`` is emulated (``TracedDDP``): its reducer hooks PyTorch's C++
autograd engine, which the tracer's executor replaces, so the emulation allocates what the
reducer allocates, as torch 2.11 does (goldens/h100/run/ranks2_ddp_*): at construction the
module's states broadcast through flat copies of at most 250 MiB and one flat gradient bucket
per dtype; in the forward after the first synchronised backward, buckets in the order that
backward made the gradients ready (the first closing at 1 MiB, the others at ``bucket_cap_mb``);
``gradient_as_bucket_view=True`` makes each gradient a view of its bucket. A backward under
``no_sync`` records no order, as the reducer expects no hooks then: a
``torch.distributed.pipelining`` stage runs every forward and every backward but the step's last
under it, and asks the reducer to expect the last (``reducer.prepare_for_backward``), so its
buckets are rebuilt at the second step's first forward.

``torch.distributed.pipelining``: a model file's ``vramscope_pipeline_step`` runs its stage's
schedule; the metadata the stages exchange at the first step is answered by running the peers'
stages on the meta device (pipeline.py). A ``PipelineStage`` made anywhere else is refused with
one line."""

from __future__ import annotations

import contextlib
import importlib
import os
import sys

from .common import CURRENT_CUDA_STREAM, DTYPES, TracerError, patched, torch
from .pipeline import PipelinePeers

_STREAMS_MADE = [0]  # streams the traced code made, numbered from 1 (0: the default stream)


class _Stream:
    """``torch.cuda.Stream`` on a machine without a GPU: every wait is already satisfied. Each
    has a number (``number``; 0 the default stream) that allocations made under it carry."""

    def __init__(self, device=None, priority=0, *, default=False, **_kwargs):
        self.device = torch.device("cuda", 0) if device is None else torch.device(device)
        self.priority = priority
        if default:
            self.number = 0
        else:
            _STREAMS_MADE[0] += 1
            self.number = _STREAMS_MADE[0]
        self.cuda_stream = self.number
        # what torch.Stream carries (FSDP2 passes them to its ops)
        self.stream_id = 0
        self.device_index = self.device.index or 0
        self.device_type = 1  # c10::DeviceType::CUDA

    def wait_stream(self, _stream):
        pass

    def wait_event(self, _event):
        pass

    def record_event(self, event=None):
        return event if event is not None else _Event()

    def synchronize(self):
        pass

    def query(self):
        return True

    def __eq__(self, other):
        return self is other

    def __hash__(self):
        return id(self)


class _Event:
    """``torch.cuda.Event``: recorded and waited on at once."""

    def __init__(self, *_args, **_kwargs):
        pass

    def record(self, _stream=None):
        pass

    def wait(self, _stream=None):
        pass

    def synchronize(self):
        pass

    def query(self):
        return True


class _StreamState:
    """The current stream of the emulated device: ``torch.cuda.stream(s)`` makes ``s`` current
    until its context closes; allocations carry its number (common.CURRENT_CUDA_STREAM)."""

    def __init__(self):
        self.default = _Stream(default=True)
        self.current = self.default

    def current_stream(self, device=None):
        return self.current

    def default_stream(self, device=None):
        return self.default

    def set_stream(self, stream):
        if stream is not None:
            self.current = stream
            CURRENT_CUDA_STREAM[0] = getattr(stream, "number", 0)

    @contextlib.contextmanager
    def stream(self, stream):
        if stream is None:  # torch.cuda.stream(None) is a no-op
            yield
            return
        before = self.current
        self.set_stream(stream)
        try:
            yield
        finally:
            self.set_stream(before)


_BROADCAST_BUCKET = 250 << 20   # DDP's _sync_module_states: broadcast_coalesced's chunk
_FIRST_BUCKET = 1 << 20         # torch.distributed._DEFAULT_FIRST_BUCKET_BYTES
_MIB = 1 << 20


class TracedDDP(torch.nn.Module if torch is not None else object):
    """``torch.nn.parallel.DistributedDataParallel`` under the tracer: the wrapped module as
    ``self.module`` (its parameters named ``module.*``, as DDP's), and the reducer's memory
    (the module docstring). Nothing is allocated until ``construct``, which the tracer calls
    once the parameters are on the fake device (step 0)."""

    def __init__(self, module, device_ids=None, output_device=None, dim=0, broadcast_buffers=True,
                 process_group=None, bucket_cap_mb=None, find_unused_parameters=False,
                 check_reduction=False, gradient_as_bucket_view=False, static_graph=False,
                 **_kwargs):
        super().__init__()
        self.module = module
        self.bucket_cap_bytes = int((25 if bucket_cap_mb is None else bucket_cap_mb) * _MIB)
        self.gradient_as_bucket_view = bool(gradient_as_bucket_view)
        self.find_unused_parameters = find_unused_parameters
        self._tracker = None
        self._buckets: list = []           # flat gradient buffers, in order
        self._views: dict[int, object] = {}  # id(param) -> its slice of a bucket
        self._ready: list = []             # parameters in the order the first backward made them
        self._ready_ids: set = set()
        self._rebuilt = False
        self.require_backward_grad_sync = True
        self._expect_hooks = False         # the next backward is synchronised: its order counts
        self.reducer = _TracedReducer(self)

    def forward(self, *args, **kwargs):
        # DDP's _pre_forward rebuilds (whether or not under no_sync); its _post_forward has the
        # reducer expect the backward only outside no_sync
        if not self._rebuilt and self._tracker is not None and self._ready:
            self._rebuild_buckets()
        self._expect_hooks = torch.is_grad_enabled() and self.require_backward_grad_sync
        return self.module(*args, **kwargs)

    @contextlib.contextmanager
    def no_sync(self):
        old, self.require_backward_grad_sync = self.require_backward_grad_sync, False
        try:
            yield
        finally:
            self.require_backward_grad_sync = old

    def register_comm_hook(self, state, hook):
        pass

    def _trainable(self) -> list:
        return [p for p in self.module.parameters() if p.requires_grad]

    def construct(self, tracker) -> None:
        """What DDP(model) allocates: the states' broadcast, then the initial buckets."""
        self._tracker = tracker
        states = list(self.module.parameters()) + list(self.module.buffers())
        chunk, count = 0, 0
        for t in states + [None]:
            nbytes = 0 if t is None else t.untyped_storage().nbytes()
            if count > 0 and (t is None or chunk + nbytes > _BROADCAST_BUCKET):
                if count > 1:  # one tensor alone is broadcast in place
                    with tracker.label("temporary", "DDP broadcast of the module's states"):
                        flat = torch.empty(chunk, dtype=torch.uint8, device="cuda")
                    del flat
                chunk, count = 0, 0
            chunk += nbytes
            count += 1
        by_dtype: dict = {}
        for p in self._trainable():
            by_dtype.setdefault(p.dtype, []).append(p)
        self._allocate(list(by_dtype.values()), initial=True)
        for p in self._trainable():
            p.register_post_accumulate_grad_hook(self._grad_ready)

    def _allocate(self, groups: list, initial: bool) -> None:
        self._buckets, self._views = [], {}
        for i, params in enumerate(groups):
            name = ("DDP gradient bucket (initial)" if initial else f"DDP gradient bucket {i}")
            with self._tracker.label("gradient", name):
                bucket = torch.empty(sum(p.numel() for p in params), dtype=params[0].dtype,
                                     device="cuda")
            self._buckets.append(bucket)
            offset = 0
            for p in params:
                self._views[id(p)] = bucket[offset:offset + p.numel()].view(p.shape)
                offset += p.numel()

    def _grad_ready(self, param) -> None:
        if not self._rebuilt and self._expect_hooks and id(param) not in self._ready_ids:
            self._ready_ids.add(id(param))
            self._ready.append(param)
        if self.gradient_as_bucket_view and id(param) in self._views:
            view = self._views[id(param)]
            if param.grad is not None and param.grad.untyped_storage() is not \
                    view.untyped_storage():
                view.copy_(param.grad)
                param.grad = view  # the gradient lives in its bucket from now on

    def _rebuild_buckets(self) -> None:
        """The second forward: buckets in the order the first backward made the gradients ready
        (dtype by dtype), the first closing at 1 MiB, the others at bucket_cap_mb."""
        self._rebuilt = True
        groups, open_group, open_bytes = [], [], 0
        for p in self._ready:
            open_group.append(p)
            open_bytes += p.numel() * p.element_size()
            if open_bytes >= (_FIRST_BUCKET if not groups else self.bucket_cap_bytes):
                groups.append(open_group)
                open_group, open_bytes = [], 0
        if open_group:
            groups.append(open_group)
        old = self._buckets
        self._buckets = []
        del old
        self._allocate(groups, initial=False)
        if self.gradient_as_bucket_view:
            for p in self._ready:
                if p.grad is not None:
                    self._views[id(p)].copy_(p.grad)
                    p.grad = self._views[id(p)]


class _TracedReducer:
    """The part of DDP's C++ reducer a pipeline stage reaches into: ``prepare_for_backward``
    before the step's last backward, which is then synchronised (its ready order recorded)."""

    def __init__(self, ddp: TracedDDP):
        self._ddp = ddp

    def prepare_for_backward(self, _outputs) -> None:
        self._ddp._expect_hooks = True


def construct_ddp(model, tracker) -> bool:
    """DDP wrappers in ``model`` allocate what DDP(model) does; whether there was one."""
    found = False
    for module in model.modules():
        if isinstance(module, TracedDDP):
            module.construct(tracker)
            found = True
    return found


def _stage_guard(original):
    """A ``PipelineStage`` made by code the tracer cannot run as other ranks (anything but a model
    file's ``vramscope_pipeline_step``) would wait for metadata no rank sends: refused."""
    def init(self, *args, **kwargs):
        if not PipelinePeers.active():
            raise TracerError("a torch.distributed.pipelining stage is made outside "
                              "vramscope_pipeline_step", "the model function",
                              "make the stage and its schedule in the model file's "
                              "vramscope_pipeline_step(model, batch), which the tracer can run "
                              "as every rank (examples/distributed/pp_gpt.py)")
        return original(self, *args, **kwargs)

    init.__wrapped__ = original
    return init


def _init_process_group_again(*_args, **_kwargs):
    """A model function that initialises the process group itself, as training scripts do,
    finds it initialised by the tracer (the fake one): nothing to do."""
    return None


def _outside_fake_mode(function):
    """``function`` run with fake-tensor mode off: a DeviceMesh is made of real CPU tensors
    (its ranks), whose values it reads."""
    from torch._subclasses.fake_tensor import unset_fake_temporarily

    def wrapper(*args, **kwargs):
        with unset_fake_temporarily():
            return function(*args, **kwargs)

    wrapper.__wrapped__ = function
    return wrapper


def _patches(world_size: int) -> list:
    cuda = torch.cuda
    _STREAMS_MADE[0] = 0
    CURRENT_CUDA_STREAM[0] = 0
    streams = _StreamState()
    devices = max(1, min(world_size, 8))  # the GPUs of this rank's machine (8 per node)
    patches = [
        # the traced rank's GPU is the one device of the trace, cuda:0 (its tensors are there)
        (cuda, "current_device", lambda: 0),
        (cuda, "device_count", lambda: devices),
        (cuda, "set_device", lambda _device: None),
        (cuda, "Stream", _Stream),
        (cuda, "Event", _Event),
        (cuda, "current_stream", streams.current_stream),
        (cuda, "default_stream", streams.default_stream),
        (cuda, "set_stream", streams.set_stream),
        (cuda, "stream", streams.stream),
        (cuda, "synchronize", lambda device=None: None),
        # torch.random.fork_rng over the device (a pipeline schedule's first step): a generator
        # state of the emulated GPU's size (Philox: seed and offset), set back as nothing
        (cuda, "get_rng_state", lambda device="cuda": torch.zeros(16, dtype=torch.uint8)),
        (cuda, "set_rng_state", lambda new_state, device="cuda": None),
        (torch.nn.parallel, "DistributedDataParallel", TracedDDP),
        (importlib.import_module("torch.nn.parallel.distributed"), "DistributedDataParallel",
         TracedDDP),
        (torch.distributed, "init_process_group", _init_process_group_again),
        (torch.distributed, "destroy_process_group", lambda *_a, **_k: None),
    ]
    device_mesh = importlib.import_module("torch.distributed.device_mesh")
    importlib.import_module("torch.distributed.fsdp")  # its default mesh: init_device_mesh by name
    patches.append((device_mesh.DeviceMesh, "__init__",
                    _outside_fake_mode(device_mesh.DeviceMesh.__init__)))
    # init_device_mesh wherever torch imported it by name (fully_shard's default mesh, ...)
    original = device_mesh.init_device_mesh
    outside = _outside_fake_mode(original)

    def wrapped(device_type, *args, **kwargs):
        # The job runs on GPUs: a mesh asked of the machine's accelerator, which a CPU-only
        # machine answers "cpu" (fully_shard's default mesh), is a CUDA mesh.
        return outside("cuda" if device_type == "cpu" else device_type, *args, **kwargs)

    for module in list(sys.modules.values()):
        if getattr(module, "init_device_mesh", None) is original and \
                (module.__name__ or "").startswith("torch"):
            patches.append((module, "init_device_mesh", wrapped))
    try:
        stage = importlib.import_module("torch.distributed.pipelining.stage")
        patches.append((stage._PipelineStageBase, "__init__",
                        _stage_guard(stage._PipelineStageBase.__init__)))
        # a stage tells a DDP submodule by isinstance: it then runs no_sync and the reducer
        if hasattr(stage, "DistributedDataParallel"):
            patches.append((stage, "DistributedDataParallel", TracedDDP))
    except (ImportError, AttributeError):
        pass
    return patches


@contextlib.contextmanager
def fake_job(world_size: int, rank: int):
    """The fake process group of ``world_size`` ranks, as ``rank``, and the CUDA emulation around
    it, for the duration."""
    import torch.distributed as dist
    if not dist.is_available():
        raise TracerError("this PyTorch has no torch.distributed", f"torch {torch.__version__}",
                          "install a build with distributed support (the PyPI wheels have it)")
    try:
        from torch.testing._internal.distributed.fake_pg import FakeStore
    except ImportError as e:
        raise TracerError("this PyTorch has no fake process group",
                          f"torch {torch.__version__}", "use torch 2.2 or newer") from e
    if dist.is_initialized():
        raise TracerError("torch.distributed is already initialised", "the tracer's process",
                          "run the tracer in a process of its own")
    # what torchrun sets, for scripts that read it (LOCAL_RANK for their device, ...)
    environment = {"RANK": str(rank), "WORLD_SIZE": str(world_size),
                   "LOCAL_RANK": str(rank % 8), "LOCAL_WORLD_SIZE": str(min(world_size, 8)),
                   "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500"}
    saved_environment = {key: os.environ.get(key) for key in environment}
    os.environ.update(environment)
    dist.init_process_group("fake", store=FakeStore(), rank=rank, world_size=world_size)
    destroy = dist.destroy_process_group
    try:
        with patched(_patches(world_size)):
            yield
    finally:
        destroy()
        for key, value in saved_environment.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def apply_fsdp(model, mixed_precision: str | None = None) -> list[str]:
    """``--fsdp``: FSDP2 as torchtitan and ``examples/training/train.py --parallel fsdp2`` apply
    it to a model that does not shard itself: ``fully_shard`` on each block of the model's
    outermost layer lists (a transformer's layers), then on the root (embeddings, final norm,
    head). ``mixed_precision`` ("bf16", "fp16"): FSDP2's ``MixedPrecisionPolicy`` as torchtitan
    sets it, parameters all-gathered and computed in that dtype, gradients reduced in fp32.
    Returns the units' names, blocks first."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    if any(type(p).__name__ == "DTensor" for p in model.parameters()):
        raise TracerError("--fsdp with a model the function already sharded", "the model function",
                          "drop --fsdp: the function's own fully_shard/parallelize_module apply")
    mesh = init_device_mesh("cuda", (torch.distributed.get_world_size(),))
    blocks: list[tuple[str, object]] = []
    for name, module in model.named_modules():
        if not isinstance(module, torch.nn.ModuleList):
            continue
        if any(name.startswith(block + ".") for block, _ in blocks):
            continue  # a list inside a block: sharded with its block
        blocks.extend((f"{name}.{i}", child) for i, child in enumerate(module))
    policy = MixedPrecisionPolicy()
    if mixed_precision is not None:
        policy = MixedPrecisionPolicy(param_dtype=getattr(torch, DTYPES[mixed_precision]),
                                      reduce_dtype=torch.float32)
    for _, block in blocks:
        fully_shard(block, mesh=mesh, mp_policy=policy)
    fully_shard(model, mesh=mesh, mp_policy=policy)
    return [name for name, _ in blocks] + ["(root)"]
