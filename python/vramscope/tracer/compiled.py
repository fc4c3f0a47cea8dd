"""``--compile`` and ``--cuda-graphs``: the step as ``torch.compile`` (Inductor) runs it, on fake
CUDA tensors.

The model's forward is compiled by ``torch.compile`` with a backend that is Inductor's own
``compile_fx`` up to code generation: Dynamo's graphs, Inductor's decompositions, its joint-graph
passes and its partitioner (``min_cut_rematerialization_partition``) decide the forward and
backward graphs, so the tensors kept for backward are exactly the forward graph's extra outputs.
Instead of generating kernels, each graph gets a runner that executes it node by node on the fake
tensors, freeing every value after its last use (as Inductor's generated code does with ``del``).
Which nodes Inductor materialises is asked of Inductor's own lowering (``GraphLowering``, which
runs without a GPU): a node whose result lowering keeps as a buffer is allocated; a node it
inlines into a fused kernel is computed without an allocation. The scheduler's later fusions and
its reordering need the GPU's properties and are not run (docs/design/tracer.md says what that
leaves out).

With ``--cuda-graphs`` (``mode="reduce-overhead"``) every allocation a compiled graph makes is in
the CUDA graph pool (the stream's ``pool`` field), as are copies of the graphs' non-static
inputs, held for the graphs' lifetime."""

from __future__ import annotations

import contextlib
import functools
from collections import defaultdict

from .common import TracerError, torch

CUDA_GRAPH_POOL = 1  # cudagraph trees share one private pool per device


def _module_of(node) -> str | None:
    """The innermost module of an FX node (Dynamo's ``nn_module_stack``; backward nodes carry
    their forward node's as ``fwd_nn_module_stack``), as a qualified name."""
    stack = node.meta.get("nn_module_stack") or node.meta.get("fwd_nn_module_stack")
    if not stack:
        return None
    path = list(stack.values())[-1][0]
    return _qualified(path)


@functools.lru_cache(maxsize=4096)
def _qualified(path: str) -> str:
    """Dynamo's ``L['self'].layers[0].fc`` / ``L['self']._modules['fc']`` as ``layers.0.fc``."""
    import re
    path = re.sub(r"^L\['[^']*'\]\.?", "", path)
    path = re.sub(r"\._modules\['([^']*)'\]", r".\1", path)
    path = re.sub(r"^_modules\['([^']*)'\]", r"\1", path)
    path = re.sub(r"\[(\d+)\]", r".\1", path)
    path = re.sub(r"\['([^']*)'\]", r".\1", path)
    return path.strip(".")


class CompiledGraph:
    """One graph Inductor would compile: its kind, the nodes lowering materialises, what it
    saves for backward (forward graphs)."""

    def __init__(self, number: int, kind: str, gm, materialized: set | None, static: set):
        self.number = number
        self.kind = kind                  # "forward" or "backward"
        self.gm = gm
        self.materialized = materialized  # node names; None: every node (lowering failed)
        self.static = static              # placeholder indices that are static inputs
        self.saved: slice | None = None   # forward: which outputs are saved for backward
        self.plan = None                  # (materialised nodes, frees after each node, inputs)


