"""What the trace changes in torch (and transformers) for its duration, and the fp16 GradScaler
emulation."""

from __future__ import annotations

import importlib
import sys
from collections import defaultdict

from .backward import BackwardExecutor, HookableNode
from .common import DEVICE, patched, torch


def emulation_patches(executor: BackwardExecutor, hf_sees_fakes: bool, autograd_grad: bool = False):
    """What the trace changes in torch for its duration, and why:

    - CUDA autocast refuses to switch on when ``torch.cuda.is_available()`` is False; only the AMP
      code's own checks are told otherwise (not ``torch.cuda.is_available`` itself, which would
      send code down paths that touch the driver);
    - ``torch.autograd.backward`` (hence ``Tensor.backward``) runs the tracer's executor, and
      ``torch.autograd.grad`` is refused unless ``autograd_grad`` (``--compile``: AOTAutograd
      traces its joint graph by calling it; a pipeline stage: torch.distributed.pipelining
      computes its inputs' gradients with it), when it runs the executor too;
    - ``torch._C._current_graph_task_id`` answers the executor's graph id, so that non-reentrant
      checkpointing recomputes once per backward rather than once per saved tensor;
    - with ``autograd_grad``, the zero-bubble schedules' split backward hooks the executor's
      nodes (``_zero_bubble_patches``);
    - transformers takes export-safe paths when it sees a FakeTensor (``is_tracing``): it then
      materialises the causal mask and passes it to SDPA instead of ``is_causal=True``, which a GPU
      run does not do. Unless ``hf_sees_fakes``, it is told the tensors are not fake; the values it
      then reads (position ids, masks) come from ``ValueShadows``."""
    import torch.cuda.amp.common as amp_common

    patches = [
        (amp_common, "amp_definitely_not_available", lambda: False),
        (torch.cuda, "is_bf16_supported", lambda *a, **k: True),
        (torch.autograd, "backward", executor.backward),
        (torch.autograd, "grad", executor.grad if autograd_grad else executor.grad_unsupported),
        (torch._C, "_current_graph_task_id", executor.current_graph_task_id),
    ]
    patches.extend(_dtensor_patches(executor.tracker))
    patches.extend(_hook_patches(executor))
    if autograd_grad:
        patches.extend(_zero_bubble_patches(executor))
    hf_utils = sys.modules.get("transformers.utils.import_utils")
    if not hf_sees_fakes and hf_utils is not None and hasattr(hf_utils, "is_fake_tensor"):
        patches.append((hf_utils, "is_fake_tensor", lambda x: False))
    return patched(patches)


class _EngineProxy:
    """``Variable._execution_engine`` whose ``queue_callback`` is the executor's."""

    def __init__(self, engine, executor: BackwardExecutor):
        self._engine, self._executor = engine, executor

    def queue_callback(self, callback):
        self._executor.queue_callback(callback)

    def __getattr__(self, name):
        return getattr(self._engine, name)


def _hook_patches(executor: BackwardExecutor) -> list:
    """What the engine does that Python code asks of it, routed to the executor: hooks on
    non-leaf tensors (``Tensor.register_hook``; FSDP2's pre-backward all-gather hangs on them),
    final callbacks (``queue_callback``; FSDP2's last reduce-scatter), and the storage resizes
    with which FSDP2 frees and re-allocates gathered parameters (``UntypedStorage.resize_``,
    which is no aten op and so unseen by the dispatch mode)."""
    from torch.autograd.variable import Variable
    register_hook = torch.Tensor.register_hook
    resize = torch.UntypedStorage.resize_
    tracker = executor.tracker

    def tensor_register_hook(self, hook):
        return executor.register_tensor_hook(register_hook, self, hook)

    def storage_resize(self, size):
        result = resize(self, size)
        tracker.storage_resized(self)
        return result

    return [(torch.Tensor, "register_hook", tensor_register_hook),
            (Variable, "_execution_engine", _EngineProxy(Variable._execution_engine, executor)),
            (torch.UntypedStorage, "resize_", storage_resize)]


def _zero_bubble_patches(executor: BackwardExecutor) -> list:
    """``torch.distributed.pipelining``'s zero-bubble schedules (``ScheduleInterleavedZeroBubble``,
    ``ScheduleZBVZeroBubble``, ``ScheduleDualPipeV``) split a stage's backward in two:
    ``stage_backward_input`` computes the input gradients and, through pre-hooks on the nodes
    where that graph meets each weight's (the "intermediates" ``get_param_groups`` finds), keeps
    the gradients arriving there; ``stage_backward_weight`` later runs the graph from those nodes
    to the weights. The executor runs the graph, so the intermediates are handed out as
    ``HookableNode``s whose pre-hooks it runs; not to a peer's run on the meta device, which
    PyTorch's own engine runs (pipeline.py's ``_real_autograd``)."""
    try:
        backward = importlib.import_module("torch.distributed.pipelining._backward")
    except ImportError:
        return []
    original = getattr(backward, "get_param_groups", None)
    if original is None:
        return []

    def get_param_groups(*args, **kwargs):
        groups = original(*args, **kwargs)
        if torch.autograd.grad == executor.grad:  # the traced rank's graph
            for group in groups:
                group["intermediates"] = [HookableNode(node, executor)
                                          for node in group["intermediates"]]
        return groups

    patches = [(backward, "get_param_groups", get_param_groups)]
    weight_pass = getattr(backward, "stage_backward_weight", None)
    if weight_pass is not None:
        labelling = _labelling_weight_pass(executor, weight_pass)
        patches.append((backward, "stage_backward_weight", labelling))
        stage = importlib.import_module("torch.distributed.pipelining.stage")
        if getattr(stage, "stage_backward_weight", None) is weight_pass:  # imported by name
            patches.append((stage, "stage_backward_weight", labelling))
    return patches


