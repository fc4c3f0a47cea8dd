"""Predict the GPU memory of a training step without a GPU: run the step on fake CUDA tensors and
write the tensor-level allocation stream that ``vramscope predict`` reads.

    PYTHONPATH=python python3 -m vramscope.tracer --model hf:config.json --batch 8 --seq 512 \\
        --amp bf16 --optimizer adamw -o trace.jsonl
    PYTHONPATH=python python3 -m vramscope.tracer --model my_model.py:build --inputs make_batch ...

The contract (docs/design/tracer.md has it in full):

- Nothing real-sized is allocated. The model is built on the ``meta`` device, then every parameter
  and buffer is re-created as a ``FakeTensor`` on device ``cuda`` (``FakeTensorMode`` fakes CUDA
  tensors on a CPU-only machine), so the step follows CUDA's autocast policy and the CUDA kernels'
  outputs and saved tensors. ``scaled_dot_product_attention`` is routed to the fused kernel
  PyTorch picks on an sm90 GPU (``SdpaRouting``, ``choose_sdpa_backend``).
- Every new *storage* on the fake device (a view is not one) is an allocation; it is freed when its
  storage object is garbage collected (a weakref callback, as torch.distributed._tools.mem_tracker
  does), which CPython's reference counting makes the moment PyTorch would free it.
- The backward pass is run by the tracer's own executor (``BackwardExecutor``): PyTorch's C++
  autograd engine cannot run CUDA fake tensors without a GPU (torch 2.11 and later: its stream
  bookkeeping asks the CUDA driver about device 0). The executor follows the engine: ready nodes by
  highest sequence number, gradient buffers summed in place when the engine would, gradients stolen
  by ``AccumulateGrad`` when the engine would, saved tensors released as each node runs.
- Small tensors whose values follow from the batch alone (position ids, masks) carry real CPU
  values beside the fake ones (``ValueShadows``), so code that reads them runs as on a GPU; reading
  a value computed from a parameter is an error: tracing needs shape-static code.
- Output: JSON Lines, one header, then ``phase``/``alloc``/``free``/``set``/``matmul``/``conv``
  events in order, then ``end``. Written to a temporary file beside ``-o`` and renamed at the end.
- ``--compile``: the model's forward runs through ``torch.compile`` with Inductor's own
  ``compile_fx`` (decompositions, joint-graph passes, the min-cut partitioner) up to code
  generation; each graph then runs node by node on the fake tensors, allocating what Inductor's
  lowering makes a buffer. ``--cuda-graphs`` puts the graphs' allocations in a CUDA graph pool.
- Every bad input is one line on stderr, ``vramscope tracer: error: <what>, <where>, <what to do>``,
  and exit status 1.

The package, one module per job: ``cli`` (the command line, the atomic output), ``setup`` (the
training set-up), ``models`` (the user's file or a transformers config, LoRA, frozen
parameters), ``device`` (parameters and buffers re-created on the fake device), ``optimizer``,
``step`` (the fake-tensor step runner: the training loop and the trace around it), ``tracking``
(storages, module scopes, ``ValueShadows``), ``saved`` (tensors saved for backward),
``backward`` (the executor), ``compiled`` (``--compile``/``--cuda-graphs``: Inductor's graphs
run node by node), ``sdpa`` (attention kernel routing), ``patches`` (what the trace
changes in torch for its duration, fp16 loss scaling), ``stream`` (the JSON Lines writer) and
``common`` (constants, errors, torch). ``python -m vramscope.tracer`` runs ``__main__``.

Private PyTorch APIs relied upon (each listed in docs/design/tracer.md with what breaks without
it): ``torch._subclasses.fake_tensor``, ``torch.utils._python_dispatch`` (``TorchDispatchMode``,
``_disable_current_modes``), ``torch._C._autograd._get_sequence_nr``,
``torch._C._storage_Use_Count``, ``Tensor._use_count``, ``Node._input_metadata``,
``torch._prims_common``, and, replaced for the duration of the trace:
``torch._C._current_graph_task_id``, ``torch.cuda.amp.common.amp_definitely_not_available``,
``torch.cuda.is_bf16_supported``, transformers' ``utils.import_utils.is_fake_tensor``.
"""

from __future__ import annotations

from .cli import main, parse_args, run
from .common import (CATEGORIES, CONV_OPS, DEVICE, DTYPES, FORMAT, MATMUL_OPS, OPTIMIZERS, PHASES,
                     PROG, SDPA_CHOICES, VERSION, DataDependentError, TracerError)
from .sdpa import _torch_version, choose_sdpa_backend
from .setup import Setup
from .step import trace

__all__ = ["CATEGORIES", "CONV_OPS", "DEVICE", "DTYPES", "FORMAT", "MATMUL_OPS", "OPTIMIZERS",
           "PHASES", "PROG", "SDPA_CHOICES", "VERSION", "DataDependentError", "Setup",
           "TracerError", "choose_sdpa_backend", "main", "parse_args", "run", "trace"]
