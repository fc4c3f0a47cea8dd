"""The tensors autograd saves for backward, labelled ``activation`` and released when their node
runs."""

from __future__ import annotations

import contextlib
import weakref
from collections import defaultdict

from .common import torch
from .tracking import StorageTracker, _sequence_nr_fn


class _Saved:
    """What a ``saved_tensors_hooks`` pack hook returns: holds the saved tensor until the tracer
    releases it (the engine's ``release_variables``)."""
    __slots__ = ("tensor", "__weakref__")

    def __init__(self, tensor):
        self.tensor = tensor


class SavedTensors:
    """Pack/unpack hooks for every tensor saved for backward: labels its storage ``activation``,
    and lets the executor release a node's saved tensors once the node has run.

    A node's tensors are saved while the node is being created, when the thread's autograd
    sequence counter stands at the node's sequence number + 1; that is how they are matched."""

    def __init__(self, tracker: StorageTracker):
        self.tracker = tracker
        self._seq = _sequence_nr_fn()
        self._by_seq: dict = defaultdict(list)   # counter at pack time -> weakrefs to _Saved
        self._unpacked: list[list] = []           # fallback without sequence numbers
        self._running: list = []                  # the nodes being run, innermost last

    def pack(self, t):
        rec = self.tracker.record_of(t)
        if rec is not None and rec.category == "temporary":
            if rec.node is not None:  # an output of a compiled forward graph: its FX node
                self.tracker.relabel(t, "activation", f"{rec.module}:{rec.node}")
            else:
                saver = self.tracker.current_module()
                self.tracker.relabel(t, "activation", f"{saver}:{rec.op}" if saver else rec.op)
        # detached: a saved *output* held by its own node would otherwise make a reference cycle
        holder = _Saved(t.detach())
        key = self._seq() if self._seq is not None else None
        self._by_seq[key].append(weakref.ref(holder))
        return holder

    def unpack(self, holder):
        if holder.tensor is None:
            raise RuntimeError("vramscope tracer: a saved tensor was used after its node had run "
                               "(retain_graph / double backward are not supported)")
        if self._unpacked:
            self._unpacked[-1].append(holder)
        return holder.tensor

    def hooks(self):
        return torch.autograd.graph.saved_tensors_hooks(self.pack, self.unpack)

    @contextlib.contextmanager
    def running(self, node):
        """Around a node's apply: afterwards its saved tensors are released, as the engine does."""
        self._unpacked.append([])
        self._running.append(node)
        try:
            yield
        finally:
            self._running.pop()
            used = self._unpacked.pop()
            if self._seq is not None:
                self._release(self._by_seq.pop(node._sequence_nr() + 1, ()))
            # What the node unpacked is its own whatever the counter said when it was packed: a
            # custom Function packs after its forward has run, and every Function applied inside
            # that forward (torchao's float8 casts) took a sequence number meanwhile.
            for holder in used:
                holder.tensor = None

    def release_running(self) -> None:
        """What ``ctx.maybe_clear_saved_tensors()`` does in a compiled graph's backward: the
        running node's saved tensors are let go before its graph runs, which then frees each at
        its last use."""
        if self._running and self._seq is not None:
            self._release(self._by_seq.pop(self._running[-1]._sequence_nr() + 1, ()))

    def release_graph(self, low: int, high: int, graph: set) -> None:
        """At the end of a backward: what the nodes of its graph (``graph``, their sequence
        numbers) between the first and the last it ran saved and did not unpack. Only theirs: a
        graph may hold a node made long before its others (autocast's cached weight copy, shared
        by every micro-batch's forward), and the nodes made in between belong to other graphs
        whose backward is still to come (a pipeline schedule's other micro-batches)."""
        for key in [k for k in self._by_seq
                    if k is not None and low <= k <= high + 1 and k - 1 in graph]:
            self._release(self._by_seq.pop(key))

    @staticmethod
    def _release(refs) -> None:
        for ref in refs:
            holder = ref()
            if holder is not None:
                holder.tensor = None