def _labelling_weight_pass(executor: BackwardExecutor, weight_pass):
    """``stage_backward_weight`` sets each weight's ``.grad`` itself from what
    ``torch.autograd.grad`` returns (no AccumulateGrad node runs, which would name it): the
    gradients it leaves are named as the executor names them."""
    def stage_backward_weight(weights, *args, **kwargs):
        weights = list(weights)
        result = weight_pass(iter(weights), *args, **kwargs)
        if torch.autograd.grad == executor.grad:
            for weight in weights:
                name = executor.param_names.get(id(weight))
                if name is not None and weight.grad is not None:
                    executor.tracker.relabel(weight.grad, "gradient", f"{name}.grad",
                                             only_from=("temporary",))
        return result

    return stage_backward_weight


def _dtensor_patches(tracker) -> list:
    """Under ``--world-size`` (a fake process group), DTensor (tensor parallelism, FSDP2) works
    out each op's output shape by running the op on fake tensors of the *global* shape
    (``ShardingPropagator._propagate_tensor_meta_non_cached``): those are no allocation on the
    GPU, so the trace stops recording for their duration. And FSDP2's buffers are labelled."""
    if not (torch.distributed.is_available() and torch.distributed.is_initialized()):
        return []
    try:
        from torch.distributed.tensor._sharding_prop import ShardingPropagator
    except ImportError:
        return []
    propagate = ShardingPropagator._propagate_tensor_meta_non_cached

    def unrecorded(self, op_schema):
        recording, tracker.recording = tracker.recording, False
        try:
            return propagate(self, op_schema)
        finally:
            tracker.recording = recording

    patches = [(ShardingPropagator, "_propagate_tensor_meta_non_cached", unrecorded)]
    patches.extend(_fsdp_label_patches(tracker))
    return patches


def _fsdp_label_patches(tracker) -> list:
    """FSDP2's buffers named for what they hold: the all-gather (its output, and the unsharded
    parameters copied out of it, which FSDP2 frees and re-allocates by resizing their storage)
    as weights, and the reduce-scatter (its input, the flat unsharded gradients, and its output,
    the sharded gradients) as gradients, each with its FSDP unit's module path."""
    try:
        from torch.distributed.fsdp._fully_shard._fsdp_param_group import FSDPParamGroup
    except ImportError:
        return []

    def labelled(method, category, what):
        def wrapper(self, *args, **kwargs):
            unit = getattr(self, "_module_fqn", None) or "(root)"
            with tracker.label(category, f"{unit} ({what})"):
                return method(self, *args, **kwargs)
        return wrapper

    patches = []
    for name, category, what in (("unshard", "weight", "FSDP2 all-gathered parameters"),
                                 ("wait_for_unshard", "weight", "FSDP2 all-gathered parameters"),
                                 ("post_backward", "gradient", "FSDP2 reduce-scatter")):
        method = getattr(FSDPParamGroup, name, None)
        if method is not None:
            patches.append((FSDPParamGroup, name, labelled(method, category, what)))
    return patches


class GradScalerEmulation:
    """``torch.amp.GradScaler`` for ``--amp fp16``, op for op, without its ``.item()`` (a fake
    tensor has no value): no step is ever skipped."""

    def __init__(self):
        self.scale = None
        self.growth_tracker = None

    def scale_loss(self, loss):
        if self.scale is None:
            self.scale = torch.full((), 2.0 ** 16, dtype=torch.float32, device=DEVICE)
            self.growth_tracker = torch.full((), 0, dtype=torch.int32, device=DEVICE)
        return loss * self.scale

    def unscale(self, params):
        inv_scale = self.scale.double().reciprocal().float()
        found_inf = torch.full((), 0.0, dtype=torch.float32, device=DEVICE)
        by_dtype = defaultdict(list)
        for p in params:
            if p.grad is not None:
                by_dtype[p.grad.dtype].append(p.grad)
        for grads in by_dtype.values():
            torch._amp_foreach_non_finite_check_and_unscale_(grads, found_inf, inv_scale)
        return found_inf

    def update(self, found_inf):
        torch._amp_update_scale_(self.scale, self.growth_tracker, found_inf, 2.0, 0.5, 2000)
