"""JAX's device memory profile (jax.profiler.save_device_memory_profile, pprof) recorded afresh
with jax[cpu] and optax: `vramscope report` reads it by content, its total is what
jax.live_arrays() holds, and after optax's init the optimizer state is the state's jax.tree
size."""

import json
import os
import subprocess

import pytest

jax = pytest.importorskip("jax")
optax = pytest.importorskip("optax")
import jax.numpy as jnp  # noqa: E402

BIN = os.environ["VRAMSCOPE_BIN"]


def report(path):
    out = subprocess.run([BIN, "report", str(path), "--json"], capture_output=True, text=True,
                         check=True)
    document = json.loads(out.stdout)
    device = document["devices"][0]
    by_category = {c["category"]: c["bytes"]
                   for c in device["breakdown_at_peak"]["by_category"]}
    return document, device, by_category


def live_bytes():
    return sum(a.nbytes for a in jax.live_arrays())


def test_profile_after_init_and_after_a_step(tmp_path):
    key = jax.random.PRNGKey(0)
    params = {"w1": jax.random.normal(key, (300, 700)), "b1": jnp.zeros((700,)),
              "w2": jax.random.normal(key, (700, 30)), "b2": jnp.zeros((30,))}
    opt = optax.adam(1e-3)
    state = opt.init(params)
    x, y = jnp.ones((16, 300)), jnp.ones((16, 30))
    jax.block_until_ready((params, state, x, y))
    before = tmp_path / "after_init.prof"
    jax.profiler.save_device_memory_profile(str(before))
    expected_before = live_bytes()

    document, device, by_category = report(before)
    assert document["source"]["format"].startswith("pprof device memory profile")
    assert device["peak_allocated"]["bytes"] == expected_before
    assert by_category["optimizer_state"] == sum(a.nbytes for a in jax.tree.leaves(state))

    @jax.jit
    def step(params, state, x, y):
        def loss(p):
            h = jax.nn.relu(x @ p["w1"] + p["b1"])
            return jnp.mean((h @ p["w2"] + p["b2"] - y) ** 2)
        value, grads = jax.value_and_grad(loss)(params)
        updates, state = opt.update(grads, state, params)
        return optax.apply_updates(params, updates), state, value

    params, state, value = step(params, state, x, y)
    jax.block_until_ready((params, state, value))
    after = tmp_path / "after_step.prof"
    jax.profiler.save_device_memory_profile(str(after))
    _, device, by_category = report(after)
    assert device["peak_allocated"]["bytes"] == live_bytes()
    # The step made the new state: no buffer carries optax's frames any more.
    assert by_category.get("optimizer_state", 0) == 0