class CompileMode:
    """The torch.compile backend and the graph runners, for one trace."""

    def __init__(self, tracker, saved, root: str, cuda_graphs: bool):
        self.tracker = tracker
        self.saved = saved
        self.root = root                  # the model's class name (its own forward's module)
        self.cuda_graphs = cuda_graphs
        self.graphs: list[CompiledGraph] = []
        self.lowering_failures: list[str] = []
        self.post_grad_failures: list[str] = []
        self.static_copies: dict = {}     # --cuda-graphs: the graphs' input buffers, held
        self.dynamo_graphs = 0

    def compile(self, model):
        import torch._dynamo
        torch._dynamo.reset()
        torch._dynamo.utils.counters.clear()
        import warnings
        # the global hooks it warns about are the tracer's own (module scopes), which know
        warnings.filterwarnings("ignore", message=r"Using `torch.compile\(module\)` when there "
                                "are global hooks", category=UserWarning)
        return torch.compile(model, backend=self.backend, dynamic=False)

    @staticmethod
    def _graph_break_reasons() -> list[str]:
        try:
            import torch._dynamo
            return [str(r).splitlines()[0][:160] for r in
                    torch._dynamo.utils.counters.get("graph_break", {})]
        except Exception:
            return []

    # -- compilation (Dynamo calls the backend once per graph it captures)
    def backend(self, gm, example_inputs):
        from torch._inductor.compile_fx import compile_fx
        self.dynamo_graphs += 1
        with _without_saved_tensor_hooks():
            # constant folding runs the graph's constant parts on the device for real (there
            # is none): the constants are computed inside the graphs instead (small: masks)
            return compile_fx(gm, example_inputs, inner_compile=self._inner,
                              config_patches={"joint_graph_constant_folding": False})

    def _inner(self, gm, example_inputs, **kwargs):
        is_backward = bool(kwargs.get("is_backward"))
        self._post_grad_passes(gm, example_inputs)
        materialized = self._lowered(gm, example_inputs, is_backward)
        static = set(kwargs.get("static_input_idxs") or ())
        graph = CompiledGraph(len(self.graphs) + 1, "backward" if is_backward else "forward", gm,
                              materialized, static)
        graph.saved = None if is_backward else _saved_slice()
        self.graphs.append(graph)

        def runner(args):  # boxed: AOTAutograd passes a list the runner may clear
            return self._run(graph, args)
        runner._boxed_call = True
        return runner

    def _post_grad_passes(self, gm, example_inputs) -> None:
        """Inductor's post-grad passes (no-op removal, re-inplacing, reordering for locality),
        as compile_fx_inner runs them before lowering."""
        try:
            from torch._guards import detect_fake_mode
            from torch._inductor.compile_fx import _recursive_post_grad_passes
            from torch._inductor.fx_passes.post_grad import view_to_reshape
            from torch._inductor.virtualized import V
            fake_mode = detect_fake_mode(example_inputs)
            with (V.set_fake_mode(fake_mode) if fake_mode is not None
                  else contextlib.nullcontext()):
                view_to_reshape(gm)
                _recursive_post_grad_passes(gm, is_inference=False)
        except Exception as e:  # the graph is run as partitioned
            self.post_grad_failures.append(f"{type(e).__name__}: {str(e).splitlines()[0][:120]}"
                                           if str(e) else type(e).__name__)

    def _lowered(self, gm, example_inputs, is_backward: bool) -> set | None:
        """The FX nodes whose results Inductor's lowering keeps as buffers (everything else it
        inlines into the kernels of its users); None when lowering fails here."""
        try:
            from torch._inductor.graph import GraphLowering
            from torch._inductor.virtualized import V
            from torch._guards import detect_fake_mode
            from torch._inductor.compile_fx import record_original_output_strides
            record_original_output_strides(gm)
            fake_mode = detect_fake_mode(example_inputs)
            graph = GraphLowering(gm, example_inputs=list(example_inputs), is_inference=False,
                                  is_backward=is_backward)
            with contextlib.ExitStack() as stack:
                stack.enter_context(emulated_sm90())
                if fake_mode is not None:
                    stack.enter_context(V.set_fake_mode(fake_mode))
                stack.enter_context(V.set_graph_handler(graph))
                graph.run(*example_inputs)
                names = set()
                order = {n: i for i, n in enumerate(gm.graph.nodes)}
                for buf in graph.buffers:
                    node = getattr(buf, "origin_node", None)
                    if node is None:  # realised later (an extern kernel's input): its last origin
                        origins = [o for o in getattr(buf, "origins", ()) if o in order]
                        node = max(origins, key=order.__getitem__) if origins else None
                    if node is not None:
                        names.add(node.name)
            return names
        except Exception as e:
            self.lowering_failures.append(f"{type(e).__name__}: {str(e).splitlines()[0][:120]}"
                                          if str(e) else type(e).__name__)
            return None

    # -- execution
    def _materialized_nodes(self, graph: CompiledGraph) -> set:
        """The call_function nodes that allocate: lowering's buffers, the producers of the graph's
        outputs (through views and tuple items), and every node when lowering failed."""
        nodes = [n for n in graph.gm.graph.nodes if n.op == "call_function"]
        if graph.materialized is None:
            return set(nodes)
        keep = {n for n in nodes if n.name in graph.materialized}
        # a multi-output op (var_mean) is one kernel: its items make it a buffer
        for n in nodes:
            if n.target is _getitem() and n in keep and isinstance(n.args[0], torch.fx.Node):
                keep.add(n.args[0])
        output = next(n for n in graph.gm.graph.nodes if n.op == "output")
        stack = list(output.all_input_nodes)
        seen = set()
        while stack:
            n = stack.pop()
            if n in seen or n.op != "call_function":
                continue
            seen.add(n)
            keep.add(n)
            if _is_view(n) or n.target is _getitem():
                stack.extend(n.all_input_nodes)
        return keep

    def _run(self, graph: CompiledGraph, args: list):
        """Runs ``graph`` on the fake tensors in ``args`` (boxed: the list is cleared, so inputs
        die at their last use), freeing each value after its last use."""
        gm = graph.gm
        if graph.plan is None:
            graph.plan = self._plan(graph)
        materialized, free_after, inputs = graph.plan
        tracker = self.tracker
        pool = CUDA_GRAPH_POOL if self.cuda_graphs else None
        env: dict = {}
        index = 0
        if graph.kind == "backward":
            self.saved.release_running()
        with tracker.compiled_graph(graph.kind, graph.number, pool):
            for n in gm.graph.nodes:
                if n.op == "placeholder":
                    value = args[index]
                    if (self.cuda_graphs and index not in graph.static
                            and isinstance(value, torch.Tensor) and tracker.pool_of(value) is None):
                        value = self._static_copy(graph, index, n, value)
                    index += 1
                    if graph.kind == "backward" and not n.name.startswith("tangents"):
                        self._mark_saved(value, n.name)  # (if the forward's slice was unknown)
                    if n.users:
                        env[n] = value
                    del value
                    if index == inputs:
                        args.clear()
                elif n.op == "get_attr":
                    env[n] = getattr(gm, n.target)
                elif n.op == "call_function":
                    a = torch.fx.node.map_arg(n.args, env.__getitem__)
                    k = torch.fx.node.map_arg(n.kwargs, env.__getitem__)
                    with tracker.fx_node(n.name, _module_of(n) or self.root,
                                         fused=n not in materialized):
                        env[n] = n.target(*a, **k)
                    del a, k
                    for dead in free_after.get(n, ()):
                        env.pop(dead, None)
                elif n.op == "output":
                    result = torch.fx.node.map_arg(n.args[0], env.__getitem__)
                    env.clear()
                    if graph.saved is not None:  # what the partitioner saves for backward
                        names = list(n.args[0])
                        for i in range(len(result))[graph.saved]:
                            self._mark_saved(result[i], getattr(names[i], "name", None))
                    return list(result) if isinstance(result, (tuple, list)) else [result]
                else:
                    raise TracerError(f"a compiled graph has a {n.op} node", "torch.compile",
                                      "trace without --compile")
        raise TracerError("a compiled graph has no output", "torch.compile",
                          "trace without --compile")

    def _mark_saved(self, value, name: str | None) -> None:
        """A tensor the partitioner saves for backward: an ``activation`` named
        ``<module>:<forward graph node>`` (weights and inputs keep their category)."""
        if not isinstance(value, torch.Tensor):
            return
        rec = self.tracker.record_of(value)
        if rec is not None and rec.category == "temporary" and rec.node is not None:
            self.tracker.relabel(value, "activation", f"{rec.module}:{name or rec.node}")

    def _plan(self, graph: CompiledGraph):
        last_use: dict = {}
        for n in graph.gm.graph.nodes:
            for a in n.all_input_nodes:
                last_use[a] = n
        free_after = defaultdict(list)
        for value, user in last_use.items():
            if user.op != "output":
                free_after[user].append(value)
        inputs = sum(1 for n in graph.gm.graph.nodes if n.op == "placeholder")
        return self._materialized_nodes(graph), dict(free_after), inputs

    def _static_copy(self, graph: CompiledGraph, index: int, node, value):
        """cudagraph trees copy a non-static input (the batch, an incoming gradient) into the
        graph's own buffer in the pool, made at the first run and kept for the graph's
        lifetime; later runs copy into it."""
        key = (graph.number, index)
        copy = self.static_copies.get(key)
        if copy is None or copy.shape != value.shape or copy.dtype != value.dtype:
            category = "temporary" if node.name.startswith("tangents") else "input"
            name = f"{node.name} (CUDA graph {graph.number} static input)"
            with self.tracker.fx_node(node.name, self.root, fused=False), \
                    self.tracker.label(category, name):
                copy = torch.empty_strided(value.shape, value.stride(), dtype=value.dtype,
                                           device=value.device)
            self.static_copies[key] = copy
        copy.copy_(value)
        return copy

    # -- what the header says
    def notes(self) -> list[str]:
        fw = [g for g in self.graphs if g.kind == "forward"]
        bw = [g for g in self.graphs if g.kind == "backward"]
        notes = [
            f"--compile: torch.compile (Inductor's decompositions, joint-graph passes and "
            f"partitioner min_cut_rematerialization_partition) captured {self.dynamo_graphs} "
            f"graph(s) ({len(fw)} forward, {len(bw)} backward)"
            + (f"; {self.dynamo_graphs - 1} graph break(s): the code between graphs ran eagerly"
               + (f" (Dynamo: {'; '.join(self._graph_break_reasons()[:3])})"
                  if self._graph_break_reasons() else "")
               if self.dynamo_graphs > 1 else "")
            + "; saved for backward: what the partitioner saves; each graph runs node by node "
            "on fake tensors, each value freed after its last use (a backward graph's saved "
            "tensors included)",
            "--compile: which nodes are buffers is decided by Inductor's own lowering, run on the "
            "CPU with an sm90 GPU's properties (132 SMs: split reductions); nodes it inlines into "
            "fused kernels allocate nothing. Approximated: the scheduler's later fusions (small "
            "reduction buffers kept inside one kernel), its reordering for peak memory and "
            "in-place reuse of a dying input are not run (they need the GPU); Inductor's reuse "
            "of a freed buffer of the same size is left to the caching allocator (the same "
            "block); constants are not folded (they are computed in the graph)",
        ]
        if any(g.materialized is None for g in self.graphs):
            notes.append("--compile: Inductor's lowering failed for "
                         f"{sum(g.materialized is None for g in self.graphs)} graph(s) "
                         f"({self.lowering_failures[0]}): every node of those is allocated")
        if self.post_grad_failures:
            notes.append("--compile: Inductor's post-grad passes failed "
                         f"({self.post_grad_failures[0]}): graphs run as partitioned")
        if self.cuda_graphs:
            notes.append(
                "--cuda-graphs: every allocation of a compiled graph, and a copy of each "
                "non-static graph input (the batch, the incoming gradients), is in the CUDA graph "
                "pool (pool 1, shared by all graphs, as cudagraph trees do), held for the graphs' "
                "lifetime: from the first run to the end")
        return notes


