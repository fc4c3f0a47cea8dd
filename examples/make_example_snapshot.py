#!/usr/bin/env python3
"""Write ``synthetic_mlp_adam_step.pickle``: a SYNTHETIC PyTorch CUDA memory snapshot.

THIS FILE WAS NOT RECORDED ON A GPU.  Every number in it is computed by this
script from the layer shapes of a small model, pushed through a simplified model
of PyTorch's CUDA caching allocator.  It was vramscope's built-in example before
a real capture replaced it (goldens/h200/mlp_adam_fp32.pickle.gz, see
examples/README.md); it stays as an input of the C++ unit tests, which assert
the figures computed here.  It uses the Python standard library only, and its
output is byte-for-byte deterministic.

The pickle has the layout of ``torch.cuda.memory._dump_snapshot()`` from PyTorch
2.6 recorded with ``_record_memory_history(stacks="all")`` (mixed C++ and Python
frames): keys ``segments``, ``device_traces`` (device 0 only), ``allocator_settings``
and ``external_annotations``; pickle protocol 4.  As in real snapshots, identical
frames are one dict object and identical stacks one list object, so the pickle
stores each of them once (memo references).

The program it pretends to have recorded (``/home/user/mlp_example/train.py``;
the line numbers of the user frames refer to this listing)::

     1  \"\"\"Train a tiny MLP and dump a CUDA memory snapshot.\"\"\"
     2  import torch
     3  import torch.nn as nn
     4  import torch.nn.functional as F
     5
     6
     7  class MLP(nn.Module):
     8      def __init__(self, d_in=1024, d_hidden=4096, d_out=1024):
     9          super().__init__()
    10          self.fc1 = nn.Linear(d_in, d_hidden)
    11          self.act = nn.GELU()
    12          self.fc2 = nn.Linear(d_hidden, d_out)
    13
    14      def forward(self, x):
    15          h = self.fc1(x)
    16          h = self.act(h)
    17          return self.fc2(h)
    18
    19
    20  def train_step(model, optimizer, x_cpu, y_cpu):
    21      optimizer.zero_grad(set_to_none=True)
    22      x = x_cpu.to("cuda")
    23      y = y_cpu.to("cuda")
    24      out = model(x)
    25      loss = F.mse_loss(out, y)
    26      loss.backward()
    27      optimizer.step()
    28      return loss.item()
    29
    30
    31  def main():
    32      torch.manual_seed(0)
    33      model = MLP()
    34      torch.cuda.memory._record_memory_history(max_entries=100_000, stacks="all")
    35      model.to("cuda")
    36      optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    37      batches = [(torch.randn(64, 1024), torch.randn(64, 1024)) for _ in range(3)]
    38      for x_cpu, y_cpu in batches:
    39          train_step(model, optimizer, x_cpu, y_cpu)
    40      torch.cuda.memory._dump_snapshot("mlp_adam_step.pickle")
    41
    42
    43  if __name__ == "__main__":
    44      main()

What is modelled (fp32, 4 bytes per element, batch 64):
  * ``model.to("cuda")``: fc1.weight [4096,1024], fc1.bias [4096], fc2.weight
    [1024,4096], fc2.bias [1024] (the trace starts before this).
  * per iteration: ``zero_grad(set_to_none=True)`` frees the previous gradients;
    x and y [64,1024] are copied to the GPU; forward allocates fc1's output (saved
    by GELU, which saves its input), GELU's output (saved by fc2, which saves its
    input; fc1 saves x), fc2's output, the unreduced MSE temporary (freed at once)
    and the scalar loss.  The first forward matmul allocates a cuBLAS workspace
    (8,519,680 B, the ``:4096:2:16:8`` default of a non-sm_90 GPU) that is kept.
  * backward: the grad seed (``ones_like(loss)``) on the Python thread, then on the
    autograd engine's thread (C++-only stacks, as in real snapshots): the gradient
    of the output, the gradients of the activations (temporaries), a second cuBLAS
    workspace at the first backward matmul (the autograd thread has its own cuBLAS
    handle), the weight gradients (allocated by the ``mm`` of AddmmBackward0 and
    stolen by AccumulateGrad) and the bias gradients (``sum_to`` in
    ``validate_outputs``); saved activations are freed as their nodes finish.
  * ``Adam.step()`` (foreach implementation): at the first step exp_avg and
    exp_avg_sq for every parameter (kept); at every step the ``_foreach_sqrt``
    temporaries (one per parameter), freed when ``_multi_tensor_adam`` returns.
  * at the end of each step the locals x, y, out and loss are released.

Allocator model (a simplification of c10/cuda/CUDACachingAllocator.cpp, with no
``PYTORCH_CUDA_ALLOC_CONF`` options): requests are rounded up to a multiple of 512 B
(minimum 512); a rounded size <= 1 MiB goes to the small pool, larger ones to the
large pool; best fit among the cached free blocks of that pool (smallest size,
then lowest address); if none fits a new segment is cudaMalloc'ed (small pool:
2 MiB; large pool: 20 MiB for requests < 10 MiB, else the request rounded up to
2 MiB); a block is split when the remainder is >= 512 B (small pool) or > 1 MiB
(large pool), the allocation taking the low address; a freed block merges with
free neighbours; segments are never released.  Like PyTorch, a free block keeps
the requested size of its last use but drops its frames, and a segment reports
the stack of its cudaMalloc only while its first block was never split.

Run:  python3 examples/make_example_snapshot.py [-o PATH]
"""

from __future__ import annotations

import argparse
import collections
import os
import pickle
import random
import sys

# --------------------------------------------------------------------------- constants

KB = 1024
MB = 1024 * 1024
K_MIN_BLOCK = 512
K_SMALL_SIZE = 1 * MB
K_SMALL_BUFFER = 2 * MB
K_MIN_LARGE_ALLOC = 10 * MB
K_LARGE_BUFFER = 20 * MB
K_ROUND_LARGE = 2 * MB

FP32 = 4
BATCH, D_IN, D_HIDDEN, D_OUT = 64, 1024, 4096, 1024
ITERATIONS = 3
CUBLAS_WORKSPACE = 4096 * KB * 2 + 16 * KB * 8  # ":4096:2:16:8" = 8,519,680 B

SEGMENT_BASE = 0x7F3A_2000_0000
T0_US = 1_739_901_645_118_204  # 2025-02-18, a few weeks after the torch 2.6 release
SEED = 20250218

TRAIN = "/home/user/mlp_example/train.py"
SITE = "/usr/lib/python3.11/site-packages/torch/"
MODULE = SITE + "nn/modules/module.py"
LINEAR = SITE + "nn/modules/linear.py"
ACTIVATION = SITE + "nn/modules/activation.py"
FUNCTIONAL = SITE + "nn/functional.py"
TENSOR = SITE + "_tensor.py"
AUTOGRAD = SITE + "autograd/__init__.py"
GRAPH = SITE + "autograd/graph.py"
ADAM = SITE + "optim/adam.py"
OPTIMIZER = SITE + "optim/optimizer.py"
EVAL_FRAME = SITE + "_dynamo/eval_frame.py"
COMPILE = SITE + "_compile.py"

DEFAULT_OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                           "synthetic_mlp_adam_step.pickle")

