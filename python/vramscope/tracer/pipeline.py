"""``torch.distributed.pipelining`` under the tracer: one stage's rank of a pipeline job, traced
alone on the fake process group.

A ``PipelineStage`` must know what its stage receives and sends (shapes, dtypes, strides): the
user gives them as ``input_args``/``output_args`` ("static" metadata), or the stages learn them
from each other at the first step through ``send_object_list``/``recv_object_list`` ("dynamic"),
which a fake process group cannot carry (torch 2.15 refuses it outright). The activations and
gradients themselves go through ``batch_isend_irecv``, which the fake group completes at once,
their buffers allocated as on a GPU: all the trace needs.

So where the user gave none, the tracer gives the traced rank's stage its static metadata,
computed as the other ranks would: each rank's build function and ``vramscope_pipeline_step`` are
run as that rank (``dist.get_rank()`` answers it) on the meta device, outside fake mode and
outside the trace, only until the step calls the schedule's ``step``, which records the
``PipelineStage``s the rank made and the first stage's inputs; then the micro-batch 0 of those
inputs is run through the stages before the traced one, and through the traced one, on the meta
device. With static metadata, torch 2.15 skips its dynamic inference (one forward and backward
of a micro-batch before the first schedule step on a real job without static metadata): that
run is not in the trace (the notes say so).

The peers are the ranks of the traced stage's pipeline group (the whole job, or one dimension of
a mesh). The peer runs see the real CPU batch moved to the meta device; each rank's run is made
once. A stage sharded over another dimension of the mesh (FSDP2, or tensor parallelism: DTensor
parameters) makes and gathers device tensors: its peers are built and run in the trace's fake
mode without its tracker, with the traced rank's mesh, their own stage coordinate answered by
``get_rank`` in their pipeline group (``_mesh_rank``); they share the traced rank's other
coordinates, so under sequence parallelism the metadata is the sequence-sharded activation the
stage really receives. A stage under DistributedDataParallel is the tracer's DDP (distributed.py),
which the stage drives as it drives DDP (``no_sync``, ``reducer.prepare_for_backward``)."""

from __future__ import annotations

import contextlib
import importlib

from .common import DEVICE, TracerError, _one_line, patched, torch
from .device import materialize_on_device
from .tracking import _all_modes_off

_FILL_ARGS = ("input_args", "output_args")


class _StepReached(Exception):
    """Raised inside a peer's run when its pipeline step calls the schedule's step."""


class _PeerRun:
    """What one rank's run of its pipeline step shows: its stages and, if it holds the first
    stage, the inputs it gives the schedule."""

    def __init__(self, rank: int):
        self.rank = rank
        self.stages: dict = {}      # stage index -> submodule (on the meta device)
        self.schedule = None        # the schedule whose step() it called
        self.step_args = None
        self.step_kwargs = None


