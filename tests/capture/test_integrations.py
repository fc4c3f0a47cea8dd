"""The training-framework callbacks (python/vramscope/integrations/): a Hugging Face Trainer and a
Lightning Trainer, real CPU training loops, each capturing in-process under torchrun's rank label,
writing the rank's files, and explaining an out-of-memory error before the process dies. On a
CPU the bootstrap's test mode writes the sidecar and no snapshot, so the callbacks say that there
is no report; on a GPU they write rank<N>.sqlite and rank<N>.html beside it."""

import json
import os

import pytest

from test_frameworks import HF_TRAINER, LIGHTNING

OOM = ("CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.15 GiB "
       "of which 1.50 GiB is free. Process 1234 has 77.64 GiB memory in use. Of the allocated "
       "memory 70.00 GiB is allocated by PyTorch, and 5.00 GiB is reserved by PyTorch but "
       "unallocated.")


def bin_env(**extra):
    env = {"VRAMSCOPE_BIN": os.environ["VRAMSCOPE_BIN"]} if os.environ.get("VRAMSCOPE_BIN") else {}
    env.update(extra)
    return env


def test_hf_callback_captures_two_steps_of_rank0(run_script, tmp_path, helpers):
    pytest.importorskip("transformers")
    out = tmp_path / "vs"
    source = HF_TRAINER.replace(
        "Trainer(model=model, args=args, train_dataset=Data()).train()",
        "from vramscope.integrations.hf import VramscopeCallback\n"
        f"Trainer(model=model, args=args, train_dataset=Data(),\n"
        f"        callbacks=[VramscopeCallback(steps=2, output_dir={str(out)!r})]).train()")
    r = run_script(source, capture_dir=False, env=bin_env(RANK="0"))
    assert r.rc == 0, r.stderr
    assert "trained" in r.stdout  # the run goes on after the steps captured
    assert sorted(p.name for p in out.iterdir()) == ["rank0.sidecar.json"]
    s = json.loads((out / "rank0.sidecar.json").read_text())
    assert s["process"]["framework"] == "hf-trainer" and s["process"]["rank"] == 0
    assert s["end"]["reason"] == "steps" and s["end"]["steps_completed"] == 2
    assert helpers.phases_by_step(s)[2] == ["forward", "backward", "optimizer", "between"]
    assert f"vramscope: rank0: no snapshot to report in {out}" in r.stderr


def test_lightning_callback_explains_an_out_of_memory_error(run_script, tmp_path):
    pytest.importorskip("lightning")
    out = tmp_path / "vs"
    source = LIGHTNING.replace(
        "        return torch.nn.functional.mse_loss(self.model(x), y)",
        "        if batch_idx == 1:\n"
        f"            raise torch.OutOfMemoryError({OOM!r})\n"
        "        return torch.nn.functional.mse_loss(self.model(x), y)").replace(
        "enable_model_summary=False)",
        "enable_model_summary=False,\n"
        "                    callbacks=[__import__('vramscope.integrations.lightning', "
        f"fromlist=['x']).VramscopeCallback(output_dir={str(out)!r})])")
    r = run_script(source, capture_dir=False, env=bin_env(RANK="1"))
    assert r.rc != 0 and "OutOfMemoryError" in r.stderr
    lines = [line for line in r.stderr.splitlines() if line.startswith("vramscope: ")]
    assert lines[0].startswith("vramscope: out of memory (fragmentation): This process's "
                               "tensors fill the GPU"), r.stderr
    assert any(line.startswith("vramscope:   try: ") for line in lines), lines
    s = json.loads((out / "rank1.sidecar.json").read_text())
    assert s["end"]["reason"] == "oom" and s["end"]["steps_completed"] == 1