# --------------------------------------------------------------------------- frames and stacks

_frame_memo: dict[tuple[str, str, int], dict] = {}
_stack_memo: dict[tuple[int, ...], list] = {}


def fr(name: str, filename: str = "??", line: int = 0) -> dict:
    """One frame dict; identical frames are the same object (pickle memoizes them)."""
    key = (name, filename, line)
    f = _frame_memo.get(key)
    if f is None:
        f = {"name": name, "filename": filename, "line": line}
        _frame_memo[key] = f
    return f


def cpp(*items) -> list:
    """C++ frames; an item is a name (filename '??') or a (name, filename) pair."""
    out = []
    for it in items:
        if isinstance(it, tuple):
            out.append(fr(it[0], it[1], 0))
        else:
            out.append(fr(it, "??", 0))
    return out


def stack(*parts: list) -> list:
    """Concatenate frame lists innermost first; identical stacks are the same list object."""
    frames = [f for p in parts for f in p]
    key = tuple(id(f) for f in frames)
    s = _stack_memo.get(key)
    if s is None:
        s = frames
        _stack_memo[key] = s
    return s


# How a Python frame was called by its caller: the CPython frames between them.
PLAIN = ("_PyEval_EvalFrameDefault", "_PyFunction_Vectorcall")
EX = ("_PyEval_EvalFrameDefault", "_PyFunction_Vectorcall", "PyObject_Call")
SLOT = ("_PyEval_EvalFrameDefault", "_PyObject_Call_Prepend", "slot_tp_call",
        "_PyObject_MakeTpCall")
TOP = ("_PyEval_EvalFrameDefault",)


def py(*calls) -> list:
    """Python frames innermost first: (function, file, line, glue) tuples."""
    out = []
    for name, filename, line, glue in calls:
        out.append(fr(name, filename, line))
        out.extend(fr(g) for g in glue)
    return out


def wrap(reg: str, fn: str, ret: str, args: str, ks: bool = False) -> tuple:
    """A c10 unboxed kernel-wrapper frame, as demangled in real stacks."""
    fargs = ("c10::DispatchKeySet, " + args) if ks else args
    name = (f"c10::impl::wrap_kernel_functor_unboxed_<c10::impl::detail::WrapFunctionIntoFunctor_<"
            f"c10::CompileTimeFunctionPointer<{ret} ({fargs}), &{fn}>, {ret}, "
            f"c10::guts::typelist::typelist<{fargs}> >, {ret} ({fargs})>::call("
            f"c10::OperatorKernel*, c10::DispatchKeySet, {args})")
    return (name, reg)


OPT = "std::optional"
EMPTY_STRIDED_ARGS = (f"c10::ArrayRef<c10::SymInt>, c10::ArrayRef<c10::SymInt>, {OPT}<c10::ScalarType>, "
                      f"{OPT}<c10::Layout>, {OPT}<c10::Device>, {OPT}<bool>")
LIKE_ARGS = (f"at::Tensor const&, {OPT}<c10::ScalarType>, {OPT}<c10::Layout>, {OPT}<c10::Device>, "
             f"{OPT}<bool>, {OPT}<c10::MemoryFormat>")
ADDMM_ARGS = "at::Tensor const&, at::Tensor const&, at::Tensor const&, c10::Scalar const&, c10::Scalar const&"
VEC = "std::vector<at::Tensor, std::allocator<at::Tensor> >"

# -- innermost part of every allocation / free stack (torch 2.6, stacks="all")
MALLOC = cpp(
    "torch::unwind::unwind()",
    "torch::CapturedTraceback::gather(bool, bool, bool)",
    ("torch::cuda::(anonymous namespace)::gather_with_cpp()", "memory_snapshot.cpp"),
    ("c10::cuda::CUDACachingAllocator::Native::DeviceCachingAllocator::malloc(signed char, unsigned long, CUstream_st*)",
     "CUDACachingAllocator.cpp"),
    ("c10::cuda::CUDACachingAllocator::Native::NativeCachingAllocator::malloc(void**, signed char, unsigned long, CUstream_st*)", ""),
    ("c10::cuda::CUDACachingAllocator::Native::NativeCachingAllocator::allocate(unsigned long)", ""),
)
FREE = cpp(
    "torch::unwind::unwind()",
    "torch::CapturedTraceback::gather(bool, bool, bool)",
    ("torch::cuda::(anonymous namespace)::gather_with_cpp()", "memory_snapshot.cpp"),
    ("c10::cuda::CUDACachingAllocator::Native::DeviceCachingAllocator::free(c10::cuda::CUDACachingAllocator::Native::(anonymous namespace)::Block*)",
     "CUDACachingAllocator.cpp"),
    ("c10::cuda::CUDACachingAllocator::Native::local_raw_delete(void*)", ""),
    ("c10::StorageImpl::~StorageImpl()", ""),
    ("c10::intrusive_ptr<c10::StorageImpl, c10::detail::intrusive_target_default_null_type<c10::StorageImpl> >::reset_()", ""),
    "c10::TensorImpl::~TensorImpl()",
    ("c10::TensorImpl::~TensorImpl() [clone .localalias]", "TensorImpl.cpp"),
)
PY_DEALLOC = cpp(("THPVariable_subclass_clear(THPVariable*)", "python_variable.cpp"),
                 "THPVariable_subclass_dealloc(_object*)")
CPP_DEALLOC = cpp(("c10::intrusive_ptr<c10::TensorImpl, c10::UndefinedTensorImpl>::reset_()", ""))

# -- tensor factories
EMPTY_STRIDED = cpp(
    ("at::TensorBase at::detail::_empty_strided_generic<c10::ArrayRef<long> >(c10::ArrayRef<long>, c10::ArrayRef<long>, "
     "c10::Allocator*, c10::DispatchKeySet, c10::ScalarType)", ""),
    "at::detail::empty_strided_generic(c10::ArrayRef<long>, c10::ArrayRef<long>, c10::Allocator*, c10::DispatchKeySet, c10::ScalarType)",
    f"at::detail::empty_strided_cuda(c10::ArrayRef<long>, c10::ArrayRef<long>, c10::ScalarType, {OPT}<c10::Device>)",
    f"at::detail::empty_strided_cuda(c10::ArrayRef<long>, c10::ArrayRef<long>, {OPT}<c10::ScalarType>, {OPT}<c10::Layout>, "
    f"{OPT}<c10::Device>, {OPT}<bool>)",
    f"at::native::empty_strided_cuda(c10::ArrayRef<long>, c10::ArrayRef<long>, {OPT}<c10::ScalarType>, {OPT}<c10::Layout>, "
    f"{OPT}<c10::Device>, {OPT}<bool>)",
    (f"at::(anonymous namespace)::(anonymous namespace)::wrapper_CUDA__empty_strided({EMPTY_STRIDED_ARGS})", "RegisterCUDA.cpp"),
    wrap("RegisterCUDA.cpp", "at::(anonymous namespace)::(anonymous namespace)::wrapper_CUDA__empty_strided",
         "at::Tensor", EMPTY_STRIDED_ARGS),
    f"at::_ops::empty_strided::redispatch(c10::DispatchKeySet, {EMPTY_STRIDED_ARGS})",
    wrap("RegisterBackendSelect.cpp", "at::(anonymous namespace)::empty_strided", "at::Tensor", EMPTY_STRIDED_ARGS),
    f"at::_ops::empty_strided::call({EMPTY_STRIDED_ARGS})",
)
EMPTY_LIKE = cpp(
    f"at::native::empty_like({LIKE_ARGS})",
    wrap("RegisterCompositeExplicitAutograd.cpp",
         "at::(anonymous namespace)::(anonymous namespace)::wrapper_CompositeExplicitAutograd__empty_like",
         "at::Tensor", LIKE_ARGS),
    f"at::_ops::empty_like::call({LIKE_ARGS})",
)