def _saved_slice():
    """Which of the forward graph's outputs are saved for backward (AOTAutograd's metadata of
    the graph being compiled), or None."""
    try:
        context = torch._guards.TracingContext.try_get()
        meta = context.fw_metadata if context is not None else None
        return meta.tensors_saved_for_backwards_slice if meta is not None else None
    except Exception:
        return None


@functools.lru_cache(maxsize=None)
def _getitem():
    import operator
    return operator.getitem


def _is_view(node) -> bool:
    target = node.target
    schema = getattr(target, "_schema", None)
    if schema is None:
        return False
    return any(r.alias_info is not None and not r.alias_info.is_write for r in schema.returns)


# What Inductor's lowering asks of the GPU (split reductions by SM count, warp size), answered
# for an sm90 GPU with 132 SMs (H100 SXM, H200), as the tracer's SDPA routing assumes sm90.
SM90 = dict(name="NVIDIA H100 80GB HBM3 (emulated)", major=9, minor=0, multi_processor_count=132,
            total_memory=80 * 2**30, regs_per_multiprocessor=65536,
            max_threads_per_multi_processor=2048, max_threads_per_block=1024, warp_size=32,
            L2_cache_size=50 * 2**20, shared_memory_per_block_optin=232448,
            shared_memory_per_multiprocessor=233472, gcnArchName="NVIDIA H100")


