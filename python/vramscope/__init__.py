"""vramscope's Python side: the tracer that predicts a training step's GPU memory without a GPU.

``python3 -m vramscope.tracer --help`` (with ``PYTHONPATH=python``); the stream it writes is read by
``vramscope predict``. See docs/design/tracer.md for the contract.
"""

STREAM_FORMAT = "vramscope-tensor-stream"
STREAM_VERSION = 1
