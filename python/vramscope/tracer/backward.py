"""The backward pass: the tracer's own executor, which follows PyTorch's C++ autograd engine
(that engine cannot run fake CUDA tensors without a GPU)."""

from __future__ import annotations

import contextlib
import heapq
import itertools
import sys
from collections import defaultdict

from .common import DEVICE, TracerError, torch
from .saved import SavedTensors
from .tracking import StorageTracker


def _is_non_overlapping_and_dense(t) -> bool:
    try:
        from torch._prims_common import is_non_overlapping_and_dense_or_false
        return bool(is_non_overlapping_and_dense_or_false(t))
    except ImportError:
        return t.is_contiguous()


def _obeys_layout_contract(grad, var) -> bool:
    """The engine's ``utils::obeys_layout_contract``: may the parameter keep this gradient?"""
    if _is_non_overlapping_and_dense(var):
        for size, gs, vs in zip(grad.shape, grad.stride(), var.stride()):
            if size != 1:
                if gs != vs:
                    return False
            elif gs == 0 or vs == 0:
                return False
        return True
    return grad.is_contiguous()


def _clone_obey_contract(grad, var):
    if _is_non_overlapping_and_dense(var):
        return torch.empty_strided(var.shape, var.stride(), dtype=grad.dtype,
                                   device=grad.device).copy_(grad)
    return grad.clone(memory_format=torch.contiguous_format)


class HookableNode:
    """A graph node whose ``register_prehook`` is the executor's: a C++ node's own pre-hooks live
    where Python cannot run them (the executor runs the graph in Python). The nodes
    ``torch.distributed.pipelining``'s zero-bubble backward hooks (its "intermediates") are
    handed out as these (patches.py); everything else is the node's."""
    __slots__ = ("node", "_executor")

    def __init__(self, node, executor: "BackwardExecutor"):
        self.node = node
        self._executor = executor

    def register_prehook(self, hook):
        return self._executor.register_node_prehook(self.node, hook)

    def __getattr__(self, name):
        return getattr(self.node, name)


def _node(node):
    """The graph node itself, whether given as one or as a ``HookableNode``."""
    return node.node if isinstance(node, HookableNode) else node