class PipelinePeers:
    """The static metadata of the traced rank's pipeline stages (module doc)."""

    _ACTIVE = [0]  # PipelinePeers whose patches are in place

    def __init__(self, rank: int, world_size: int, build, pipeline_step, where: str):
        self.rank = rank
        self.world_size = world_size
        self.build = build                  # () -> nn.Module, for the rank dist.get_rank() gives
        self.pipeline_step = pipeline_step  # (model, batch) -> loss or None
        self.where = where                  # the model file, for errors
        self.cpu_batch = None               # the real CPU batch (train() sets it)
        self.stages_given = []              # (stage index, "computed" | "the user's")
        self._peers: dict = {}              # rank -> _PeerRun
        self._running = None                # the _PeerRun being made, if any
        self._keep: list = []               # peers' models: user code may key caches by id
        self._original_get_rank = torch.distributed.get_rank
        self.group = None                   # the traced stage's pipeline group (None: the job)
        self.sharded = False                # its parameters are DTensors (FSDP2, TP)
        self.fake_mode = None               # the trace's FakeTensorMode (step.py sets it) ...
        self.dtype = None                   # ... and the parameters' dtype, for sharded peers

    @staticmethod
    def active() -> bool:
        return PipelinePeers._ACTIVE[0] > 0

    @contextlib.contextmanager
    def installed(self):
        """For the duration: PipelineStage's metadata filled in, peers' runs possible."""
        stage_module = importlib.import_module("torch.distributed.pipelining.stage")
        schedules = importlib.import_module("torch.distributed.pipelining.schedules")
        dist = torch.distributed
        stage_class = stage_module.PipelineStage
        device_mesh = importlib.import_module("torch.distributed.device_mesh")
        patches = [(dist, "get_rank", self._get_rank),
                   (dist.distributed_c10d, "get_rank", self._get_rank),
                   (stage_class, "__init__", self._stage_init(stage_class.__init__))]
        if hasattr(device_mesh, "get_rank"):  # a peer's mesh: the traced rank's, but its stage
            patches.append((device_mesh, "get_rank", self._mesh_rank))
        for name in ("_PipelineSchedule", "PipelineScheduleSingle", "PipelineScheduleMulti"):
            cls = getattr(schedules, name, None)
            if cls is not None and "step" in vars(cls):
                patches.append((cls, "step", self._schedule_step(vars(cls)["step"])))
        with patched(patches):
            PipelinePeers._ACTIVE[0] += 1
            try:
                yield
            finally:
                PipelinePeers._ACTIVE[0] -= 1

    def notes(self) -> list:
        if not self.stages_given:
            return []
        given = ", ".join(f"stage {i} ({how})" for i, how in self.stages_given)
        return [f"torch.distributed.pipelining on rank {self.rank} of {self.world_size}: {given}; "
                "computed metadata comes from the other ranks' stages of its pipeline group built "
                "and run " + ("on the fake device, outside the trace (its stage is sharded)"
                              if self.sharded else "on the meta device") + " (micro-batch 0), "
                "given to PipelineStage as static input_args/output_args, "
                "so the dynamic metadata inference of torch >= 2.15 (a micro-batch's forward and "
                "backward before the first step, on a job without static metadata) is not traced; "
                "the schedule's step (its micro-batches' forward and backward, interleaved) is "
                "each step's forward phase"]

    # -- the patches
    def _mesh_rank(self, group=None):
        """DeviceMesh's get_rank in a peer's run: the traced rank's mesh and groups (a peer's
        other groups would not hold the real rank, so they cannot be made), but in a group that
        holds the peer (its pipeline group) the peer's place, so ``mesh["pp"].get_local_rank()``
        names the peer's stage. The peers share the traced rank's other coordinates (they are
        the ranks of its pipeline group)."""
        if self._running is not None and group is not None:
            ranks = torch.distributed.get_process_group_ranks(group)
            if self._running.rank in ranks:
                return ranks.index(self._running.rank)
        return self._original_get_rank(group)

    def _get_rank(self, group=None):
        """In a peer's run, the peer's rank: in the job, or in ``group`` (-1 if not in it)."""
        if self._running is None:
            return self._original_get_rank(group)
        rank = self._running.rank
        if group is None or group is torch.distributed.GroupMember.WORLD:
            return rank
        ranks = torch.distributed.get_process_group_ranks(group)
        return ranks.index(rank) if rank in ranks else -1

    def _stage_init(self, original):
        peers = self

        def init(stage, submodule, stage_index, num_stages, device, *args, **kwargs):
            run = peers._running
            if run is not None:  # a peer's stage: recorded (its metadata is not needed)
                run.stages[stage_index] = submodule
                return original(stage, submodule, stage_index, num_stages, device, *args,
                                **kwargs)
            peers._join(submodule, kwargs.get("group"))
            if args or any(kwargs.get(name) is not None for name in _FILL_ARGS):
                peers.stages_given.append((stage_index, "the user's"))
            else:
                kwargs = dict(kwargs)
                kwargs["input_args"], kwargs["output_args"] = peers._metadata(stage_index,
                                                                              num_stages)
                peers.stages_given.append((stage_index, "computed"))
            return original(stage, submodule, stage_index, num_stages, device, *args, **kwargs)

        init.__wrapped__ = original
        return init

    def _join(self, submodule, group) -> None:
        """The traced rank's stage: its pipeline group (the peers are its other ranks) and
        whether its parameters are sharded (DTensor: FSDP2, TP), so that the peers are built on
        the fake device as it is."""
        self.group = group
        sharded = [p for p in submodule.parameters() if type(p).__name__ == "DTensor"]
        self.sharded = self.sharded or bool(sharded)

    def _schedule_step(self, original):
        peers = self

        def step(schedule, *args, **kwargs):
            run = peers._running
            if run is None:
                return original(schedule, *args, **kwargs)
            run.schedule, run.step_args, run.step_kwargs = schedule, args, kwargs
            raise _StepReached()

        step.__wrapped__ = original
        return step

    # -- the peers
    def _peer(self, rank: int) -> _PeerRun:
        """``rank``'s build and pipeline step on the meta device, up to the schedule's step."""
        if rank in self._peers:
            return self._peers[rank]
        run = _PeerRun(rank)
        self._running = run
        try:
            with _all_modes_off(), self._peer_mode(), _real_autograd(), torch.device("meta"):
                try:
                    model = self.build()
                    if self.sharded:
                        # on the fake device as the traced rank's (FSDP2 gathers there), not
                        # in the trace
                        materialize_on_device(model, None, self.dtype)
                except TracerError:
                    raise
                except Exception as e:
                    raise TracerError(f"building rank {rank}'s stage on the meta device failed: "
                                      f"{type(e).__name__}: {_one_line(e)}", self.where,
                                      "the build function must build any rank's stage") from e
                self._keep.append(model)
                try:
                    self.pipeline_step(model, self._peer_batch())
                except _StepReached:
                    pass
                except TracerError:
                    raise
                except Exception as e:
                    raise TracerError(f"rank {rank}'s pipeline step failed on the meta device: "
                                      f"{type(e).__name__}: {_one_line(e)}", self.where,
                                      "the step must run on meta tensors up to the schedule's "
                                      "step()") from e
                else:
                    raise TracerError(f"rank {rank}'s pipeline step returned without calling a "
                                      "torch.distributed.pipelining schedule's step()",
                                      self.where, "every rank's vramscope_pipeline_step must run "
                                      "its schedule")
        finally:
            self._running = None
        self._peers[rank] = run
        return run

    def _metadata(self, stage_index: int, num_stages: int) -> tuple:
        """(input_args, output_args) of ``stage_index``: micro-batch 0 through the stages up to
        it, on the meta device."""
        stages: dict = {}
        first = None
        ranks = (range(self.world_size) if self.group is None
                 else torch.distributed.get_process_group_ranks(self.group))
        for rank in ranks:
            run = self._peer(rank)
            stages.update(run.stages)
            if 0 in run.stages:
                first = run
        missing = [i for i in range(stage_index + 1) if i not in stages]
        if missing or first is None:
            raise TracerError(f"no rank's pipeline step made stage {missing[0] if missing else 0} "
                              f"of {num_stages}", self.where,
                              "every stage must be made by the rank that runs it")
        with _all_modes_off(), self._peer_mode(), _real_autograd(), torch.device("meta"):
            args, kwargs = _micro_batch_0(first)
            try:
                for index in range(stage_index):
                    outputs = stages[index](*args, **(kwargs if index == 0 else {}))
                    args = _as_received(outputs)
                inputs = tuple(_as_received(args))
                outputs = stages[stage_index](*inputs, **(kwargs if stage_index == 0 else {}))
            except Exception as e:
                raise TracerError(f"running the stages before stage {stage_index} on the meta "
                                  f"device failed: {type(e).__name__}: {_one_line(e)}",
                                  self.where, "the stages must run on meta tensors") from e
            outputs = tuple(_as_received(outputs))
        return _as_meta(inputs), _as_meta(outputs)

    def _peer_mode(self):
        """Where the peers run: the meta device, or (sharded stages, whose FSDP2/DTensor code
        makes and gathers device tensors) the trace's fake mode without its tracker."""
        return self.fake_mode if self.sharded else contextlib.nullcontext()

    def _peer_batch(self):
        if not self.sharded:
            return _to_meta(self.cpu_batch)
        return torch.utils._pytree.tree_map(
            lambda t: t.to(DEVICE) if isinstance(t, torch.Tensor) else t, self.cpu_batch)


