"""End-to-end tests of `vramscope predict --plan`: the options that make a step fit a budget,
cheapest first, each of which, predicted again with its flags added, fits that budget; a set-up
that fits as it is; nothing fits, in one line with exit 1 (and the JSON still printed); and bad
budgets and conflicting flags, in one line with exit 2.
"""

from __future__ import annotations

import json

import pytest

from conftest import assert_failure, predict_json

GPT2 = ["--model", "gpt2", "--batch", "32", "--seq", "1024"]


def test_every_option_fits_when_predicted_again(run):
    doc = predict_json(run, *GPT2, "--plan", "24GiB")
    plan = doc["plan"]
    assert not plan["baseline_fits"]
    assert plan["options"], plan
    seconds = [o["added_seconds"] for o in plan["options"] if not o["changes_training"]]
    assert seconds == sorted(seconds)
    for option in plan["options"]:
        flags = option["flags"]
        # The option's flags set what they name (--batch 16 replaces the set-up's --batch 32).
        base = GPT2 if "--batch" not in flags else ["--model", "gpt2", "--seq", "1024"]
        again = predict_json(run, *base, *flags, "--capacity", "24GiB", "--steps", "2")
        assert again["devices"][0]["peak_reserved"]["bytes"] <= plan["capacity_bytes"]
        assert not again["devices"][0]["oom"], option


def test_terminal_table_names_the_flags(run):
    rc, out, err = run("predict", *GPT2, "--plan", "24GiB")
    assert rc == 0, err
    assert "options that fit, cheapest first" in out or "1 option that fits" in out
    assert "flags: " in out
    assert "(changes what is trained)" in out  # LoRA, offered after the others


def test_a_step_that_fits_needs_nothing(run):
    doc = predict_json(run, "--model", "gpt2", "--plan", "h100-80gb")
    assert doc["plan"]["baseline_fits"]
    assert doc["plan"]["options"] == []


def test_seventy_b_on_one_gpu_says_why_nothing_fits(run, tmp_path):
    rc, out, err = run("predict", "--model", "llama2-70b", "--dtype", "bf16", "--plan", "rtx4090",
                       "--json", cwd=tmp_path)
    assert rc == 1
    assert "the weights alone" in json.loads(out)["plan"]["nothing_fits"]
    assert err.startswith("vramscope: error: --plan: nothing fits: the weights alone")
    assert err.count("\n") == 1


def test_seventy_b_on_eight_gpus_proposes_zero_three(run):
    doc = predict_json(run, "--model", "llama2-70b", "--seq", "4096", "--dtype", "bf16",
                       "--plan", "8xh100-80gb")
    first = doc["plan"]["options"][0]
    assert "ZeRO-3 (FSDP)" in first["techniques"]
    assert first["flags"][-2:] == ["--world-size", "8"]


def test_seven_b_on_a_24_gib_card_offers_an_8_bit_optimizer_then_lora_and_qlora(run):
    """The issue's case: llama2-7b at 2048 tokens on an RTX 4090. Each option, predicted again
    with its flags on that card, fits; LoRA and QLoRA come after the options that train the
    whole model, and QLoRA (NF4 base weights) needs less than LoRA."""
    base = ["--model", "llama2-7b", "--seq", "2048", "--dtype", "bf16"]
    plan = predict_json(run, *base, "--plan", "rtx4090")["plan"]
    options = plan["options"]
    assert any(t.startswith("paged 8-bit AdamW") or t.startswith("8-bit AdamW")
               for t in options[0]["techniques"]), options[0]
    lora = next(o for o in options if o["flags"] == ["--lora", "16"])
    qlora = next(o for o in options if o["flags"] == ["--qlora", "16"])
    assert lora["changes_training"] and qlora["changes_training"]
    assert options.index(lora) < options.index(qlora) and not options[-1]["changes_training"] \
        or options[-1] in (lora, qlora)
    assert qlora["peak_reserved_bytes"] < lora["peak_reserved_bytes"]
    again = predict_json(run, *base, "--qlora", "16", "--gpu", "rtx4090", "--steps", "2")
    assert not again["devices"][0]["oom"]
    assert again["devices"][0]["peak_reserved"]["bytes"] <= plan["capacity_bytes"]


