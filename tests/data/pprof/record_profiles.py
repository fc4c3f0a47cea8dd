# How tests/data/pprof/*.prof were recorded (see README.md); run with jax[cpu] and optax.
import jax, jax.numpy as jnp, optax
def init(key, sizes):
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
params = init(jax.random.PRNGKey(0), [512, 1024, 1024, 10])
opt = optax.adam(1e-3)
state = opt.init(params)
x = jnp.ones((64, 512)); y = jnp.ones((64, 10))
def live():
    return sum(a.nbytes for a in jax.live_arrays()), len(jax.live_arrays())
jax.profiler.save_device_memory_profile("mlp_adam_after_init.prof")
print("after init", live(), "params", sum(a.nbytes for a in jax.tree.leaves(params)), "state", sum(a.nbytes for a in jax.tree.leaves(state)))
@jax.jit
def step(params, state, x, y):
    l, g = jax.value_and_grad(loss)(params, x, y)
    u, state = opt.update(g, state, params)
    return optax.apply_updates(params, u), state, l
for i in range(3):
    params, state, l = step(params, state, x, y)
l.block_until_ready()
jax.profiler.save_device_memory_profile("mlp_adam_after_step.prof")
print("after step", live())
# vramscope's writer (python/vramscope on PYTHONPATH): the same profile, one sample per live array
# with its role.
import vramscope.jax_memory
print(vramscope.jax_memory.save_profile("mlp_adam_after_step_roles.prof"))
