"""`vramscope.predict(model=<nn.Module>, inputs=...)`: the module object traced in the caller's
process (python/vramscope/traced.py) predicts what the same model given as FILE.py:FUNCTION does
through `vramscope predict --python` (a tracer process), and the caller's module is untouched."""

import pytest

torch = pytest.importorskip("torch")
import vramscope  # noqa: E402 (after the torch check)

MODEL_FILE = '''
import torch


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.up = torch.nn.Linear(256, 1024)
        self.down = torch.nn.Linear(1024, 256)
        self.norm = torch.nn.LayerNorm(256)

    def forward(self, x):
        return self.norm(x + self.down(torch.nn.functional.gelu(self.up(x))))


def build():
    return torch.nn.Sequential(Block(), Block())


def vramscope_inputs(batch_size, seq_len, image_size):
    return torch.randn(batch_size, 64, 256)
'''


@pytest.mark.parametrize("dtype, optimizer", [("fp32", "adamw"), ("bf16-amp", "sgd")])
def test_a_module_object_predicts_what_its_file_does(tmp_path, monkeypatch, dtype, optimizer):
    path = tmp_path / "model.py"
    path.write_text(MODEL_FILE)
    monkeypatch.syspath_prepend(str(tmp_path))
    import importlib

    model_file = importlib.import_module("model")
    module = model_file.build()
    before = {n: p.detach().clone() for n, p in module.named_parameters()}
    from_object = vramscope.predict(module, inputs=lambda n: model_file.vramscope_inputs(n, 0, 0),
                                    batch=4, dtype=dtype, optimizer=optimizer, database=False)
    import sys

    from_file = vramscope.predict(f"{path}:build", batch=4, dtype=dtype, optimizer=optimizer,
                                  python=sys.executable, database=False)
    a, b = from_object.device(), from_file.device()
    assert (a.peak_allocated.bytes, a.peak_reserved.bytes) == \
        (b.peak_allocated.bytes, b.peak_reserved.bytes)
    assert {c: s.bytes for c, s in a.categories_at_peak.items()} == \
        {c: s.bytes for c, s in b.categories_at_peak.items()}
    # Two blocks' parameters, fp32: (256*1024 + 1024 + 1024*256 + 256 + 2*256) * 2 * 4 B.
    assert a.categories_at_peak["weight"].bytes == (256 * 1024 * 2 + 1024 + 256 + 512) * 2 * 4
    # The caller's module is as it was: real CPU tensors, the same values.
    for name, p in module.named_parameters():
        assert p.device.type == "cpu" and torch.equal(p.detach(), before[name])


def test_a_module_needs_its_inputs():
    with pytest.raises(vramscope.UsageError, match="needs inputs="):
        vramscope.predict(torch.nn.Linear(4, 4))
