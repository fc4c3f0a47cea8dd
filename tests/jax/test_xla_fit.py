"""vramscope.xla.fit: the largest batch whose jitted step fits a budget, from XLA's memory analysis
compiled for abstract shapes (nothing allocated). The answer fits and the next size does not,
and its peak is the one `vramscope report` gives for the same memory analysis."""

import json
import os
import subprocess

import pytest

jax = pytest.importorskip("jax")
optax = pytest.importorskip("optax")
import jax.numpy as jnp  # noqa: E402

import vramscope.xla  # noqa: E402

BIN = os.environ["VRAMSCOPE_BIN"]

OPT = optax.adam(1e-3)
PARAMS = {"w1": jax.ShapeDtypeStruct((512, 1024), jnp.float32),
          "w2": jax.ShapeDtypeStruct((1024, 10), jnp.float32)}
STATE = jax.eval_shape(OPT.init, PARAMS)


def _step(params, state, x, y):
    def loss(p):
        return jnp.mean((jax.nn.relu(x @ p["w1"]) @ p["w2"] - y) ** 2)
    value, grads = jax.value_and_grad(loss)(params)
    updates, state = OPT.update(grads, state, params)
    return optax.apply_updates(params, updates), state, value


STEP = jax.jit(_step, donate_argnums=(0, 1))


def args_for(batch):
    return (PARAMS, STATE, jax.ShapeDtypeStruct((batch, 512), jnp.float32),
            jax.ShapeDtypeStruct((batch, 10), jnp.float32))


def test_the_answer_fits_and_the_next_size_does_not(tmp_path):
    result = vramscope.xla.fit(STEP, args_for, "40MiB")
    assert result["budget"] == 40 << 20
    best = result["batch"]
    peaks = {t["batch"]: t["peak"] for t in result["tried"]}
    assert result["peak"] == peaks[best] <= result["budget"]
    assert peaks[best + 1] > result["budget"]  # bisection ends on the two neighbours
    # Compiling the answer again gives the same analysis, whose report has that peak.
    path = tmp_path / "best.xla.json"
    vramscope.xla.save_memory_analysis(STEP, *args_for(best), path=path)
    assert vramscope.xla.step_peak(json.loads(path.read_text())) == result["peak"]
    out = subprocess.run([BIN, "report", str(path), "--json"], capture_output=True, text=True,
                         check=True)
    assert json.loads(out.stdout)["devices"][0]["peak_allocated"]["bytes"] == result["peak"]


def test_a_budget_below_the_first_size_has_no_answer():
    result = vramscope.xla.fit(STEP, args_for, 1 << 20)
    assert result["batch"] is None and result["analysis"] is None
    assert [t["batch"] for t in result["tried"]] == [1]


def test_the_limit_bounds_the_search():
    result = vramscope.xla.fit(STEP, args_for, "1GiB", limit=48)
    assert result["batch"] == 48
    assert [t["batch"] for t in result["tried"]] == [1, 2, 4, 8, 16, 32, 48]


@pytest.mark.parametrize("budget", ["lots", "12 parsecs", "-1GiB", 0, 1.5])
def test_a_budget_that_is_no_size_is_refused(budget):
    with pytest.raises((ValueError, TypeError), match="budget"):
        vramscope.xla.fit(STEP, args_for, budget)
