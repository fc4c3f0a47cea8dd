"""What the trace changes in torch (and transformers) for its duration, and the fp16 GradScaler
emulation."""

from __future__ import annotations

import contextlib
import sys
from collections import defaultdict

from .backward import BackwardExecutor
from .common import DEVICE, torch


@contextlib.contextmanager
def _patched(patches):
    """Set attributes for the duration; each (object, name, value)."""
    saved = []
    try:
        for obj, name, value in patches:
            saved.append((obj, name, getattr(obj, name)))
            setattr(obj, name, value)
        yield
    finally:
        for obj, name, value in reversed(saved):
            setattr(obj, name, value)


def emulation_patches(executor: BackwardExecutor, hf_sees_fakes: bool, compiling: bool = False):
    """What the trace changes in torch for its duration, and why:

    - CUDA autocast refuses to switch on when ``torch.cuda.is_available()`` is False; only the AMP
      code's own checks are told otherwise (not ``torch.cuda.is_available`` itself, which would
      send code down paths that touch the driver);
    - ``torch.autograd.backward`` (hence ``Tensor.backward``) runs the tracer's executor, and
      ``torch.autograd.grad`` is refused (with ``--compile`` it runs the executor too, which is
      how AOTAutograd traces its joint graph);
    - ``torch._C._current_graph_task_id`` answers the executor's graph id, so that non-reentrant
      checkpointing recomputes once per backward rather than once per saved tensor;
    - transformers takes export-safe paths when it sees a FakeTensor (``is_tracing``): it then
      materialises the causal mask and passes it to SDPA instead of ``is_causal=True``, which a GPU
      run does not do. Unless ``hf_sees_fakes``, it is told the tensors are not fake; the values it
      then reads (position ids, masks) come from ``ValueShadows``."""
    import torch.cuda.amp.common as amp_common

    patches = [
        (amp_common, "amp_definitely_not_available", lambda: False),
        (torch.cuda, "is_bf16_supported", lambda *a, **k: True),
        (torch.autograd, "backward", executor.backward),
        (torch.autograd, "grad", executor.grad if compiling else executor.grad_unsupported),
        (torch._C, "_current_graph_task_id", executor.current_graph_task_id),
    ]
    hf_utils = sys.modules.get("transformers.utils.import_utils")
    if not hf_sees_fakes and hf_utils is not None and hasattr(hf_utils, "is_fake_tensor"):
        patches.append((hf_utils, "is_fake_tensor", lambda x: False))
    return _patched(patches)


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
