"""The capture bootstrap under the Hugging Face Trainer and Lightning, on the CPU."""

import pytest

pytest.importorskip("torch")

PHASES = ["forward", "backward", "optimizer", "between"]

HF_TRAINER = r'''
import torch
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments

torch.manual_seed(0)
config = GPT2Config(n_layer=2, n_embd=32, n_head=2, vocab_size=64, n_positions=16)
model = GPT2LMHeadModel(config)

class Data(torch.utils.data.Dataset):
    def __len__(self):
        return 64
    def __getitem__(self, i):
        ids = torch.randint(0, 64, (16,))
        return {"input_ids": ids, "labels": ids}

args = TrainingArguments(output_dir="hf_out", max_steps=3, per_device_train_batch_size=2,
                         use_cpu=True, report_to=[], save_strategy="no", logging_strategy="no",
                         disable_tqdm=True, dataloader_num_workers=0)
Trainer(model=model, args=args, train_dataset=Data()).train()
print("trained")
'''


def test_hf_trainer(run_script, helpers):
    pytest.importorskip("transformers")
    pytest.importorskip("accelerate")
    r = run_script(HF_TRAINER, env={"VRAMSCOPE_STEPS": "2"})
    assert r.rc == 0, r.stderr
    assert "trained" not in r.stdout
    assert r.vramscope_lines() == [
        "vramscope: captured 2 steps; stopping the program "
        "(vramscope run --keep-running to let it finish)"]
    s = r.sidecar()
    assert s["process"]["framework"] == "hf-trainer"
    assert s["end"]["reason"] == "steps" and s["end"]["steps_completed"] == 2
    steps = helpers.phases_by_step(s)
    assert steps[1] == PHASES and steps[2] == PHASES

    params = {t["name"]: t for t in helpers.tensors(s, "parameter")}
    w = params["transformer.h.0.attn.c_attn.weight"]
    assert w["shape"] == [32, 96] and w["nbytes"] == 32 * 96 * 4
    assert "transformer.wte.weight" in params
    grads = {t["name"] for t in helpers.tensors(s, "gradient") if t["step"] == 1}
    assert "transformer.h.1.mlp.c_fc.weight" in grads
    state = {t["name"] for t in helpers.tensors(s, "optimizer_state")}
    assert "transformer.h.0.attn.c_attn.weight.exp_avg" in state
    assert "transformer.h.0.attn.c_attn.weight.exp_avg_sq" in state


LIGHTNING = r'''
import torch
import lightning as L

class Task(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(),
                                         torch.nn.Linear(16, 1))
    def training_step(self, batch, batch_idx):
        x, y = batch
        return torch.nn.functional.mse_loss(self.model(x), y)
    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=1e-3)

data = torch.utils.data.TensorDataset(torch.randn(32, 8), torch.randn(32, 1))
loader = torch.utils.data.DataLoader(data, batch_size=4)
trainer = L.Trainer(accelerator="cpu", devices=1, max_steps=3, logger=False,
                    enable_checkpointing=False, enable_progress_bar=False,
                    enable_model_summary=False)
trainer.fit(Task(), loader)
print("fitted")
'''


def test_lightning(run_script, helpers):
    pytest.importorskip("lightning")
    r = run_script(LIGHTNING, env={"VRAMSCOPE_STEPS": "0"})
    assert r.rc == 0, r.stderr
    assert "fitted" in r.stdout
    assert r.vramscope_lines() == []
    s = r.sidecar()
    assert s["process"]["framework"] == "lightning"
    assert s["end"]["reason"] == "exit" and s["end"]["steps_completed"] == 3
    # Lightning runs forward and backward inside optimizer.step(closure): still in this order.
    steps = helpers.phases_by_step(s)
    assert [steps[i] for i in (1, 2, 3)] == [PHASES] * 3
    params = {t["name"]: t for t in helpers.tensors(s, "parameter")}
    assert set(params) == {"model.0.weight", "model.0.bias", "model.2.weight", "model.2.bias"}
    grads = [t for t in helpers.tensors(s, "gradient") if t["step"] == 3]
    assert {t["name"] for t in grads} == set(params)
    state = {t["name"] for t in helpers.tensors(s, "optimizer_state")}
    assert "model.0.weight.exp_avg" in state


def test_lightning_stops_at_steps(run_script):
    pytest.importorskip("lightning")
    r = run_script(LIGHTNING.replace("max_steps=3", "max_steps=6"), env={"VRAMSCOPE_STEPS": "2"})
    assert r.rc == 0, r.stderr
    assert "fitted" not in r.stdout
    assert r.vramscope_lines() == [
        "vramscope: captured 2 steps; stopping the program "
        "(vramscope run --keep-running to let it finish)"]
    s = r.sidecar()
    assert s["end"]["reason"] == "steps" and s["end"]["steps_completed"] == 2