@contextlib.contextmanager
def emulated_sm90():
    """``torch.cuda.get_device_properties`` and Dynamo's CUDA device interface answer an sm90
    GPU for the duration (nothing else is asked of the driver while lowering)."""
    import types
    from torch._dynamo import device_interface
    from torch._inductor.runtime.hints import DeviceProperties
    props = types.SimpleNamespace(**SM90)

    def get_props(device=None):
        return props

    def capability(device=None):
        return (SM90["major"], SM90["minor"])

    cuda_interface = device_interface.CudaInterface
    patches = [(torch.cuda, "get_device_properties", get_props),
               (torch.cuda, "get_device_capability", capability),
               (cuda_interface, "get_device_properties", staticmethod(get_props))]
    saved = [(obj, name, obj.__dict__.get(name, getattr(obj, name))) for obj, name, _ in patches]
    clear = getattr(DeviceProperties.create, "cache_clear", lambda: None)
    try:
        for obj, name, value in patches:
            setattr(obj, name, value)
        clear()
        yield
    finally:
        for obj, name, value in saved:
            setattr(obj, name, value)
        clear()


@contextlib.contextmanager
def _without_saved_tensor_hooks():
    """AOTAutograd traces the joint graph while the trace's saved-tensor hooks are installed:
    they are taken off for the compilation (nothing it does is a step's allocation)."""
    autograd = torch._C._autograd
    pop = getattr(autograd, "_pop_saved_tensors_default_hooks", None)
    top = getattr(autograd, "_top_saved_tensors_default_hooks", None)
    push = getattr(autograd, "_push_saved_tensors_default_hooks", None)
    hooks = []
    if pop is not None and top is not None and push is not None:
        while True:
            current = top(False)
            if current is None:
                break
            hooks.append(current)
            pop()
    try:
        yield
    finally:
        for pack, unpack in reversed(hooks):
            push(pack, unpack)



def explain_compile_failure(e: BaseException) -> TracerError | None:
    """A failure inside torch.compile that has a known cause here, as one clear line."""
    frames = set()
    seen = set()
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        tb = e.__traceback__
        while tb is not None:
            frames.add(tb.tb_frame.f_code.co_name)
            tb = tb.tb_next
        e = e.__cause__ or e.__context__
    if frames & {"functionalize_rng_ops", "apply_graphsafe_rng_functionalization",
                 "get_default_generator"}:
        return TracerError(
            "torch.compile recomputes random ops (dropout) in backward here and needs the CUDA "
            "generator's state for it, which a machine without a GPU does not have",
            "--compile with checkpointing (or a partitioner that recomputes dropout)",
            "trace without --checkpointing, or with dropout 0 in the model's config")
    return None