def _micro_batch_0(run: _PeerRun) -> tuple:
    """The first stage's micro-batch 0, split from its step's inputs as its schedule splits."""
    schedule = run.schedule
    kwargs = {k: v for k, v in run.step_kwargs.items()
              if k not in ("target", "losses", "return_outputs", "loss_kwargs", "arg_mbs",
                           "kwarg_mbs", "target_mbs", "finalize_gradients")}
    arg_mbs = run.step_kwargs.get("arg_mbs")
    kwarg_mbs = run.step_kwargs.get("kwarg_mbs")
    if arg_mbs is None:
        split = getattr(schedule, "_split_inputs", None)
        if split is not None:  # the schedule's own split (its chunk specs)
            arg_mbs, kwarg_mbs = split(run.step_args, kwargs)
        else:
            from torch.distributed.pipelining.microbatch import split_args_kwargs_into_chunks
            arg_mbs, kwarg_mbs = split_args_kwargs_into_chunks(
                run.step_args, kwargs, schedule._n_microbatches)
    return tuple(arg_mbs[0]), dict(kwarg_mbs[0] if kwarg_mbs else {})


def _as_received(outputs) -> tuple:
    """A stage's outputs as the next stage receives them: a tuple of new leaf tensors, floating
    ones requiring a gradient (they carry one back)."""
    if isinstance(outputs, torch.Tensor):
        outputs = (outputs,)
    received = []
    for t in outputs:
        if isinstance(t, torch.Tensor):
            t = t.detach().requires_grad_(t.is_floating_point() or t.is_complex())
        received.append(t)
    return tuple(received)