def empty_cuda(structured: str, meta: list) -> list:
    """Output of a structured op: create_out() from set_output_raw_strided() of ``structured``."""
    return cpp(
        (f"at::TensorBase at::detail::_empty_generic<long>(c10::ArrayRef<long>, c10::Allocator*, c10::DispatchKeySet, "
         f"c10::ScalarType, {OPT}<c10::MemoryFormat>)", ""),
        f"at::detail::empty_generic(c10::ArrayRef<long>, c10::Allocator*, c10::DispatchKeySet, c10::ScalarType, "
        f"{OPT}<c10::MemoryFormat>)",
        f"at::detail::empty_cuda(c10::ArrayRef<long>, c10::ScalarType, {OPT}<c10::Device>, {OPT}<c10::MemoryFormat>)",
        f"at::detail::empty_cuda(c10::ArrayRef<long>, {OPT}<c10::ScalarType>, {OPT}<c10::Layout>, {OPT}<c10::Device>, "
        f"{OPT}<bool>, {OPT}<c10::MemoryFormat>)",
        "at::detail::empty_cuda(c10::ArrayRef<long>, c10::TensorOptions const&)",
        ("at::(anonymous namespace)::create_out(c10::ArrayRef<long>, c10::ArrayRef<long>, c10::TensorOptions const&)",
         "RegisterCUDA.cpp"),
        (f"at::(anonymous namespace)::{structured}::set_output_raw_strided(long, c10::ArrayRef<long>, c10::ArrayRef<long>, "
         f"c10::TensorOptions, c10::ArrayRef<at::Dimname>)", "RegisterCUDA.cpp"),
    ) + meta


# -- Tensor.to("cuda")
TO_ARGS = (f"at::Tensor const&, {OPT}<c10::ScalarType>, {OPT}<c10::Layout>, {OPT}<c10::Device>, {OPT}<bool>, bool, "
           f"{OPT}<c10::MemoryFormat>")
TO_CUDA = cpp(
    "at::empty_strided(c10::ArrayRef<long>, c10::ArrayRef<long>, c10::TensorOptions)",
    f"at::native::_to_copy({TO_ARGS})",
    wrap("RegisterCompositeExplicitAutograd.cpp",
         "at::(anonymous namespace)::(anonymous namespace)::wrapper_CompositeExplicitAutograd___to_copy",
         "at::Tensor", TO_ARGS),
    f"at::_ops::_to_copy::redispatch(c10::DispatchKeySet, {TO_ARGS})",
    (f"torch::autograd::VariableType::(anonymous namespace)::_to_copy(c10::DispatchKeySet, {TO_ARGS})", "VariableType_0.cpp"),
    wrap("VariableType_0.cpp", "torch::autograd::VariableType::(anonymous namespace)::_to_copy", "at::Tensor", TO_ARGS, ks=True),
    f"at::_ops::_to_copy::call({TO_ARGS})",
    f"at::native::to(at::Tensor const&, {OPT}<c10::ScalarType>, {OPT}<c10::Layout>, {OPT}<c10::Device>, {OPT}<bool>, "
    f"bool, bool, {OPT}<c10::MemoryFormat>)",
    f"at::_ops::to_dtype_layout::call(at::Tensor const&, {OPT}<c10::ScalarType>, {OPT}<c10::Layout>, {OPT}<c10::Device>, "
    f"{OPT}<bool>, bool, bool, {OPT}<c10::MemoryFormat>)",
    f"torch::autograd::dispatch_to(at::Tensor const&, c10::Device, bool, bool, {OPT}<c10::MemoryFormat>)",
    ("torch::autograd::THPVariable_to(_object*, _object*, _object*)", "python_variable_methods.cpp"),
    "method_vectorcall_VARARGS_KEYWORDS",
)

# -- F.linear -> addmm
ADDMM_CALL = cpp(
    (f"at::(anonymous namespace)::wrapper_CUDA_addmm({ADDMM_ARGS})", "RegisterCUDA.cpp"),
    wrap("RegisterCUDA.cpp", "at::(anonymous namespace)::wrapper_CUDA_addmm", "at::Tensor", ADDMM_ARGS),
    f"at::_ops::addmm::redispatch(c10::DispatchKeySet, {ADDMM_ARGS})",
    (f"torch::autograd::VariableType::(anonymous namespace)::addmm(c10::DispatchKeySet, {ADDMM_ARGS})", "VariableType_0.cpp"),
    wrap("VariableType_0.cpp", "torch::autograd::VariableType::(anonymous namespace)::addmm", "at::Tensor", ADDMM_ARGS, ks=True),
    f"at::_ops::addmm::call({ADDMM_ARGS})",
    f"at::native::linear(at::Tensor const&, at::Tensor const&, {OPT}<at::Tensor> const&)",
    wrap("RegisterCompositeImplicitAutograd.cpp",
         "at::(anonymous namespace)::(anonymous namespace)::wrapper_CompositeImplicitAutograd__linear",
         "at::Tensor", f"at::Tensor const&, at::Tensor const&, {OPT}<at::Tensor> const&"),
    f"at::_ops::linear::call(at::Tensor const&, at::Tensor const&, {OPT}<at::Tensor> const&)",
    ("torch::autograd::THPVariable_linear(_object*, _object*, _object*)", "python_nn_functions.cpp"),
    "cfunction_call",
    "_PyObject_MakeTpCall",
)
ADDMM_OUT = empty_cuda("structured_addmm_out_cuda_functional",
                       cpp(f"at::meta::structured_addmm::meta({ADDMM_ARGS})")) + ADDMM_CALL
GEMM_WORKSPACE = cpp(
    ("at::cuda::getNewWorkspace()", ""),
    "at::cuda::getCurrentCUDABlasHandle()",
    ("void at::cuda::blas::gemm<float>(char, char, long, long, long, at::OpMathType<float>::type, float const*, long, "
     "float const*, long, at::OpMathType<float>::type, float*, long)", ""),
    ("at::native::(anonymous namespace)::addmm_out_cuda_impl(at::Tensor&, at::Tensor const&, at::Tensor const&, "
     "at::Tensor const&, c10::Scalar const&, c10::Scalar const&, at::native::(anonymous namespace)::Activation)", "Blas.cpp"),
)
ADDMM_WORKSPACE = GEMM_WORKSPACE + cpp(
    f"at::native::structured_addmm_out_cuda::impl({ADDMM_ARGS}, at::Tensor const&)") + ADDMM_CALL

