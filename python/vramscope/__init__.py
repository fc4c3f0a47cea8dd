"""vramscope from Python: where the GPU memory of a training step goes, and whether it fits.

The verbs of the command line as calls returning typed results (docs/guide/python.md)::

    import vramscope
    r = vramscope.report("snapshot.pickle")        # or a profiler trace, a capture folder...
    r.device().peak_allocated.bytes, r.device().categories_at_peak["activation"].bytes
    vramscope.predict("llama3-8b", batch=4, seq=2048, dtype="bf16", gpu="h100-80gb")
    vramscope.plan("llama2-7b", "rtx4090", seq=2048, dtype="bf16").options[0].flags
    vramscope.explain(open("train.log").read()).messages[0].verdict
    vramscope.simulate("snapshot.pickle", alloc_conf="expandable_segments:True")
    assert vramscope.diff("before.sqlite", "after.pickle", fail_if=["peak_allocated > +10%"])

Importing the package imports only the standard library: the tracer (``vramscope.tracer``) and
the capture bootstrap (``vramscope.bootstrap``) that ``vramscope run`` injects load torch only
when their own code runs.
"""

from .api import RunResult, diff, explain, plan, predict, report, run, simulate, split, view
from .comparison import Change, Comparison, DeviceComparison, GateOutcome, Growth
from .errors import (EngineNotFound, InputError, InternalError, UsageError,
                     VramscopeError)
from .explanation import Explanation, OomMessageExplanation
from .results import (CATEGORIES, Allocations, DeviceReport, Iteration, OwnerBytes, Peak,
                      Report, Timeline)
from .inprocess import Capture, capture, profile
from .ranks import RankSet, report_many
from .results import RankRow
from .planning import Plan, PlanOption
from .simulation import Simulation, SimulationRun

def load_ipython_extension(ipython: object) -> None:
    """``%load_ext vramscope``: the ``%vramscope`` and ``%%vramscope`` magics (docs/guide/python.md)."""
    from ._notebook import load_ipython_extension as load

    load(ipython)


# The tracer's stream format (read by `vramscope predict`; docs/design/tracer.md).
STREAM_FORMAT = "vramscope-tensor-stream"
STREAM_VERSION = 1

__all__ = [
    "report", "predict", "plan", "simulate", "view", "explain", "run", "diff", "RunResult",
    "Plan", "PlanOption",
    "report_many", "RankSet", "RankRow", "capture", "profile", "Capture",
    "Comparison", "DeviceComparison", "Change", "Growth", "GateOutcome",
    "Report", "DeviceReport", "Peak", "Iteration", "OwnerBytes", "Timeline", "Allocations",
    "CATEGORIES", "Simulation", "SimulationRun", "Explanation", "OomMessageExplanation",
    "VramscopeError", "InputError", "UsageError", "InternalError", "EngineNotFound",
    "STREAM_FORMAT", "STREAM_VERSION",
]
