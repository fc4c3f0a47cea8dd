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


# vramscope's writer (vramscope.jax_memory.save_profile): the same profile, with roles.

def mlp():
    import gc

    gc.collect()  # the previous test's arrays, held in cycles (a jitted step's closure)
    key = jax.random.PRNGKey(1)
    params = {"w1": jax.random.normal(key, (200, 300)), "b1": jnp.zeros((300,)),
              "w2": jax.random.normal(key, (300, 20)), "b2": jnp.zeros((20,))}
    batch = jnp.ones((8, 200)), jnp.ones((8, 20))

    # The batch is an argument: arrays a jitted function closes over are live arrays that JAX's
    # profile leaves out.
    def loss(p, batch):
        x, y = batch
        h = jax.nn.relu(x @ p["w1"] + p["b1"])
        return jnp.mean((h @ p["w2"] + p["b2"] - y) ** 2)
    return params, loss, batch


def tree_bytes(tree):
    return sum(a.nbytes for a in jax.tree.leaves(tree))


def allocation_count(path):
    out = subprocess.run([BIN, "report", str(path), "--summary-only", "--json"],
                         capture_output=True, text=True, check=True)
    live = json.loads(out.stdout)["devices"][0]["live_at_peak"]["by_category"]
    return sum(c["count"] for c in live)


def test_after_a_jitted_step_the_weights_and_the_state_are_named(tmp_path):
    import vramscope.jax_memory

    params, loss, batch = mlp()
    opt = optax.adamw(1e-3)
    state = opt.init(params)

    @jax.jit
    def step(params, state, batch):
        value, grads = jax.value_and_grad(loss)(params, batch)
        updates, state = opt.update(grads, state, params)
        return optax.apply_updates(params, updates), state, value

    for _ in range(2):
        params, state, value = step(params, state, batch)
    jax.block_until_ready((params, state, value))
    path = tmp_path / "roles.prof"
    summary = vramscope.jax_memory.save_profile(path)
    assert summary["bytes"]["weight"] == tree_bytes(params)
    assert summary["bytes"]["optimizer_state"] == tree_bytes(state)
    document, device, by_category = report(path)
    assert device["at_dump"]["allocated_bytes"] == live_bytes()
    assert by_category["weight"] == tree_bytes(params)
    assert by_category["optimizer_state"] == tree_bytes(state)
    # The step, as XLA's analysis gives it: its temp buffer, and its arguments and outputs beyond
    # what is alive after it (the previous weights and state: nothing is donated).
    analysis = step.lower(params, state, batch).compile().memory_analysis()
    own = (analysis.argument_size_in_bytes + analysis.output_size_in_bytes
           - analysis.alias_size_in_bytes)
    assert summary["step"]["name"] == "jit_step" and summary["step"]["temp"] == \
        analysis.temp_size_in_bytes
    assert by_category["temporary"] == analysis.temp_size_in_bytes
    assert device["peak_allocated"]["bytes"] == max(own, live_bytes()) + analysis.temp_size_in_bytes
    assert by_category["unknown"] == \
        max(own, live_bytes()) - tree_bytes(params) - tree_bytes(state)
    notes = "\n".join(document["notes"])
    assert "each buffer's role as vramscope marked it" in notes
    assert "the step: jit_step (the largest compiled computation still alive" in notes
    # One allocation per live array (JAX's samples split back into buffers), then the step's two.
    step_parts = (analysis.temp_size_in_bytes > 0) + (own > live_bytes())
    assert allocation_count(path) == \
        len([a for a in jax.live_arrays() if a.nbytes > 0]) + step_parts


def test_weights_and_gradients_both_alive_are_not_guessed(tmp_path):
    """An unjitted loop leaves the gradients and updates alive beside the weights, with the same
    shapes: no rule tells them apart, so neither is named weights and the profile says so; passing
    weights= names them."""
    import vramscope.jax_memory

    params, loss, batch = mlp()
    opt = optax.sgd(1e-2, momentum=0.9)
    state = opt.init(params)
    grads = jax.grad(loss)(params, batch)
    updates, state = opt.update(grads, state, params)
    params = optax.apply_updates(params, updates)
    jax.block_until_ready((params, state, grads))

    path = tmp_path / "ambiguous.prof"
    summary = vramscope.jax_memory.save_profile(path)
    assert "weight" not in summary["bytes"]
    assert summary["bytes"]["optimizer_state"] == tree_bytes(state)
    document, _, by_category = report(path)
    assert by_category["weight"] == 0
    # Not the updates either, though optax's code made them: the writer's "unknown" stands.
    assert by_category["optimizer_state"] == tree_bytes(state)
    # The weights, the gradients and the updates.
    assert any(n.startswith("the profile says: vramscope: 3 live pytrees have the structure")
               for n in document["notes"]), document["notes"]

    named = tmp_path / "named.prof"
    vramscope.jax_memory.save_profile(named, weights=params)
    _, _, by_category = report(named)
    assert by_category["weight"] == tree_bytes(params)
    assert by_category["optimizer_state"] == tree_bytes(state)