# -- F.gelu
GELU_ARGS = "at::Tensor const&, c10::basic_string_view<char>"
GELU_OUT = empty_cuda("structured_gelu_out_functional", cpp(
    "at::TensorIteratorBase::fast_set_up(at::TensorIteratorConfig const&)",
    "at::TensorIteratorBase::build(at::TensorIteratorConfig&)",
    "at::TensorIteratorBase::build_borrowing_unary_op(at::TensorBase const&, at::TensorBase const&)",
    f"at::meta::structured_gelu::meta({GELU_ARGS})",
    (f"at::(anonymous namespace)::wrapper_CUDA_gelu({GELU_ARGS})", "RegisterCUDA.cpp"),
    wrap("RegisterCUDA.cpp", "at::(anonymous namespace)::wrapper_CUDA_gelu", "at::Tensor", GELU_ARGS),
    f"at::_ops::gelu::redispatch(c10::DispatchKeySet, {GELU_ARGS})",
    (f"torch::autograd::VariableType::(anonymous namespace)::gelu(c10::DispatchKeySet, {GELU_ARGS})", "VariableType_1.cpp"),
    wrap("VariableType_1.cpp", "torch::autograd::VariableType::(anonymous namespace)::gelu", "at::Tensor", GELU_ARGS, ks=True),
    f"at::_ops::gelu::call({GELU_ARGS})",
    ("torch::autograd::THPVariable_gelu(_object*, _object*, _object*)", "python_nn_functions.cpp"),
    "cfunction_call",
    "_PyObject_MakeTpCall",
))

# -- F.mse_loss (reduction="mean"): unreduced temporary, then mean()
MSE_ARGS = "at::Tensor const&, at::Tensor const&, long"
MSE_CALL = cpp(
    f"at::native::mse_loss({MSE_ARGS})",
    wrap("RegisterCompositeExplicitAutograd.cpp",
         "at::(anonymous namespace)::(anonymous namespace)::wrapper_CompositeExplicitAutograd__mse_loss", "at::Tensor", MSE_ARGS),
    f"at::_ops::mse_loss::redispatch(c10::DispatchKeySet, {MSE_ARGS})",
    (f"torch::autograd::VariableType::(anonymous namespace)::mse_loss(c10::DispatchKeySet, {MSE_ARGS})", "VariableType_2.cpp"),
    wrap("VariableType_2.cpp", "torch::autograd::VariableType::(anonymous namespace)::mse_loss", "at::Tensor", MSE_ARGS, ks=True),
    f"at::_ops::mse_loss::call({MSE_ARGS})",
    ("torch::autograd::THPVariable_mse_loss(_object*, _object*, _object*)", "python_nn_functions.cpp"),
    "cfunction_call",
    "_PyObject_MakeTpCall",
)
MSE_TMP = EMPTY_STRIDED + cpp(
    "at::TensorIteratorBase::set_output_raw_strided(long, c10::ArrayRef<long>, c10::ArrayRef<long>, c10::TensorOptions, "
    "c10::ArrayRef<at::Dimname>)",
    "at::TensorIteratorBase::allocate_or_resize_outputs()",
    "at::TensorIteratorBase::build(at::TensorIteratorConfig&)",
    "at::TensorIterator::borrowing_binary_op(at::TensorBase const&, at::TensorBase const&, at::TensorBase const&)",
) + MSE_CALL
MEAN_DIM_ARGS = f"at::Tensor const&, c10::OptionalArrayRef<long>, bool, {OPT}<c10::ScalarType>"
MSE_MEAN = empty_cuda("structured_mean_out_functional", cpp(
    (f"at::meta::resize_reduction(at::impl::MetaBase&, at::Tensor const&, c10::OptionalArrayRef<long>, bool, "
     f"c10::ScalarType, bool)", "ReduceOps.cpp"),
    f"at::meta::structured_mean_dim::meta({MEAN_DIM_ARGS})",
    (f"at::(anonymous namespace)::wrapper_CUDA_mean_dim({MEAN_DIM_ARGS})", "RegisterCUDA.cpp"),
    wrap("RegisterCUDA.cpp", "at::(anonymous namespace)::wrapper_CUDA_mean_dim", "at::Tensor", MEAN_DIM_ARGS),
    f"at::_ops::mean_dim::call({MEAN_DIM_ARGS})",
    f"at::native::mean(at::Tensor const&, {OPT}<c10::ScalarType>)",
    f"at::_ops::mean::call(at::Tensor const&, {OPT}<c10::ScalarType>)",
    "at::native::apply_loss_reduction(at::Tensor const&, long)",
)) + MSE_CALL

# -- autograd engine thread (backward runs here; no Python frames)
ENGINE = cpp(
    (f"torch::autograd::Node::operator()({VEC}&&)", ""),
    "torch::autograd::Engine::evaluate_function(std::shared_ptr<torch::autograd::GraphTask>&, torch::autograd::Node*, "
    "torch::autograd::InputBuffer&, std::shared_ptr<torch::autograd::ReadyQueue> const&)",
    "torch::autograd::Engine::thread_main(std::shared_ptr<torch::autograd::GraphTask> const&)",
    "torch::autograd::Engine::thread_init(int, std::shared_ptr<torch::autograd::ReadyQueue> const&, bool)",
    "torch::autograd::python::PythonEngine::thread_init(int, std::shared_ptr<torch::autograd::ReadyQueue> const&, bool)",
    "execute_native_thread_routine",
    "start_thread",
    ("__clone3", ""),
)
ENGINE_EVAL = ENGINE[1:]  # frames below Node::operator()


def node_apply(node: str) -> list:
    return cpp(f"torch::autograd::generated::{node}::apply({VEC}&&)") + ENGINE


MM_ARGS = "at::Tensor const&, at::Tensor const&"
MM_CALL = cpp(
    (f"at::(anonymous namespace)::wrapper_CUDA_mm({MM_ARGS})", "RegisterCUDA.cpp"),
    wrap("RegisterCUDA.cpp", "at::(anonymous namespace)::wrapper_CUDA_mm", "at::Tensor", MM_ARGS),
    f"at::_ops::mm::redispatch(c10::DispatchKeySet, {MM_ARGS})",
    (f"torch::autograd::VariableType::(anonymous namespace)::mm(c10::DispatchKeySet, {MM_ARGS})", "VariableType_3.cpp"),
    wrap("VariableType_3.cpp", "torch::autograd::VariableType::(anonymous namespace)::mm", "at::Tensor", MM_ARGS, ks=True),
    f"at::_ops::mm::call({MM_ARGS})",
)
MAT_BW_ARGS = ("at::Tensor const&, at::Tensor const&, c10::ArrayRef<c10::SymInt>, c10::ArrayRef<c10::SymInt>, "
               "c10::Layout, c10::Scalar const&")
MM_MAT1 = cpp((f"torch::autograd::generated::details::mm_mat1_backward({MAT_BW_ARGS})", "")) + node_apply("AddmmBackward0")
MM_MAT2 = cpp((f"torch::autograd::generated::details::mm_mat2_backward({MAT_BW_ARGS})", "")) + node_apply("AddmmBackward0")
MM_OUT = empty_cuda("structured_mm_out_cuda_functional", cpp(f"at::meta::structured_mm::meta({MM_ARGS})")) + MM_CALL
MM_WORKSPACE = GEMM_WORKSPACE + cpp(
    f"at::native::structured_mm_out_cuda::impl({MM_ARGS}, at::Tensor const&)") + MM_CALL

