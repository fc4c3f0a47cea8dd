"""``vramscope mcp``: vramscope's verbs as tools of a Model Context Protocol server on stdio, for
coding agents (Claude Code, Cursor, any MCP client), over local files.

Tools (each returns the JSON document of the command's ``--json``, whose schema is
``schemas/<document>.schema.json``): ``report``, ``explain``, ``simulate`` (the replay and what-if
runs), ``predict`` (with ``fit``), ``diff`` (with ``fail_if`` gates). A failed call is a tool
error carrying the command's one-line message. Needs the ``mcp`` package from PyPI (optional:
nothing else in vramscope imports it); run by ``vramscope mcp``, which starts this module with the
package it embeds and points it at itself (``VRAMSCOPE_BIN``).
"""

from __future__ import annotations

import sys
from typing import Any, Callable, Optional

from . import api
from .errors import UsageError, VramscopeError

SERVER_NAME = "vramscope"
INSTRUCTIONS = (
    "vramscope explains and predicts the GPU memory of deep-learning training. Paths are local "
    "files: PyTorch memory snapshots (torch.cuda.memory._dump_snapshot), profiler traces, capture "
    "folders of `vramscope run`, or report databases. Use explain for an out-of-memory message, "
    "report for where a recorded step's memory went, simulate for what-ifs (a smaller GPU, "
    "PYTORCH_CUDA_ALLOC_CONF settings), predict before renting a GPU (fit finds the largest batch), "
    "and diff to compare two runs or gate a change.")


def _document(call: Callable[[], Any]) -> dict[str, Any]:
    """The JSON document of a call's result; a failed call is the tool's error with the
    command's one line (what, where, what to do), for the agent to act on."""
    try:
        return dict(call().json)
    except VramscopeError as error:
        from mcp.server.mcpserver.exceptions import ToolError

        raise ToolError(error.message) from None


def report(path: str, start: Optional[str] = None, end: Optional[str] = None,
           step_range: Optional[str] = None) -> dict[str, Any]:
    """Where the GPU memory of a recorded training step went: the peaks (allocated, reserved),
    the bytes at the peak by category (weights, gradients, optimizer state, activations, inputs,
    workspaces, temporaries) and by owner and site, every step's peak. `path`: a snapshot, a
    profiler trace, a memory timeline, a capture folder or a report database. A window of a
    snapshot: `start`/`end` (event numbers as reports print them, or times since the first
    event such as "2.5s"; both kept) or `step_range` ("5:7": those iterations)."""
    return _document(lambda: api.report(path, database=False, from_=start, to=end,
                                        step_range=step_range))


def explain(text: str) -> dict[str, Any]:
    """What a CUDA/HIP out-of-memory message means: what the GPU held (this process's tensors,
    other processes, memory outside PyTorch, fragmentation), the cause with its arithmetic, and
    what to change. `text`: the message, a traceback or a whole log."""
    return _document(lambda: api.explain(text))


def simulate(path: str, capacity: Optional[str] = None, alloc_conf: Optional[str] = None,
             compare: Optional[list[str]] = None) -> dict[str, Any]:
    """Replays a recording through vramscope's model of PyTorch's caching allocator and answers
    what-ifs: would it fit in `capacity` (e.g. "24GiB"), what a PYTORCH_CUDA_ALLOC_CONF
    (`alloc_conf`, or several side by side in `compare`) does to reserved memory and
    fragmentation."""
    return _document(lambda: api.simulate(path, capacity=capacity, alloc_conf=alloc_conf,
                                          compare=compare))


def predict(model: str, batch: Optional[int] = None, seq: Optional[int] = None,
            dtype: Optional[str] = None, optimizer: Optional[str] = None,
            gpu: Optional[str] = None, fit: Optional[str] = None,
            options: Optional[dict[str, Any]] = None) -> dict[str, Any]:
    """The GPU memory of training steps without a GPU. `model`: a preset (gpt2, llama3-8b,
    mixtral-8x7b, resnet50...), a Hugging Face config.json path, or a Hub id such as
    meta-llama/Llama-3.2-1B (its config.json from the local Hugging Face cache, else downloaded
    by huggingface_hub; HF_TOKEN for gated models); `dtype` fp32, bf16, fp16,
    bf16-amp, fp16-amp; `optimizer` adamw, adam, sgd, momentum, none, or a quantised AdamW
    (adamw8bit, paged-adamw8bit, adamw8bit-ao, adamw4bit, adamw-fp8); `gpu` h100-80gb,
    a100-80gb, l4, t4...; `fit`: a GPU or size to find the largest batch that fits. `options`:
    any other flag of `vramscope predict` by name (lora, checkpointing, zero, world_size, tp,
    pp...), the memory-saving techniques included (checkpointing_every, checkpointing_offload,
    checkpointing_ops, qlora, loss_chunks, fused_linear_ce, optimizer_in_backward,
    offload_activations, offload_optimizer, offload_gradients, fp8, pack: a list of sample
    lengths packed into one row, and compile: torch.compile, for the LLaMA family in bf16 or
    bf16-amp): the report's prediction facts say what each saves."""
    def call() -> Any:
        named: dict[str, Any] = {"batch": batch, "seq": seq, "dtype": dtype,
                                 "optimizer": optimizer, "gpu": gpu, "fit": fit}
        for key, value in (options or {}).items():
            key = key.replace("-", "_")
            if named.get(key) is not None:
                raise UsageError(f"predict: {key} is given twice (as an argument and in "
                                 "options)", 2)
            named[key] = value
        return api.predict(model, database=False, **named)

    return _document(call)


def plan(model: str, budget: str, host_memory: Optional[str] = None,
         options: Optional[dict[str, Any]] = None) -> dict[str, Any]:
    """The cheapest ways to make a training step fit a budget: `budget` a GPU (rtx4090,
    a100-80gb...), a size (24GiB), or N of them (8xh100-80gb: ZeRO/FSDP over 8). Searches
    8-bit optimizers, the optimizer in backward, checkpointing, chunked or fused cross-entropy,
    offloading (bounded by `host_memory`), the micro-batch split, expandable segments and LoRA;
    each option's flags, peak per GPU, host memory and cost to step time. `model` and `options`
    as predict's (batch, seq, dtype...; built-in families)."""
    return _document(lambda: api.plan(model, budget, host_memory=host_memory,
                                      **{k.replace("-", "_"): v for k, v in (options or {}).items()}))


def diff(a: str, b: str, fail_if: Optional[list[str]] = None) -> dict[str, Any]:
    """Two reports compared (before/after, measured against predicted, two ranks): what changed
    at the peak by category, owner, site and step, memory that grows step over step, and
    `fail_if` gates such as "peak_allocated > +10%" or "peak_reserved > 40GiB"."""
    return _document(lambda: api.diff(a, b, fail_if=fail_if))


TOOLS = (report, explain, simulate, predict, plan, diff)


def build_server() -> Any:
    """The MCP server with every tool registered."""
    from mcp.server.mcpserver import MCPServer

    server = MCPServer(SERVER_NAME, instructions=INSTRUCTIONS)
    for tool in TOOLS:
        server.tool()(tool)
    return server


def main() -> int:
    try:
        import mcp  # noqa: F401 (the optional dependency, checked before anything starts)
    except ImportError:
        print(f"vramscope: error: mcp: the mcp package is not installed in {sys.executable}; "
              "install it with `pip install mcp` (or give another Python with --python)",
              file=sys.stderr)
        return 1
    try:
        build_server().run("stdio")
    except KeyboardInterrupt:
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
