"""A user's test file for vramscope's pytest plugin (run by test_pytest_plugin.py with the
installed package): a 2-layer MLP's training step, one limit it fits and one it does not. The
file is copied to a temporary folder as test_step_limits.py so that pytest collects it there and
never here."""

import pytest
import torch


def build():
    return torch.nn.Sequential(torch.nn.Linear(1024, 4096), torch.nn.ReLU(),
                               torch.nn.Linear(4096, 1024))


def make_batch(batch_size):
    return torch.randn(batch_size, 1024)


@pytest.mark.gpu_memory(limit="1 GiB")
def test_under_the_limit(vramscope_step):
    report = vramscope_step(build, make_batch, torch.optim.AdamW, batch=8)
    assert report.predicted == (not torch.cuda.is_available())
    # AdamW's two states of every parameter: (1024 x 4096 + 4096 + 4096 x 1024 + 1024) x 4 B each.
    assert report.device().categories_at_peak["optimizer_state"].bytes == 2 * 33_574_912


@pytest.mark.gpu_memory(limit="100 MiB")
def test_over_the_limit(vramscope_step):
    vramscope_step(build, make_batch, "adamw", batch=8)