GELU_BW_ARGS = "at::Tensor const&, at::Tensor const&, c10::basic_string_view<char>"
GELU_BW_OUT = empty_cuda("structured_gelu_backward_out_functional", cpp(
    "at::TensorIteratorBase::fast_set_up(at::TensorIteratorConfig const&)",
    "at::TensorIteratorBase::build(at::TensorIteratorConfig&)",
    "at::TensorIteratorBase::build_borrowing_binary_op(at::TensorBase const&, at::TensorBase const&, at::TensorBase const&)",
    f"at::meta::structured_gelu_backward::meta({GELU_BW_ARGS})",
    (f"at::(anonymous namespace)::wrapper_CUDA_gelu_backward({GELU_BW_ARGS})", "RegisterCUDA.cpp"),
    wrap("RegisterCUDA.cpp", "at::(anonymous namespace)::wrapper_CUDA_gelu_backward", "at::Tensor", GELU_BW_ARGS),
    f"at::_ops::gelu_backward::redispatch(c10::DispatchKeySet, {GELU_BW_ARGS})",
    (f"torch::autograd::VariableType::(anonymous namespace)::gelu_backward(c10::DispatchKeySet, {GELU_BW_ARGS})",
     "VariableType_1.cpp"),
    wrap("VariableType_1.cpp", "torch::autograd::VariableType::(anonymous namespace)::gelu_backward", "at::Tensor",
         GELU_BW_ARGS, ks=True),
    f"at::_ops::gelu_backward::call({GELU_BW_ARGS})",
)) + node_apply("GeluBackward0")

MSE_BW_ARGS = "at::Tensor const&, at::Tensor const&, at::Tensor const&, long"
MSE_BW_OUT = EMPTY_STRIDED + EMPTY_LIKE + cpp(
    f"at::native::zeros_like({LIKE_ARGS})",
    wrap("RegisterCompositeExplicitAutograd.cpp",
         "at::(anonymous namespace)::(anonymous namespace)::wrapper_CompositeExplicitAutograd__zeros_like", "at::Tensor", LIKE_ARGS),
    f"at::_ops::zeros_like::call({LIKE_ARGS})",
    f"at::native::mse_loss_backward({MSE_BW_ARGS})",
    wrap("RegisterCUDA.cpp", "at::(anonymous namespace)::(anonymous namespace)::wrapper_CUDA__mse_loss_backward",
         "at::Tensor", MSE_BW_ARGS),
    f"at::_ops::mse_loss_backward::redispatch(c10::DispatchKeySet, {MSE_BW_ARGS})",
    (f"torch::autograd::VariableType::(anonymous namespace)::mse_loss_backward(c10::DispatchKeySet, {MSE_BW_ARGS})",
     "VariableType_2.cpp"),
    wrap("VariableType_2.cpp", "torch::autograd::VariableType::(anonymous namespace)::mse_loss_backward", "at::Tensor",
         MSE_BW_ARGS, ks=True),
    f"at::_ops::mse_loss_backward::call({MSE_BW_ARGS})",
) + node_apply("MseLossBackward0")

SUM_ARGS = f"at::Tensor const&, c10::OptionalArrayRef<long>, bool, {OPT}<c10::ScalarType>"
BIAS_GRAD = empty_cuda("structured_sum_out_functional", cpp(
    (f"at::meta::resize_reduction(at::impl::MetaBase&, at::Tensor const&, c10::OptionalArrayRef<long>, bool, "
     f"c10::ScalarType, bool)", "ReduceOps.cpp"),
    f"at::meta::structured_sum_dim_IntList::meta({SUM_ARGS})",
    (f"at::(anonymous namespace)::wrapper_CUDA_sum_dim_IntList({SUM_ARGS})", "RegisterCUDA.cpp"),
    wrap("RegisterCUDA.cpp", "at::(anonymous namespace)::wrapper_CUDA_sum_dim_IntList", "at::Tensor", SUM_ARGS),
    f"at::_ops::sum_dim_IntList::redispatch(c10::DispatchKeySet, {SUM_ARGS})",
    (f"torch::autograd::VariableType::(anonymous namespace)::sum_dim_IntList(c10::DispatchKeySet, {SUM_ARGS})",
     "VariableType_2.cpp"),
    wrap("VariableType_2.cpp", "torch::autograd::VariableType::(anonymous namespace)::sum_dim_IntList", "at::Tensor",
         SUM_ARGS, ks=True),
    f"at::_ops::sum_dim_IntList::call({SUM_ARGS})",
    ("at::sum_to(at::Tensor, c10::ArrayRef<c10::SymInt>, bool)", ""),
    "torch::autograd::InputMetadata::reduce_grad(at::Tensor&) const",
    "torch::autograd::validate_outputs(std::vector<torch::autograd::Edge, std::allocator<torch::autograd::Edge> > const&, "
    f"{VEC}&, std::function<std::string (std::string const&)> const&)",
)) + ENGINE_EVAL

# frees on the engine thread
FREE_GRAD_INPUT = stack(FREE, CPP_DEALLOC, cpp(
    (f"{VEC}::~vector()", ""),
    "torch::autograd::call_function(std::shared_ptr<torch::autograd::GraphTask>&, torch::autograd::Node*, "
    "torch::autograd::InputBuffer&)",
), ENGINE_EVAL)


def free_saved(node: str) -> list:
    return stack(FREE, cpp("torch::autograd::SavedVariable::reset_data()",
                           (f"torch::autograd::generated::{node}::release_variables()", "")), ENGINE_EVAL)


# -- Adam (foreach): state and step temporaries
FOREACH_SQRT = EMPTY_STRIDED + cpp(
    f"at::native::empty_like({LIKE_ARGS})",
    f"{VEC} at::native::foreach_tensor_sqrt_cuda(c10::ArrayRef<at::Tensor>)",
    ("at::(anonymous namespace)::(anonymous namespace)::wrapper_CUDA___foreach_sqrt(c10::ArrayRef<at::Tensor>)",
     "RegisterCUDA.cpp"),
    wrap("RegisterCUDA.cpp", "at::(anonymous namespace)::(anonymous namespace)::wrapper_CUDA___foreach_sqrt", VEC,
         "c10::ArrayRef<at::Tensor>"),
    "at::_ops::_foreach_sqrt::redispatch(c10::DispatchKeySet, c10::ArrayRef<at::Tensor>)",
    ("torch::autograd::VariableType::(anonymous namespace)::_foreach_sqrt(c10::DispatchKeySet, c10::ArrayRef<at::Tensor>)",
     "VariableType_2.cpp"),
    wrap("VariableType_2.cpp", "torch::autograd::VariableType::(anonymous namespace)::_foreach_sqrt", VEC,
         "c10::ArrayRef<at::Tensor>", ks=True),
    "at::_ops::_foreach_sqrt::call(c10::ArrayRef<at::Tensor>)",
    ("torch::autograd::THPVariable__foreach_sqrt(_object*, _object*, _object*)", "python_torch_functions_1.cpp"),
    "cfunction_call",
    "_PyObject_MakeTpCall",
)
ZEROS_LIKE = EMPTY_STRIDED + EMPTY_LIKE + cpp(
    f"at::native::zeros_like({LIKE_ARGS})",
    wrap("RegisterCompositeExplicitAutograd.cpp",
         "at::(anonymous namespace)::(anonymous namespace)::wrapper_CompositeExplicitAutograd__zeros_like", "at::Tensor", LIKE_ARGS),
    f"at::_ops::zeros_like::call({LIKE_ARGS})",
    ("torch::autograd::THPVariable_zeros_like(_object*, _object*, _object*)", "python_torch_functions_2.cpp"),
    "cfunction_call",
    "_PyObject_MakeTpCall",
)
ONES_LIKE = EMPTY_STRIDED + EMPTY_LIKE + cpp(
    f"at::native::ones_like({LIKE_ARGS})",
    wrap("RegisterCompositeExplicitAutograd.cpp",
         "at::(anonymous namespace)::(anonymous namespace)::wrapper_CompositeExplicitAutograd__ones_like", "at::Tensor", LIKE_ARGS),
    f"at::_ops::ones_like::call({LIKE_ARGS})",
    ("torch::autograd::THPVariable_ones_like(_object*, _object*, _object*)", "python_torch_functions_2.cpp"),
    "cfunction_call",
    "_PyObject_MakeTpCall",
)

