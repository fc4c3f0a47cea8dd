"""``scaled_dot_product_attention`` routed to the fused kernel PyTorch picks on an sm90 GPU."""

from __future__ import annotations

import itertools
import math
from collections import defaultdict

from .common import torch


def _torch_version() -> tuple:
    parts = torch.__version__.split("+")[0].split(".")
    out = []
    for p in parts[:2]:
        digits = "".join(itertools.takewhile(str.isdigit, p))
        out.append(int(digits) if digits else 0)
    return tuple(out)


def choose_sdpa_backend(q, k, v, attn_mask, dropout_p, is_causal, enable_gqa) -> str:
    """The kernel ``F.scaled_dot_product_attention`` runs on an sm90 GPU (H100/H200), after
    aten/src/ATen/native/transformers/cuda/sdp_utils.cpp: priority cuDNN, flash, efficient, math
    from torch 2.9 (cuDNN first on sm90), flash, efficient, math, cuDNN before; each kernel taken
    only when its constraints hold (the ones that matter for training shapes are checked) and it
    is not switched off (``torch.backends.cuda.*_sdp_enabled``)."""
    backends = torch.backends.cuda
    if not all(t.dim() == 4 for t in (q, k, v)) or not (q.dtype == k.dtype == v.dtype):
        return "math"
    half = q.dtype in (torch.float16, torch.bfloat16)
    d, dv = q.size(-1), v.size(-1)
    same_heads = q.size(1) == k.size(1) == v.size(1)
    gqa_heads = enable_gqa and k.size(1) == v.size(1) and q.size(1) % k.size(1) == 0
    causal_square = not is_causal or q.size(-2) == k.size(-2)
    ok = {
        "cudnn": (backends.cudnn_sdp_enabled() if hasattr(backends, "cudnn_sdp_enabled")
                  else False) and half and d == k.size(-1) == dv and d % 8 == 0 and d <= 128
                 and same_heads and attn_mask is None and causal_square,
        "flash": backends.flash_sdp_enabled() and half and d == k.size(-1) == dv and d <= 256
                 and (same_heads or gqa_heads) and attn_mask is None and causal_square,
        "efficient": backends.mem_efficient_sdp_enabled()
                     and q.dtype in (torch.float16, torch.bfloat16, torch.float32)
                     and d % (8 if half else 4) == 0 and dv % (8 if half else 4) == 0
                     and same_heads,
    }
    order = (("cudnn", "flash", "efficient") if _torch_version() >= (2, 9)
             else ("flash", "efficient", "cudnn"))
    for name in order:
        if ok[name]:
            return name
    return "math"


class SdpaRouting:
    """Routes ``F.scaled_dot_product_attention`` on fake CUDA tensors to the fused kernel a GPU
    would run. Without a GPU, PyTorch's own choice (sdp_utils) cannot read the device's properties
    and falls back to the math path, whose memory is quite different (it materialises the
    attention matrix); calling the fused aten op gives its real outputs and the tensors its
    backward saves (logsumexp, RNG state).

    Done by registering a kernel for ``aten::scaled_dot_product_attention`` at the AutogradCUDA
    dispatch key for the duration of the trace: every caller is covered (however it imported the
    function), and CUDA autocast has already cast the inputs when the kernel runs, as it has for
    PyTorch's own composite kernel."""

    def __init__(self, policy: str):
        self.policy = policy
        self.used: dict[str, int] = defaultdict(int)
        self._lib = None

    def __enter__(self):
        self._lib = torch.library.Library("aten", "IMPL")
        self._lib.impl("scaled_dot_product_attention", self._sdpa, "AutogradCUDA")
        return self

    def __exit__(self, *exc):
        lib, self._lib = self._lib, None
        destroy = getattr(lib, "_destroy", None)
        if destroy is not None:
            destroy()
        del lib

    def _sdpa(self, query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False,
              scale=None, enable_gqa=False):
        backend = self.policy if self.policy != "auto" else choose_sdpa_backend(
            query, key, value, attn_mask, dropout_p, is_causal, enable_gqa)
        self.used[backend] += 1
        if backend == "math":
            return _call_with_schema(torch.ops.aten._scaled_dot_product_attention_math.default,
                                     query=query, key=key, value=value, attn_mask=attn_mask,
                                     dropout_p=dropout_p, is_causal=is_causal, scale=scale,
                                     enable_gqa=enable_gqa)[0]
        if scale is None:
            scale = 1.0 / math.sqrt(query.size(-1))
        needs_lse = torch.is_grad_enabled() and any(t.requires_grad for t in (query, key, value))
        if backend == "flash":
            return self._flash(query, key, value, dropout_p, is_causal, scale)
        bias = self._attn_bias(attn_mask, query, key) if attn_mask is not None else None
        if backend == "efficient":
            return torch.ops.aten._scaled_dot_product_efficient_attention(
                query, key, value, bias, needs_lse, dropout_p, is_causal, scale=scale)[0]
        return torch.ops.aten._scaled_dot_product_cudnn_attention(
            query, key, value, bias, needs_lse, dropout_p, is_causal, False, scale=scale)[0]

    @staticmethod
    def _flash(q, k, v, dropout_p, is_causal, scale):
        # the kernel wants the head dimension a multiple of 8: padded, and the output sliced back
        d = v.size(-1)
        pad = (-q.size(-1)) % 8
        if pad:
            q, k, v = (torch.nn.functional.pad(t, (0, pad)) for t in (q, k, v))
        out = torch.ops.aten._scaled_dot_product_flash_attention(
            q, k, v, dropout_p, is_causal, False, scale=scale)[0]
        return out[..., :d] if pad else out

    @staticmethod
    def _attn_bias(mask, query, key):
        # attention.cpp: convert_boolean_attn_mask makes a boolean mask additive, in the
        # query's dtype (where(mask, 0.0, scalar_tensor(-inf, dtype))); preprocess_mask pads
        # the last dimension to a multiple of 8 (the memory-efficient kernel's alignment) when
        # a stride but the last is not one, slices it back, and expands to [b, heads, l, s]
        if mask.dtype == torch.bool:
            minus_inf = torch.scalar_tensor(float("-inf"), dtype=query.dtype, device=mask.device)
            mask = torch.where(mask, 0.0, minus_inf)
        if mask.stride(-1) != 1 or any(st % 8 for st in mask.stride()[:-1]):
            pad = 8 - mask.size(-1) % 8
            mask = torch.nn.functional.pad(mask, (0, pad))[..., : mask.size(-1)]
        return mask.expand(query.size(0), query.size(1), query.size(2), key.size(2))


def _call_with_schema(op, **named):
    """Call an aten overload with the named arguments its schema (of this torch version) has."""
    args, kwargs = [], {}
    for arg in op._schema.arguments:
        if arg.name not in named:
            continue
        if arg.kwarg_only:
            kwargs[arg.name] = named[arg.name]
        elif len(args) == [a.name for a in op._schema.arguments].index(arg.name):
            args.append(named[arg.name])
        else:
            kwargs[arg.name] = named[arg.name]
    out = op(*args, **kwargs)
    return out if isinstance(out, (tuple, list)) else (out,)