def test_seventy_b_fits_48_gib_only_through_qlora(run):
    """QLoRA's own claim (a 65B model fine-tuned on one 48 GB GPU): llama2-70b at 512 tokens on
    48 GiB has one option, QLoRA; its NF4 weights alone are about 32 GiB."""
    plan = predict_json(run, "--model", "llama2-70b", "--seq", "512", "--dtype", "bf16",
                        "--plan", "48GiB")["plan"]
    assert [o["flags"][:2] for o in plan["options"]] == [["--qlora", "16"]]
    assert plan["options"][0]["peak_reserved_bytes"] <= plan["capacity_bytes"]


@pytest.mark.parametrize("args, phrases", [
    (["--plan", "24GiB", "--fit", "24GiB"], ["choose one"]),
    (["--plan", "0xh100-80gb"], ["1 to 1048576 GPUs"]),
    (["--plan", "8x"], ["give a GPU or a size"]),
    (["--plan", "h900"], ["--plan"]),
    (["--host-memory", "64GiB"], ["--plan"]),
    (["--plan", "24GiB", "--tp", "2"], ["not searched yet"]),
    (["--plan", "24GiB", "-o", "x.sqlite"], ["drop -o"]),
])
def test_bad_budgets_fail_in_one_line(run, tmp_path, args, phrases):
    rc, out, err = run("predict", *GPT2, *args, cwd=tmp_path)
    assert_failure(rc, out, err, 2, phrases, tmp_path)


@pytest.mark.parametrize("model, kind", [("mixtral-8x7b", "a mixture of experts"),
                                         ("deepseek-v3", "a mixture of experts")])
def test_models_predicted_per_rank_are_pointed_to_fit_layout(run, tmp_path, model, kind):
    """A mixture of experts has no step simulation: --plan used to print its one-rank table as
    if no --plan had been given; it says it does not search it, and what does."""
    rc, out, err = run("predict", "--model", model, "--plan", "8xh100-80gb", cwd=tmp_path)
    assert_failure(rc, out, err, 2, ["--plan", kind, "--fit-dim layout"], tmp_path)


def test_resnet_is_pointed_to_fit(run, tmp_path):
    rc, out, err = run("predict", "--model", "resnet50", "--plan", "t4", cwd=tmp_path)
    assert_failure(rc, out, err, 2, ["--fit"], tmp_path)


def test_python_plan_and_its_options_as_keywords(vramscope_bin, monkeypatch):
    """vramscope.plan() is `predict --plan`; an option's `options` are predict()'s keywords, and
    predicting with them gives the option's peak. Nothing fitting is an answer (falsy)."""
    import sys

    from conftest import BIN, REPO

    monkeypatch.setenv("VRAMSCOPE_BIN", str(BIN))
    monkeypatch.syspath_prepend(str(REPO / "python"))
    for name in [m for m in sys.modules if m == "vramscope" or m.startswith("vramscope.")]:
        monkeypatch.delitem(sys.modules, name)
    import vramscope

    plan = vramscope.plan("gpt2", "24GiB", batch=32, seq=1024)
    assert plan and not plan.baseline_fits
    first = plan.options[0]
    keywords = {"seq": 1024, "batch": 32, **first.options}
    report = vramscope.predict("gpt2", capacity="24GiB", steps=2, database=False, **keywords)
    assert report.device().peak_reserved.bytes == first.peak_reserved
    nothing = vramscope.plan("llama2-70b", "rtx4090", dtype="bf16")
    assert not nothing and "the weights alone" in nothing.nothing_fits
    with pytest.raises(vramscope.UsageError):
        vramscope.predict("gpt2", plan="24GiB")