# -- Python parts (innermost first) and the interpreter's own outermost frames
INTERPRETER = cpp("PyEval_EvalCode", "run_eval_code_obj", "run_mod", "pyrun_file", "_PyRun_SimpleFileObject",
                  "_PyRun_AnyFileObject", "pymain_run_file_obj", "pymain_run_file", "Py_RunMain", "pymain_main",
                  "Py_BytesMain", "__libc_start_call_main", "__libc_start_main_impl", "_start")
PY_MAIN_TO = py(("main", TRAIN, 35, PLAIN), ("<module>", TRAIN, 44, TOP)) + INTERPRETER
PY_MAIN_LOOP = py(("main", TRAIN, 39, PLAIN), ("<module>", TRAIN, 44, TOP)) + INTERPRETER


def py_step(line: int) -> list:
    return py(("train_step", TRAIN, line, PLAIN)) + PY_MAIN_LOOP


def py_module_call(inner: list, outer: list) -> list:
    """``inner`` (a module's forward) called through nn.Module.__call__ from ``outer``."""
    return inner + py(("_call_impl", MODULE, 1750, EX), ("_wrapped_call_impl", MODULE, 1739, SLOT)) + outer


PY_MODEL = lambda line: py_module_call(py(("forward", TRAIN, line, EX)), py_step(24))  # noqa: E731
PY_FC1 = py_module_call(py(("forward", LINEAR, 125, EX)), PY_MODEL(15))
PY_GELU = py_module_call(py(("forward", ACTIVATION, 734, EX)), PY_MODEL(16))
PY_FC2 = py_module_call(py(("forward", LINEAR, 125, EX)), PY_MODEL(17))
PY_MSE = py(("mse_loss", FUNCTIONAL, 3884, PLAIN)) + py_step(25)
PY_MODEL_TO = py(("convert", MODULE, 1329, PLAIN), ("_apply", MODULE, 927, PLAIN), ("_apply", MODULE, 900, PLAIN),
                 ("to", MODULE, 1343, PLAIN)) + PY_MAIN_TO
PY_BACKWARD = py(("backward", AUTOGRAD, 347, PLAIN), ("backward", TENSOR, 626, PLAIN)) + py_step(26)
PY_MAKE_GRADS = py(("_make_grads", AUTOGRAD, 220, PLAIN)) + PY_BACKWARD
PY_OPT_STEP = py(("_use_grad", OPTIMIZER, 79, EX), ("wrapper", OPTIMIZER, 493, EX)) + py_step(27)
PY_ADAM_ADAM = py(("adam", ADAM, 933, EX), ("maybe_fallback", OPTIMIZER, 154, EX), ("step", ADAM, 247, PLAIN)) + PY_OPT_STEP
PY_FOREACH = py(("_multi_tensor_adam", ADAM, 670, PLAIN)) + PY_ADAM_ADAM
PY_INIT_GROUP = lambda line: py(("_init_group", ADAM, line, PLAIN), ("step", ADAM, 232, PLAIN)) + PY_OPT_STEP  # noqa: E731
PY_ZERO_GRAD = py(("zero_grad", OPTIMIZER, 987, PLAIN), ("_fn", EVAL_FRAME, 745, EX),
                  ("inner", COMPILE, 32, PLAIN)) + py_step(21)

# -- the finished stacks
S_MODEL_TO = stack(MALLOC, EMPTY_STRIDED, TO_CUDA, PY_MODEL_TO)
S_X_TO = stack(MALLOC, EMPTY_STRIDED, TO_CUDA, py_step(22))
S_Y_TO = stack(MALLOC, EMPTY_STRIDED, TO_CUDA, py_step(23))
S_FC1_OUT = stack(MALLOC, ADDMM_OUT, PY_FC1)
S_FC1_WS = stack(MALLOC, ADDMM_WORKSPACE, PY_FC1)
S_GELU_OUT = stack(MALLOC, GELU_OUT, PY_GELU)
S_FC2_OUT = stack(MALLOC, ADDMM_OUT, PY_FC2)
S_MSE_TMP = stack(MALLOC, MSE_TMP, PY_MSE)
S_MSE_MEAN = stack(MALLOC, MSE_MEAN, PY_MSE)
F_MSE_TMP = stack(FREE, CPP_DEALLOC, MSE_CALL, PY_MSE)
S_SEED = stack(MALLOC, ONES_LIKE, PY_MAKE_GRADS)
F_SEED = stack(FREE, PY_DEALLOC, cpp("tupledealloc"), PY_BACKWARD)
S_MSE_BW = stack(MALLOC, MSE_BW_OUT)
S_MM_MAT1 = stack(MALLOC, MM_OUT, MM_MAT1)
S_MM_MAT1_WS = stack(MALLOC, MM_WORKSPACE, MM_MAT1)
S_MM_MAT2 = stack(MALLOC, MM_OUT, MM_MAT2)
S_BIAS_GRAD = stack(MALLOC, BIAS_GRAD)
S_GELU_BW = stack(MALLOC, GELU_BW_OUT)
F_GRAD_INPUT = FREE_GRAD_INPUT
F_SAVED_ADDMM = free_saved("AddmmBackward0")
F_SAVED_GELU = free_saved("GeluBackward0")
S_EXP_AVG = stack(MALLOC, ZEROS_LIKE, PY_INIT_GROUP(166))
S_EXP_AVG_SQ = stack(MALLOC, ZEROS_LIKE, PY_INIT_GROUP(170))
S_FOREACH_SQRT = stack(MALLOC, FOREACH_SQRT, PY_FOREACH)
F_FOREACH_TMP = stack(FREE, PY_DEALLOC, cpp("list_dealloc", "_PyFrame_Clear", "_PyEvalFrameClearAndPop"), PY_ADAM_ADAM)
F_ZERO_GRAD = stack(FREE, cpp("torch::autograd::THPVariable_set_grad(THPVariable*, _object*, void*)",
                              "_PyObject_GenericSetAttrWithDict", "PyObject_SetAttr"), PY_ZERO_GRAD)