def _as_meta(tensors) -> tuple:
    """Plain meta tensors of the same metadata (what PipelineStage's static metadata is made
    of), whatever device or fake mode ``tensors`` come from."""
    with _all_modes_off():
        return tuple(torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device="meta")
                     .requires_grad_(t.requires_grad) if isinstance(t, torch.Tensor) else t
                     for t in tensors)


def _to_meta(batch):
    if isinstance(batch, torch.Tensor):
        return batch.to("meta")
    if isinstance(batch, dict):
        return {k: _to_meta(v) for k, v in batch.items()}
    if isinstance(batch, (tuple, list)):
        return type(batch)(_to_meta(v) for v in batch)
    return batch


@contextlib.contextmanager
def _real_autograd():
    """PyTorch's own engine for the peers' meta tensors (the trace's executor is for the traced
    rank's fake CUDA tensors), as it was before the trace patched it."""
    from torch.autograd.variable import Variable
    with patched([(torch.autograd, "backward", _ORIGINAL["backward"]),
                  (torch.autograd, "grad", _ORIGINAL["grad"]),
                  (torch._C, "_current_graph_task_id", _ORIGINAL["graph_task_id"]),
                  (torch.Tensor, "register_hook", _ORIGINAL["register_hook"]),
                  (Variable, "_execution_engine", _ORIGINAL["engine"])]):
        yield


_ORIGINAL: dict = {}
if torch is not None:
    from torch.autograd.variable import Variable as _Variable
    _ORIGINAL = {"backward": torch.autograd.backward, "grad": torch.autograd.grad,
                 "graph_task_id": torch._C._current_graph_task_id,
                 "register_hook": torch.Tensor.register_hook,
                 "engine": _Variable._execution_engine}