class BackwardExecutor:
    """``loss.backward()`` for fake CUDA tensors, in Python, after torch/csrc/autograd/engine.cpp:

    - dependencies counted from the roots; a node runs when all its inputs have arrived, the ready
      node with the highest sequence number first (AccumulateGrad has the highest possible);
    - gradient arriving twice at one input: summed in place into the buffered one when only the
      engine holds it and its storage (``InputBuffer::accumulate``), else out of place;
    - a node's inputs are released when it returns; its outputs are checked against the next
      nodes' input metadata (summed to shape, cast to dtype: ``validate_outputs``); then its saved
      tensors are released (``release_variables``; no ``retain_graph``);
    - ``AccumulateGrad``: the first gradient is stolen when nothing else holds it and its strides
      match the parameter's, else copied in the parameter's layout; later ones are added in place.

    Reuse is decided as the engine decides it for real tensors in a normal run (the C++ engine
    itself never reuses a fake tensor, nor any tensor under a Python dispatch mode).

    Module backward hooks and hooks registered on non-leaf tensors are not run (the engine keeps
    them in C++ where Python cannot read them); leaf tensor hooks and post-accumulate-grad hooks
    are, and so are the pre-hooks registered through ``register_tensor_hook`` and
    ``register_node_prehook``.

    ``grad`` (``torch.autograd.grad``) runs only the nodes that lead to its inputs, as the
    engine does; a node run computes every output the C++ code computes outside the engine, so
    the results no input needs (which the engine's ``exec_info`` would not have computed) are
    taken back from the trace (``StorageTracker.retract``) as soon as the node returns."""

    def __init__(self, tracker: StorageTracker, saved: SavedTensors, param_names: dict,
                 model=None):
        self.tracker = tracker
        self.saved = saved
        self.param_names = param_names          # id(parameter) -> qualified name
        # FSDP2's unsharded parameters (each unit's gathered copy, the leaves its backward
        # accumulates into) are not the model's registered ones: named on first sight from
        # the model's FSDP units, id -> the parameter's qualified name.
        self._fsdp_units = _fsdp_param_groups(model) if model is not None else []
        self._module_names = ({id(m): n for n, m in model.named_modules()} if self._fsdp_units
                              else {})
        self._unsharded_names: dict = {}
        self._graph_ids = itertools.count(1)
        self._graph_id = -1
        self._storage_baseline = None           # storage use count of a tensor nothing shares
        # hooks registered on non-leaf tensors (Tensor.register_hook, which FSDP2's pre-backward
        # and register_multi_grad_hook use): (id(grad_fn), its sequence number, output nr) ->
        # hooks, run on the gradient of that output before the node runs, as the engine's tensor
        # pre-hooks are. A node cannot be weakly referenced; its id with its sequence number
        # names it uniquely while it lives, and entries go when their graph has run.
        self._tensor_hooks: dict = {}
        # pre-hooks on nodes (Node.register_prehook, through HookableNode): (id(node), its
        # sequence number) -> hooks, run on the node's inputs before it runs
        self._node_prehooks: dict = {}
        self._hook_ids = itertools.count()
        # Variable._execution_engine.queue_callback: run when the outermost backward ends
        self._final_callbacks: list = []
        self._depth = 0

    # what torch._C._current_graph_task_id answers during the trace (torch.utils.checkpoint keys
    # its recomputation by it)
    def current_graph_task_id(self) -> int:
        return self._graph_id

    def grad_unsupported(self, *args, **kwargs):
        raise TracerError("the traced code calls torch.autograd.grad",
                          f"step {self.tracker.step} {self.tracker.phase}",
                          "the tracer runs loss.backward() only; trace a step without "
                          "autograd.grad")

    def grad(self, outputs, inputs, grad_outputs=None, retain_graph=None, create_graph=False,
             only_inputs=True, allow_unused=None, is_grads_batched=False,
             materialize_grads=False):
        """``torch.autograd.grad`` for ``--compile``: AOTAutograd traces its joint graph by calling
        it (on fake tensors, under make_fx), which the C++ engine cannot run here. The gradients
        reaching ``inputs`` are returned instead of accumulated; only nodes that lead to an input
        run (the engine's ``exec_info``)."""
        if is_grads_batched:
            raise TracerError("torch.autograd.grad(is_grads_batched=True) is called",
                              f"step {self.tracker.step} {self.tracker.phase}",
                              "trace a plain loss.backward()")
        outputs = [outputs] if isinstance(outputs, torch.Tensor) else list(outputs)
        inputs = [inputs] if isinstance(inputs, torch.Tensor) else list(inputs)
        if grad_outputs is None:
            grads = [None] * len(outputs)
        elif isinstance(grad_outputs, torch.Tensor):
            grads = [grad_outputs]
        else:
            grads = list(grad_outputs)
        roots = []
        for t, g in zip(outputs, grads):
            if isinstance(t, torch.autograd.graph.GradientEdge):
                if g is None:
                    raise RuntimeError("a GradientEdge output needs a gradient")
                roots.append(((_node(t.node), t.output_nr), g))
                continue
            if not t.requires_grad:
                continue
            if g is None:
                g = torch.ones_like(t, memory_format=torch.preserve_format)
            roots.append(((t.grad_fn, t.output_nr) if t.grad_fn is not None
                          else self._leaf_edge(t), g))
        capture = {}
        for i, t in enumerate(inputs):
            edge = (t if isinstance(t, torch.autograd.graph.GradientEdge)
                    else torch.autograd.graph.get_gradient_edge(t))
            capture.setdefault(_node(edge.node), []).append((edge.output_nr, i))
        results = [None] * len(inputs)
        self._run(roots, keep_graph=True if retain_graph is None else bool(retain_graph),
                  capture=capture, results=results)
        if materialize_grads or allow_unused is False:
            for i, t in enumerate(inputs):
                if results[i] is None:
                    if not materialize_grads:
                        raise RuntimeError("One of the differentiated Tensors appears to not have "
                                           "been used in the graph. Set allow_unused=True if "
                                           "this is the desired behavior.")
                    results[i] = torch.zeros_like(t)
        return tuple(results)

    @staticmethod
    def _leaf_edge(t):
        return (t.view_as(t).grad_fn.next_functions[0][0], 0)

    def backward(self, tensors, grad_tensors=None, retain_graph=None, create_graph=False,
                 grad_variables=None, inputs=None):
        """Replaces torch.autograd.backward (and so Tensor.backward) during the trace."""
        if create_graph or inputs is not None:
            raise TracerError("backward(create_graph=True) or backward(inputs=...) is called",
                              f"step {self.tracker.step} {self.tracker.phase}",
                              "trace a plain loss.backward()")
        if grad_tensors is None:
            grad_tensors = grad_variables
        tensors = [tensors] if isinstance(tensors, torch.Tensor) else list(tensors)
        if grad_tensors is None:
            grads = [None] * len(tensors)
        elif isinstance(grad_tensors, torch.Tensor):
            grads = [grad_tensors]
        else:
            grads = list(grad_tensors)
        roots = []
        for i, (t, g) in enumerate(zip(tensors, grads)):
            if isinstance(t, torch.autograd.graph.GradientEdge):
                # a root given as its graph edge (torch.distributed.pipelining releases a stage's
                # output once sent and keeps its edge), with its gradient
                if g is None:
                    raise RuntimeError("a GradientEdge root needs a gradient")
                roots.append(((_node(t.node), t.output_nr), g))
                continue
            if not t.requires_grad:
                raise RuntimeError(f"element {i} of tensors does not require grad and does not "
                                   "have a grad_fn")
            if g is None:
                if t.numel() != 1:
                    raise RuntimeError("grad can be implicitly created only for scalar outputs")
                g = torch.ones_like(t, memory_format=torch.preserve_format)
            if t.grad_fn is not None:
                edge = (t.grad_fn, t.output_nr)
            else:  # a leaf: its AccumulateGrad node
                edge = (t.view_as(t).grad_fn.next_functions[0][0], 0)
            roots.append((edge, g))
        # torch.autograd.backward's frame holds the root gradients until the engine returns
        root_grads = [g for _, g in roots]
        self._run(roots, keep_graph=bool(retain_graph))
        del root_grads

    # -- hooks the engine would run
    def register_tensor_hook(self, original, tensor, hook):
        """``Tensor.register_hook`` during the trace: leaf tensors keep PyTorch's own (the
        executor reads ``_backward_hooks`` when it accumulates); a non-leaf tensor's hook is kept
        here, for its grad_fn's output."""
        fn = tensor.grad_fn
        if fn is None:
            return original(tensor, hook)
        if not tensor.requires_grad:
            raise RuntimeError("cannot register a hook on a tensor that doesn't require gradient")
        return self._register(self._tensor_hooks, (id(fn), fn._sequence_nr(), tensor.output_nr),
                              hook)

    def register_node_prehook(self, node, hook):
        """``Node.register_prehook`` (through ``HookableNode``): ``hook(inputs)`` runs before the
        node does, on the tuple of its input gradients, and what it returns replaces them."""
        return self._register(self._node_prehooks, (id(node), node._sequence_nr()), hook)

    def _register(self, hooks: dict, key: tuple, hook):
        """Keeps ``hook`` under ``key`` in ``hooks``; returns its handle (``remove()``)."""
        number = next(self._hook_ids)
        hooks.setdefault(key, {})[number] = hook

        class _Handle:
            def remove(self):
                entry = hooks.get(key)
                if entry is not None:
                    entry.pop(number, None)
                    if not entry:
                        hooks.pop(key, None)

        return _Handle()

    def _run_node_prehooks(self, fn, inputs: list) -> None:
        hooks = self._node_prehooks.get((id(fn), fn._sequence_nr())) if self._node_prehooks \
            else None
        for hook in list(hooks.values()) if hooks else ():
            result = hook(tuple(inputs))
            if result is not None:
                inputs[:] = list(result)

    def queue_callback(self, callback) -> None:
        """``Variable._execution_engine.queue_callback``: FSDP2's root post-backward (the last
        reduce-scatter, the resharding) runs when the backward that queued it ends."""
        if self._depth == 0:
            raise RuntimeError("Final callbacks can only be installed during backward pass.")
        self._final_callbacks.append(callback)

    def _run_tensor_hooks(self, fn, inputs: list) -> None:
        if not self._tensor_hooks:
            return
        seq = fn._sequence_nr()
        for nr in range(len(inputs)):
            hooks = self._tensor_hooks.pop((id(fn), seq, nr), None)
            if not hooks or inputs[nr] is None:
                continue
            for hook in list(hooks.values()):
                result = hook(inputs[nr])
                if result is not None:
                    inputs[nr] = result

    def _forget_tensor_hooks(self, low: int, high: int, graph: set) -> None:
        """The hooks on the graph's nodes from the first to the last it ran (only its own, as
        SavedTensors.release_graph), tensor and node pre-hooks alike."""
        for hooks in (self._tensor_hooks, self._node_prehooks):
            for key in [k for k in hooks if low <= k[1] <= high and k[1] in graph]:
                del hooks[key]

    # -- the engine
    def _run(self, roots: list, keep_graph: bool, capture: dict | None = None,
             results: list | None = None) -> None:
        """Runs the graph from ``roots``. With ``capture`` ({node: [(input nr, result index)]},
        for ``grad``), the gradients arriving at those nodes' inputs go to ``results``, those
        nodes are not run, nor any node that leads to none of them."""
        tracker = self.tracker
        saved_state = (self._graph_id, tracker.thread, tracker.backward_module)
        self._graph_id = next(self._graph_ids)
        tracker.thread = "backward"
        self._metadata: dict = {}
        low, high = None, None
        self._depth += 1
        try:
            with torch.no_grad():
                deps = self._dependencies([fn for (fn, _), _ in roots])
                needed = self._needed(deps, capture) if capture is not None else None
                buffers: dict = {}
                heap: list = []
                order = itertools.count()
                while roots:
                    (fn, nr), g = roots.pop(0)
                    self._add(buffers, fn, nr, g)
                    del g
                    deps[fn] -= 1
                    if deps[fn] == 0:
                        heapq.heappush(heap, (-fn._sequence_nr(), next(order), fn))
                while heap:
                    _, _, fn = heapq.heappop(heap)
                    inputs = buffers.pop(fn)
                    self._run_tensor_hooks(fn, inputs)
                    if capture is not None:
                        for nr, index in capture.get(fn, ()):
                            results[index] = inputs[nr]
                        if fn in capture or fn not in needed:
                            del inputs, fn
                            continue
                    seq = fn._sequence_nr()
                    if type(fn).__name__ != "AccumulateGrad":
                        low = seq if low is None else min(low, seq)
                        high = seq if high is None else max(high, seq)
                    self._run_node_prehooks(fn, inputs)
                    edges = fn.next_functions
                    # call_function: the node, then validate_outputs; then release_variables
                    with (contextlib.nullcontext() if keep_graph else self.saved.running(fn)), \
                            (tracker.deferred() if capture is not None
                             else contextlib.nullcontext()):
                        outputs = self._call(fn, inputs)
                        del inputs
                        if capture is not None:
                            self._drop_unneeded(outputs, edges, needed, capture)
                        for i, (nxt, nr) in enumerate(edges):
                            if i < len(outputs) and outputs[i] is not None and nxt is not None:
                                outputs[i] = self._validate(outputs[i], nxt, nr)
                    for i, (nxt, nr) in enumerate(edges):
                        g = outputs[i] if i < len(outputs) else None
                        if i < len(outputs):
                            outputs[i] = None
                        if nxt is None:
                            continue
                        self._add(buffers, nxt, nr, g)
                        g = None
                        deps[nxt] -= 1
                        if deps[nxt] == 0:
                            heapq.heappush(heap, (-nxt._sequence_nr(), next(order), nxt))
                    del outputs, fn
                if self._depth == 1:
                    while self._final_callbacks:
                        self._final_callbacks.pop(0)()
        finally:
            self._depth -= 1
            if self._depth == 0:
                self._final_callbacks.clear()
            self._graph_id, tracker.thread, tracker.backward_module = saved_state
            self._metadata = {}
        if not keep_graph and low is not None:
            graph = {fn._sequence_nr() for fn in deps if type(fn).__name__ != "AccumulateGrad"}
            self.saved.release_graph(low, high, graph)
            self._forget_tensor_hooks(low, high, graph)

    def _drop_unneeded(self, outputs: list, edges, needed: set, capture: dict) -> None:
        """Under ``grad``: the outputs going to nodes that lead to no input are dropped, and
        taken back from the trace if the node made them (the engine would not have computed
        them), unless an output that is needed shares their storage."""
        kept = set()
        unneeded = []
        for i, (nxt, _) in enumerate(edges):
            if i >= len(outputs) or outputs[i] is None:
                continue
            if nxt is not None and (nxt in needed or nxt in capture):
                kept.add(id(outputs[i].untyped_storage()))
            else:
                unneeded.append(i)
        for i in unneeded:
            if id(outputs[i].untyped_storage()) not in kept:
                self.tracker.retract(outputs[i])
            outputs[i] = None

    @staticmethod
    def _dependencies(root_fns) -> dict:
        deps: dict = defaultdict(int)
        seen = set()
        stack = []
        for fn in root_fns:
            deps[fn] += 1
            if fn not in seen:
                seen.add(fn)
                stack.append(fn)
        while stack:
            fn = stack.pop()
            for nxt, _ in fn.next_functions:
                if nxt is None:
                    continue
                deps[nxt] += 1
                if nxt not in seen:
                    seen.add(nxt)
                    stack.append(nxt)
        return deps

    @staticmethod
    def _needed(deps: dict, capture: dict) -> set:
        """The nodes from which a captured node can be reached (those the engine executes)."""
        parents: dict = defaultdict(list)
        for fn in deps:
            for nxt, _ in fn.next_functions:
                if nxt is not None:
                    parents[nxt].append(fn)
        needed = set()
        stack = [fn for fn in capture if fn in deps]
        while stack:
            fn = stack.pop()
            for parent in parents.get(fn, ()):
                if parent not in needed:
                    needed.add(parent)
                    stack.append(parent)
        return needed

    def _input_metadata(self, fn) -> list:
        md = self._metadata.get(fn)
        if md is None:
            try:
                md = [(tuple(m.shape), m.dtype) for m in fn._input_metadata]
            except AttributeError as e:
                raise TracerError("this PyTorch has no Node._input_metadata",
                                  f"torch {torch.__version__}",
                                  "use torch 2.3 or newer") from e
            self._metadata[fn] = md
        return md

    def _validate(self, g, fn, nr):
        """The engine's ``validate_outputs``: shape reduced to, and dtype cast to, what ``fn``
        expects at input ``nr``."""
        shape, dtype = self._input_metadata(fn)[nr]
        if tuple(g.shape) != shape:
            g = g.sum_to_size(shape)
        if g.dtype != dtype:
            g = g.to(dtype)
        return g

    def _storage_use_baseline(self, t) -> int:
        if self._storage_baseline is None:
            recording, self.tracker.recording = self.tracker.recording, False
            try:  # a probe made like every other tensor of the trace, but not part of it
                probe = torch.empty(1, dtype=t.dtype, device=t.device)
                self._storage_baseline = torch._C._storage_Use_Count(
                    probe.untyped_storage()._cdata)
                del probe
            finally:
                self.tracker.recording = recording
        return self._storage_baseline

    def _sole_owner(self, t, python_refs: int, check_storage: bool) -> bool:
        """Does only the engine hold ``t``? ``python_refs``: the references the caller knows of
        (sys.getrefcount counts this function's own two in addition)."""
        if sys.getrefcount(t) - 2 > python_refs:
            return False
        use_count = getattr(t, "_use_count", None)
        if use_count is not None and use_count() != 1:
            return False
        if check_storage:
            if not _is_non_overlapping_and_dense(t):
                return False
            counter = getattr(torch._C, "_storage_Use_Count", None)
            if counter is not None and counter(t.untyped_storage()._cdata) != \
                    self._storage_use_baseline(t):
                return False
        return True

    def _add(self, buffers: dict, fn, nr: int, g) -> None:
        """``InputBuffer::add``: put gradient ``g`` at input ``nr`` of ``fn``."""
        buf = buffers.get(fn)
        if buf is None:
            buf = buffers[fn] = [None] * len(self._input_metadata(fn))
        if g is None:
            return
        old = buf[nr]
        if old is None:
            buf[nr] = g
            return
        buf[nr] = None
        if self._sole_owner(old, 1, True):  # (dense tensors: only the buffered one is reused)
            old.add_(g)
            buf[nr] = old
        else:
            buf[nr] = old + g

    def _call(self, fn, inputs: list) -> list:
        tracker = self.tracker
        if type(fn).__name__ == "AccumulateGrad":
            self._accumulate(fn, inputs)
            return []
        scope = tracker.scope
        tracker.backward_module = (scope.module_of_node(fn) if scope is not None else None)
        if hasattr(fn, "_forward_cls"):  # a torch.autograd.Function's node
            return self._call_python_node(fn, inputs)
        out = fn(*inputs)
        inputs.clear()
        if isinstance(out, torch.Tensor):
            return [out]
        return list(out) if out is not None else []

    def _call_python_node(self, fn, inputs: list) -> list:
        """What PyNode::apply does around ``backward``: undefined gradients become zeros, and the
        results for the forward's arguments are matched to the node's edges (the j-th argument
        that needs a gradient goes to the j-th defined edge)."""
        metadata = self._input_metadata(fn)
        grads = []
        for i, g in enumerate(inputs):
            if g is None and getattr(fn, "materialize_grads", True) is not False:
                shape, dtype = metadata[i]
                g = torch.zeros(shape, dtype=dtype, device=DEVICE)
            grads.append(g)
        inputs.clear()
        out = fn.apply(*grads)
        del grads
        out = list(out) if isinstance(out, (tuple, list)) else [out]
        edges = fn.next_functions
        result = [None] * len(edges)
        edge_slots = [i for i, (n, _) in enumerate(edges) if n is not None]
        arg_slots = [i for i, needed in enumerate(fn.needs_input_grad) if needed]
        for arg, edge in zip(arg_slots, edge_slots):
            if arg < len(out):
                result[edge] = out[arg]
        return result

    def _unsharded_name(self, var) -> str | None:
        """The name of an FSDP2 unit's unsharded parameter `var`, or None for any other leaf.
        Its .grad is the unit's unsharded gradient, which post_backward reduce-scatters."""
        if not self._fsdp_units:
            return None
        name = self._unsharded_names.get(id(var))
        if name is None:
            for group in self._fsdp_units:
                for p in group.fsdp_params:
                    unsharded = getattr(p, "_unsharded_param", None)
                    if unsharded is not None:
                        self._unsharded_names[id(unsharded)] = self._fsdp_param_name(p)
            name = self._unsharded_names.get(id(var))
        return name

    def _fsdp_param_name(self, fsdp_param) -> str:
        """An FSDPParam's qualified name in the traced model: its module's path and attribute
        (FSDP2 sets `_param_fqn` only at its root's lazy init, which a pipeline stage skips)."""
        info = getattr(fsdp_param, "_module_info", None)
        module = self._module_names.get(id(getattr(info, "module", None)))
        if module is not None:
            return f"{module}.{info.param_name}" if module else info.param_name
        return getattr(fsdp_param, "_param_fqn", None) or "(FSDP2 parameter)"

    def _accumulate(self, fn, inputs: list) -> None:
        var = fn.variable
        g = inputs[0] if inputs else None
        inputs.clear()
        if g is None:
            return
        name = self.param_names.get(id(var))
        unsharded = name is None and (name := self._unsharded_name(var)) is not None
        scope = self.tracker.scope
        self.tracker.backward_module = (scope.module_of_param(name) if (name and scope is not None)
                                        else "backward")
        for hook in (getattr(var, "_backward_hooks", None) or {}).values():
            result = hook(g)
            if result is not None:
                g = result
        if var.grad is None:
            if self._sole_owner(g, 1, False) and _obeys_layout_contract(g, var):
                new = g.detach()  # stolen: no copy
            else:
                new = _clone_obey_contract(g, var)
            g = None
            var.grad = new
            del new
        else:
            var.grad.add_(g)
            g = None
        if name is not None:
            self.tracker.relabel(var.grad, "gradient",
                                 f"{name}.grad (unsharded)" if unsharded else f"{name}.grad")
        for hook in (getattr(var, "_post_accumulate_grad_hooks", None) or {}).values():
            hook(var)


def _fsdp_param_groups(model) -> list:
    """The FSDP2 parameter groups of `model`'s fully_shard units (none without FSDP2)."""
    groups = []
    for module in model.modules():
        get_state = getattr(module, "_get_fsdp_state", None)
        group = getattr(get_state(), "_fsdp_param_group", None) if get_state else None
        if group is not None:
            groups.append(group)
    return groups