F_STEP_LOCALS = stack(FREE, PY_DEALLOC, cpp("_PyFrame_Clear", "_PyEvalFrameClearAndPop"), PY_MAIN_LOOP)

# --------------------------------------------------------------------------- allocator model


def round_size(size: int) -> int:
    if size < K_MIN_BLOCK:
        return K_MIN_BLOCK
    return (size + K_MIN_BLOCK - 1) // K_MIN_BLOCK * K_MIN_BLOCK


def segment_size(rounded: int) -> int:
    if rounded <= K_SMALL_SIZE:
        return K_SMALL_BUFFER
    if rounded < K_MIN_LARGE_ALLOC:
        return K_LARGE_BUFFER
    return (rounded + K_ROUND_LARGE - 1) // K_ROUND_LARGE * K_ROUND_LARGE


class Block:
    """One allocator block.  Object identity matters, as in PyTorch: a split keeps
    the old object as the (higher) remainder, a merge keeps the freed block."""
    __slots__ = ("addr", "size", "requested", "allocated", "frames", "seg_frames", "segment")

    def __init__(self, addr, size, segment):
        self.addr = addr
        self.size = size
        self.requested = 0
        self.allocated = False
        self.frames = []
        self.seg_frames = []  # context_when_segment_allocated
        self.segment = segment


class Segment:
    __slots__ = ("addr", "size", "pool", "blocks")

    def __init__(self, addr, size, pool):
        self.addr = addr
        self.size = size
        self.pool = pool
        self.blocks: list[Block] = []


class Clock:
    def __init__(self, rng: random.Random):
        self.t = T0_US
        self.rng = rng

    def advance(self, lo: int, hi: int | None = None) -> int:
        self.t += lo if hi is None else self.rng.randint(lo, hi)
        return self.t


class Allocator:
    def __init__(self, clock: Clock, rng: random.Random):
        self.clock = clock
        self.rng = rng
        self.segments: list[Segment] = []
        self.live: dict[int, Block] = {}
        self.trace: list[dict] = []
        self.next_addr = SEGMENT_BASE
        self.allocated_rounded = 0
        self.peak_rounded = 0

    def _new_segment(self, size: int, pool: str) -> Segment:
        addr = self.next_addr
        seg = Segment(addr, size, pool)
        self.segments.append(seg)
        # the next cudaMalloc lands above this one, sometimes after a hole (2 MiB aligned)
        gap = self.rng.choice((0, 0, 0, 2 * MB, 4 * MB, 32 * MB))
        self.next_addr = (addr + size + gap + K_ROUND_LARGE - 1) // K_ROUND_LARGE * K_ROUND_LARGE
        return seg

    def malloc(self, size: int, frames: list) -> int:
        rounded = round_size(size)
        pool = "small" if rounded <= K_SMALL_SIZE else "large"
        best = None
        for seg in self.segments:
            if seg.pool != pool:
                continue
            for b in seg.blocks:
                if not b.allocated and b.size >= rounded:
                    if best is None or (b.size, b.addr) < (best.size, best.addr):
                        best = b
        t = self.clock.advance(2, 40)
        if best is None:
            seg_bytes = segment_size(rounded)
            seg = self._new_segment(seg_bytes, pool)
            best = Block(seg.addr, seg_bytes, seg)
            best.seg_frames = frames
            seg.blocks.append(best)
            self.trace.append({"action": "segment_alloc", "addr": seg.addr, "size": seg_bytes, "stream": 0,
                               "time_us": t, "frames": frames})
            t = self.clock.advance(0, 1)
        remaining = best.size - rounded
        split = remaining >= K_MIN_BLOCK if pool == "small" else remaining > K_SMALL_SIZE
        block = best
        if split:
            seg = best.segment
            block = Block(best.addr, rounded, seg)  # a new Block object takes the low address
            best.addr += rounded
            best.size -= rounded
            seg.blocks.insert(seg.blocks.index(best), block)
        block.allocated = True
        block.requested = size
        block.frames = frames
        self.live[block.addr] = block
        self.allocated_rounded += rounded
        self.peak_rounded = max(self.peak_rounded, self.allocated_rounded)
        self.trace.append({"action": "alloc", "addr": block.addr, "size": size, "stream": 0, "time_us": t,
                           "frames": frames})
        return block.addr

    def free(self, addr: int, frames: list) -> None:
        block = self.live.pop(addr)
        t = self.clock.advance(2, 30)
        self.trace.append({"action": "free_requested", "addr": addr, "size": block.requested, "stream": 0,
                           "time_us": t, "frames": frames})
        t = self.clock.advance(0, 1)
        self.trace.append({"action": "free_completed", "addr": addr, "size": block.requested, "stream": 0,
                           "time_us": t, "frames": frames})
        self.allocated_rounded -= round_size(block.requested)
        block.allocated = False
        block.frames = []  # PyTorch drops context_when_allocated; requested_size stays
        blocks = block.segment.blocks
        i = blocks.index(block)
        if i + 1 < len(blocks) and not blocks[i + 1].allocated:  # [block next]
            nxt = blocks.pop(i + 1)
            block.size += nxt.size
        if i > 0 and not blocks[i - 1].allocated:  # [prev block]: block survives, takes prev's place
            prev = blocks.pop(i - 1)
            block.addr = prev.addr
            block.size += prev.size
            block.seg_frames = prev.seg_frames

    # ---- snapshot

    def snapshot_segments(self) -> list[dict]:
        out = []
        for seg in sorted(self.segments, key=lambda s: s.addr):
            blocks = []
            allocated = requested = 0
            for b in seg.blocks:
                state = "active_allocated" if b.allocated else "inactive"
                if b.allocated:
                    allocated += b.size
                    requested += b.requested
                blocks.append({"address": b.addr, "size": b.size, "requested_size": b.requested, "state": state,
                               "frames": b.frames})
            head = seg.blocks[0]
            out.append({
                "device": 0,
                "address": seg.addr,
                "total_size": seg.size,
                "allocated_size": allocated,
                "active_size": allocated,
                "requested_size": requested,
                "stream": 0,
                "segment_type": seg.pool,
                "segment_pool_id": (0, 0),
                "is_expandable": False,
                "frames": head.seg_frames,
                "blocks": blocks,
            })
        return out


# --------------------------------------------------------------------------- the training run

def nbytes(*shape: int) -> int:
    n = FP32
    for d in shape:
        n *= d
    return n