def test_a_flax_nnx_model_and_its_optimizer(tmp_path):
    """flax nnx: the model's Param and BatchStat variables are its weights, each named by its path
    from the model; nnx.Optimizer's state is optax's. The gradients an unjitted step leaves alive
    are Param variables too, of an nnx.State no module holds: not weights."""
    nnx = pytest.importorskip("flax.nnx")
    import gc

    import vramscope.jax_memory

    gc.collect()

    class MLP(nnx.Module):
        def __init__(self, rngs):
            self.layers = nnx.List([nnx.Linear(96, 160, rngs=rngs), nnx.Linear(160, 12, rngs=rngs)])
            self.norm = nnx.BatchNorm(12, rngs=rngs)

        def __call__(self, x):
            return self.norm(self.layers[1](jax.nn.relu(self.layers[0](x))))

    model = MLP(nnx.Rngs(0))
    optimizer = nnx.Optimizer(model, optax.adam(1e-3), wrt=nnx.Param)
    x, y = jnp.ones((16, 96)), jnp.zeros((16,), jnp.int32)

    def loss_fn(model):
        return optax.softmax_cross_entropy_with_integer_labels(model(x), y).mean()

    @nnx.jit
    def train_step(model, optimizer):
        loss, grads = nnx.value_and_grad(loss_fn)(model)
        optimizer.update(model, grads)
        return loss

    for _ in range(2):
        loss = train_step(model, optimizer)
    grads = nnx.grad(loss_fn)(model)  # outside the step: alive beside the weights
    jax.block_until_ready((loss, grads))

    weights = tree_bytes(nnx.state(model, nnx.Param)) + tree_bytes(nnx.state(model, nnx.BatchStat))
    assert weights == 4 * (96 * 160 + 160 + 160 * 12 + 12 + 4 * 12)
    path = tmp_path / "nnx.prof"
    summary = vramscope.jax_memory.save_profile(path)
    assert summary["bytes"]["weight"] == weights
    assert summary["bytes"]["optimizer_state"] == tree_bytes(optimizer.opt_state)
    assert summary["bytes"]["unknown"] >= tree_bytes(grads)
    _, _, by_category = report(path)
    assert by_category["weight"] == weights
    assert by_category["optimizer_state"] == tree_bytes(optimizer.opt_state)
    out = subprocess.run([BIN, "report", str(path), "--summary-only", "--json", "--top", "20"],
                         capture_output=True, text=True, check=True)
    live = json.loads(out.stdout)["devices"][0]["live_at_peak"]["by_category"]
    owners = {o["owner"] for c in live if c["category"] == "weight"
              for o in c["largest_owners"]}
    assert {"MLP.layers.0.kernel", "MLP.layers.1.bias", "MLP.norm.mean"} <= owners, owners


def test_a_train_state_and_a_hand_written_optimizer(tmp_path):
    """A TrainState (any class of that name with params and opt_state, as flax's and many
    hand-written ones are) names both; a state outside optax is named by optimizer_state=."""
    import dataclasses

    import vramscope.jax_memory

    params, _, _ = mlp()

    @jax.tree_util.register_dataclass
    @dataclasses.dataclass
    class TrainState:
        params: dict
        opt_state: dict

    momentum = jax.tree.map(jnp.zeros_like, params)
    ts = TrainState(params=params, opt_state={"momentum": momentum})
    del params, momentum
    path = tmp_path / "train_state.prof"
    vramscope.jax_memory.save_profile(path)
    _, _, by_category = report(path)
    assert by_category["weight"] == tree_bytes(ts.params)
    assert by_category["optimizer_state"] == tree_bytes(ts.opt_state)

    params, _, _ = mlp()
    velocity = jax.tree.map(jnp.zeros_like, params)
    named = tmp_path / "named.prof"
    vramscope.jax_memory.save_profile(named, weights=params, optimizer_state=velocity)
    _, _, by_category = report(named)
    assert by_category["weight"] == tree_bytes(params) + tree_bytes(ts.params)
    assert by_category["optimizer_state"] == tree_bytes(velocity) + tree_bytes(ts.opt_state)


SHARDED = """
import sys
import jax, jax.numpy as jnp, optax
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
import vramscope.jax_memory

mesh = Mesh(jax.devices(), ("d",))
params = {"w": jax.device_put(jnp.ones((64, 32)), NamedSharding(mesh, P("d", None))),
          "b": jax.device_put(jnp.zeros((32,)), NamedSharding(mesh, P()))}
opt = optax.adam(1e-3)
state = opt.init(params)

@jax.jit
def step(p, s):
    g = jax.grad(lambda p: jnp.sum(p["w"] ** 2) + jnp.sum(p["b"]))(p)
    u, s = opt.update(g, s, p)
    return optax.apply_updates(p, u), s

params, state = step(params, state)
jax.block_until_ready((params, state))
vramscope.jax_memory.save_profile(sys.argv[1])
"""


def test_a_sharded_array_is_counted_on_each_device_it_lives_on(tmp_path):
    """Two CPU devices (XLA's host device count): the weight matrix split in rows, the bias
    replicated; each device holds half the matrix and a whole bias, as its weights."""
    script = tmp_path / "sharded.py"
    script.write_text(SHARDED)
    path = tmp_path / "sharded.prof"
    env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=2",
               PYTHONPATH=os.pathsep.join(p for p in (os.environ.get("PYTHONPATH"),) if p))
    import sys
    subprocess.run([sys.executable, str(script), str(path)], check=True, env=env)
    out = subprocess.run([BIN, "report", str(path), "--json"], capture_output=True, text=True,
                         check=True)
    devices = json.loads(out.stdout)["devices"]
    assert [d["device"] for d in devices] == [0, 1]
    for d in devices:
        by_category = {c["category"]: c["bytes"] for c in d["breakdown_at_peak"]["by_category"]}
        assert by_category["weight"] == 32 * 32 * 4 + 32 * 4
        assert by_category["optimizer_state"] == 2 * (32 * 32 * 4 + 32 * 4) + 4
