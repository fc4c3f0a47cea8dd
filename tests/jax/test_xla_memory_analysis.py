"""vramscope.xla on real jitted training steps (jax[cpu] and optax from PyPI): the categories
`vramscope report` gives the recorded step equal the arrays' own sizes (jax.tree), and XLA's temp
buffer is the compiled step's temp_size_in_bytes."""

import json
import os
import subprocess

import pytest

jax = pytest.importorskip("jax")
optax = pytest.importorskip("optax")
import jax.numpy as jnp  # noqa: E402

import vramscope.xla  # noqa: E402

BIN = os.environ["VRAMSCOPE_BIN"]


def tree_bytes(tree):
    return sum(leaf.nbytes for leaf in jax.tree.leaves(tree))


def mlp(sizes, key):
    params = []
    for a, b in zip(sizes[:-1], sizes[1:]):
        key, k = jax.random.split(key)
        params.append({"w": jax.random.normal(k, (a, b), jnp.float32) * 0.01,
                       "b": jnp.zeros((b,), jnp.float32)})
    return params


def loss(params, x, y):
    h = x
    for p in params[:-1]:
        h = jax.nn.relu(h @ p["w"] + p["b"])
    return jnp.mean((h @ params[-1]["w"] + params[-1]["b"] - y) ** 2)


def make_step(opt, donate):
    def step(params, state, x, y):
        value, grads = jax.value_and_grad(loss)(params, x, y)
        updates, state = opt.update(grads, state, params)
        return optax.apply_updates(params, updates), state, value
    return jax.jit(step, donate_argnums=(0, 1) if donate else ())


def report(path):
    out = subprocess.run([BIN, "report", str(path), "--json"], capture_output=True, text=True,
                         check=True)
    device = json.loads(out.stdout)["devices"][0]
    by_category = {c["category"]: c for c in device["breakdown_at_peak"]["by_category"]}
    return device, by_category


@pytest.mark.parametrize("optimizer", ["adam", "sgd_momentum"])
def test_weights_and_optimizer_state_equal_the_arrays(tmp_path, optimizer):
    opt = optax.adam(1e-3) if optimizer == "adam" else optax.sgd(1e-2, momentum=0.9)
    params = mlp([256, 512, 512, 10], jax.random.PRNGKey(0))
    state = opt.init(params)
    x, y = jnp.ones((32, 256)), jnp.ones((32, 10))
    step = make_step(opt, donate=True)
    path = tmp_path / "step.xla.json"
    vramscope.xla.save_memory_analysis(step, params, state, x, y, path=path)
    compiled = step.lower(params, state, x, y).compile().memory_analysis()

    device, by_category = report(path)
    # Donated: the new weights and state are written into the old buffers.
    assert by_category["weight"]["bytes"] == tree_bytes(params)
    assert by_category["optimizer_state"]["bytes"] == tree_bytes(state)
    assert by_category["input"]["bytes"] == x.nbytes + y.nbytes
    owners = {o["owner"]: o["bytes"] for o in by_category["temporary"]["largest_owners"]}
    temp = [b for name, b in owners.items() if "XLA temp buffer" in name]
    assert temp == [compiled.temp_size_in_bytes]
    assert device["peak_allocated"]["bytes"] == (compiled.argument_size_in_bytes
                                                 + compiled.temp_size_in_bytes
                                                 + compiled.output_size_in_bytes
                                                 - compiled.alias_size_in_bytes)


def test_abstract_shapes_record_the_same_step_without_arrays(tmp_path):
    opt = optax.adam(1e-3)
    params = mlp([128, 256, 10], jax.random.PRNGKey(1))
    state = opt.init(params)
    x, y = jnp.ones((16, 128)), jnp.ones((16, 10))
    step = make_step(opt, donate=False)
    shapes = jax.tree.map(lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype), (params, state, x, y))
    real = vramscope.xla.memory_analysis(step, params, state, x, y)
    abstract = vramscope.xla.save_memory_analysis(step, *shapes, path=tmp_path / "a.json")
    assert abstract["memory_analysis"] == real["memory_analysis"]
    assert abstract["arguments"] == real["arguments"]
    _, by_category = report(tmp_path / "a.json")
    # Not donated: the step's new weights and state sit beside the old at the peak.
    assert by_category["weight"]["bytes"] == 2 * tree_bytes(params)
    assert by_category["optimizer_state"]["bytes"] == 2 * tree_bytes(state)


def test_written_file_is_never_half_written(tmp_path):
    opt = optax.adam(1e-3)
    params = mlp([8, 8], jax.random.PRNGKey(2))
    with pytest.raises(TypeError):
        vramscope.xla.save_memory_analysis(make_step(opt, False), params, "not a state",
                                           jnp.ones((2, 8)), jnp.ones((2, 8)),
                                           path=tmp_path / "x.json")
    assert list(tmp_path.iterdir()) == []