def record_run() -> tuple[Allocator, list[dict]]:
    rng = random.Random(SEED)
    clock = Clock(rng)
    A = Allocator(clock, rng)
    annotations: list[dict] = []

    def annotate(stage: str, name: str) -> None:
        annotations.append({"stage": stage, "name": name, "device": 0, "time_us": clock.advance(3, 12)})

    params = [("fc1.weight", nbytes(D_HIDDEN, D_IN)), ("fc1.bias", nbytes(D_HIDDEN)),
              ("fc2.weight", nbytes(D_OUT, D_HIDDEN)), ("fc2.bias", nbytes(D_OUT))]

    # model.to("cuda"): each parameter is copied host-to-device (about 12 GB/s)
    clock.advance(15_000, 25_000)
    for _name, size in params:
        A.malloc(size, S_MODEL_TO)
        clock.advance(size // 12_000 + 20, size // 12_000 + 60)

    grads: list[int] = []
    state: list[int] = []
    workspaces: list[int] = []
    clock.advance(30_000, 45_000)  # Adam(...), torch.randn batches

    for it in range(ITERATIONS):
        clock.advance(250, 600)
        # optimizer.zero_grad(set_to_none=True)
        annotate("START", "Optimizer.zero_grad#Adam.zero_grad")
        for addr in grads:
            A.free(addr, F_ZERO_GRAD)
        grads = []
        annotate("END", "Optimizer.zero_grad#Adam.zero_grad")

        x = A.malloc(nbytes(BATCH, D_IN), S_X_TO)
        clock.advance(30, 60)
        y = A.malloc(nbytes(BATCH, D_OUT), S_Y_TO)
        clock.advance(30, 60)

        # forward
        h1 = A.malloc(nbytes(BATCH, D_HIDDEN), S_FC1_OUT)  # saved by GELU
        if not workspaces:
            clock.advance(180_000, 240_000)  # cublasCreate on first use
            workspaces.append(A.malloc(CUBLAS_WORKSPACE, S_FC1_WS))
        clock.advance(20, 60)
        h2 = A.malloc(nbytes(BATCH, D_HIDDEN), S_GELU_OUT)  # saved by fc2
        clock.advance(20, 60)
        out = A.malloc(nbytes(BATCH, D_OUT), S_FC2_OUT)
        clock.advance(20, 60)
        tmp = A.malloc(nbytes(BATCH, D_OUT), S_MSE_TMP)
        loss = A.malloc(FP32, S_MSE_MEAN)
        A.free(tmp, F_MSE_TMP)

        # backward
        clock.advance(40, 90)
        seed = A.malloc(FP32, S_SEED)
        clock.advance(60, 150 if workspaces[1:] else 2_500)
        g_out = A.malloc(nbytes(BATCH, D_OUT), S_MSE_BW)
        clock.advance(15, 40)
        # AddmmBackward0 of fc2: grad wrt h2, then grad wrt W2 (-> W2.grad), then bias (validate_outputs)
        g_h2 = A.malloc(nbytes(BATCH, D_HIDDEN), S_MM_MAT1)
        if len(workspaces) == 1:
            clock.advance(1_500, 3_000)  # the engine thread's own cuBLAS handle
            workspaces.append(A.malloc(CUBLAS_WORKSPACE, S_MM_MAT1_WS))
        clock.advance(15, 40)
        g_w2 = A.malloc(nbytes(D_OUT, D_HIDDEN), S_MM_MAT2)
        g_b2 = A.malloc(nbytes(D_OUT), S_BIAS_GRAD)
        A.free(g_out, F_GRAD_INPUT)
        A.free(h2, F_SAVED_ADDMM)
        # GeluBackward0
        g_h1 = A.malloc(nbytes(BATCH, D_HIDDEN), S_GELU_BW)
        A.free(g_h2, F_GRAD_INPUT)
        A.free(h1, F_SAVED_GELU)
        # AddmmBackward0 of fc1: x needs no grad; grad wrt W1, then bias
        clock.advance(15, 40)
        g_w1 = A.malloc(nbytes(D_HIDDEN, D_IN), S_MM_MAT2)
        g_b1 = A.malloc(nbytes(D_HIDDEN), S_BIAS_GRAD)
        A.free(g_h1, F_GRAD_INPUT)
        clock.advance(30, 80)
        A.free(seed, F_SEED)
        grads = [g_w1, g_b1, g_w2, g_b2]  # parameter order

        # optimizer.step()
        clock.advance(50, 120)
        annotate("START", "Optimizer.step#Adam.step")
        if not state:
            for _name, size in params:
                state.append(A.malloc(size, S_EXP_AVG))
                clock.advance(10, 30)
                state.append(A.malloc(size, S_EXP_AVG_SQ))
                clock.advance(10, 30)
        clock.advance(150, 400)  # _foreach_lerp_, _foreach_mul_, _foreach_addcmul_ (in place)
        tmps = [A.malloc(size, S_FOREACH_SQRT) for _name, size in params]
        clock.advance(150, 400)  # _foreach_div_, _foreach_add_, _foreach_addcdiv_ (in place)
        for addr in tmps:
            A.free(addr, F_FOREACH_TMP)
        annotate("END", "Optimizer.step#Adam.step")

        # loss.item() synchronizes; train_step returns and its locals go
        clock.advance(300, 900)
        for addr in (x, y, out, loss):
            A.free(addr, F_STEP_LOCALS)

    return A, annotations


def allocator_settings() -> dict:
    return {
        "PYTORCH_CUDA_ALLOC_CONF": "",
        "max_split_size": -1,
        "garbage_collection_threshold": 0.0,
        "expandable_segments": False,
        "pinned_num_register_threads": 1,
        "release_lock_on_cudamalloc": False,
        "pinned_use_cuda_host_register": False,
        "roundup_power2_divisions": {str(1 << i): 0 for i in range(16)},
    }


def build_snapshot() -> tuple[dict, Allocator]:
    A, annotations = record_run()
    snap = {
        "segments": A.snapshot_segments(),
        "device_traces": [A.trace],
        "allocator_settings": allocator_settings(),
        "external_annotations": annotations,
    }
    return snap, A


def summarize(snap: dict, A: Allocator, path: str) -> str:
    trace = snap["device_traces"][0]
    by_action = collections.Counter(e["action"] for e in trace)
    segs = snap["segments"]
    reserved = sum(s["total_size"] for s in segs)
    allocated = sum(s["allocated_size"] for s in segs)
    n_small = sum(1 for s in segs if s["segment_type"] == "small")
    n_blocks = sum(len(s["blocks"]) for s in segs)
    n_active = sum(1 for s in segs for b in s["blocks"] if b["state"] != "inactive")
    lines = [
        f"wrote {path} ({os.path.getsize(path):,} bytes, pickle protocol 4) -- SYNTHETIC, not recorded on a GPU",
        f"trace entries: {len(trace)} (" + ", ".join(f"{k} {v}" for k, v in sorted(by_action.items())) + ")",
        f"segments: {len(segs)} ({n_small} small, {len(segs) - n_small} large), blocks {n_blocks} ({n_active} active)",
        f"reserved at end:  {reserved:,} B ({reserved / MB:.2f} MiB)",
        f"allocated at end: {allocated:,} B ({allocated / MB:.2f} MiB)",
        f"peak allocated over the trace (512-rounded request sizes): {A.peak_rounded:,} B ({A.peak_rounded / MB:.2f} MiB)",
        f"distinct stacks: {len(_stack_memo)}, distinct frames: {len(_frame_memo)}, "
        f"annotations: {len(snap['external_annotations'])}",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-o", "--out", default=DEFAULT_OUT, help="output path (default: %(default)s)")
    args = ap.parse_args(argv)
    snap, A = build_snapshot()
    tmp = args.out + ".tmp"
    with open(tmp, "wb") as f:
        pickle.dump(snap, f, protocol=4)
    os.replace(tmp, args.out)
    print(summarize(snap, A, args.out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
