"""`vramscope run` on a JAX training loop, unchanged: the bootstrap takes JAX's device memory
profile at the end (<label>.jax.prof, with a sidecar), and the report of the folder is that
profile's: what is alive at its end is what jax.live_arrays() held when the program ended, with
the weights and Adam's state marked as such, and its peak is the jitted step's, from XLA's own
analysis of it. An out-of-memory error
the program dies of is written as `oom` with XLA's message; the flight recorder (--on-oom) writes
nothing at a normal exit.

The runs use the bootstrap's CPU test mode (VRAMSCOPE_CAPTURE_CPU=1): without it a CPU-only JAX
program is not recorded, as on a GPU machine a program that never used the GPU is not."""

import json
import os
import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("jax")
pytest.importorskip("optax")

BIN = os.environ["VRAMSCOPE_BIN"]

TRAIN = textwrap.dedent("""
    import json, sys
    import jax, jax.numpy as jnp, optax

    key = jax.random.PRNGKey(0)
    params = {"w1": jax.random.normal(key, (300, 700)), "b1": jnp.zeros((700,)),
              "w2": jax.random.normal(key, (700, 30)), "b2": jnp.zeros((30,))}
    opt = optax.adam(1e-3)
    state = opt.init(params)
    x, y = jnp.ones((16, 300)), jnp.ones((16, 30))

    @jax.jit
    def step(params, state, x, y):
        def loss(p):
            h = jax.nn.relu(x @ p["w1"] + p["b1"])
            return jnp.mean((h @ p["w2"] + p["b2"] - y) ** 2)
        value, grads = jax.value_and_grad(loss)(params)
        updates, state = opt.update(grads, state, params)
        return optax.apply_updates(params, updates), state, value

    for _ in range(3):
        params, state, value = step(params, state, x, y)
    jax.block_until_ready((params, state, value))
    with open(sys.argv[1], "w") as f:
        analysis = step.lower(params, state, x, y).compile().memory_analysis()
        json.dump({"live": sum(a.nbytes for a in jax.live_arrays()),
                   "temp": analysis.temp_size_in_bytes,
                   "step_own": analysis.argument_size_in_bytes
                               + analysis.output_size_in_bytes - analysis.alias_size_in_bytes,
                   "params": sum(a.nbytes for a in jax.tree.leaves(params)),
                   "state": sum(a.nbytes for a in jax.tree.leaves(state))}, f)
    if sys.argv[2] == "signal":
        # A scheduler's time limit: SIGTERM, which the program does not handle.
        import os, signal, time
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(30)
    if sys.argv[2] == "oom":
        # What XLA raises when the device's memory runs out (a CPU never does).
        raise jax.errors.JaxRuntimeError(
            "RESOURCE_EXHAUSTED: Out of memory while trying to allocate 17179869184 bytes.")
""")


def run(tmp_path, *flags, ending="exit", cpu_mode=True):
    script = tmp_path / "train_jax.py"
    script.write_text(TRAIN)
    expected = tmp_path / "expected.json"
    env = dict(os.environ, VRAMSCOPE_CAPTURE_CPU="1" if cpu_mode else "0")
    out = subprocess.run([BIN, "run", "-o", str(tmp_path / "out"), *flags, "--",
                          sys.executable, str(script), str(expected), ending],
                         capture_output=True, text=True, env=env, cwd=tmp_path)
    return out, (json.loads(expected.read_text()) if expected.exists() else None)


def test_the_profile_at_the_end_holds_the_live_arrays(tmp_path):
    out, expected = run(tmp_path, "--json")
    assert out.returncode == 0, out.stderr
    files = sorted(p.name for p in (tmp_path / "out").iterdir())
    label = files[0].split(".")[0]
    assert f"{label}.jax.prof" in files and f"{label}.sidecar.json" in files
    sidecar = json.loads((tmp_path / "out" / f"{label}.sidecar.json").read_text())
    assert sidecar["snapshot"] is None and sidecar["profile"] == f"{label}.jax.prof"
    assert sidecar["process"]["framework"] == "jax" and sidecar["end"]["reason"] == "exit"
    document = json.loads(out.stdout)
    assert document["source"]["format"].startswith("pprof device memory profile")
    assert document["source"]["format"].endswith("+ vramscope run sidecar")
    device = document["devices"][0]
    assert device["at_dump"]["allocated_bytes"] == expected["live"]
    # The step (jit_step, named by the bootstrap): XLA's temp buffer is the temporaries, and the
    # peak is XLA's figure for the step (its arguments and new outputs, more than is alive after
    # it, as nothing is donated) plus that buffer.
    assert device["peak_allocated"]["bytes"] == max(expected["live"], expected["step_own"]) \
        + expected["temp"]
    assert any(n.startswith("captured by 'vramscope run': process") and n.endswith(", jax")
               for n in document["notes"])
    # The roles the bootstrap marked: the weights are the params pytree, the optimizer state is
    # Adam's (mu, nu, count), to the byte; what is left (the batch, the loss) is unknown.
    by_category = {c["category"]: c["bytes"] for c in device["breakdown_at_peak"]["by_category"]}
    assert by_category["weight"] == expected["params"]
    assert by_category["optimizer_state"] == expected["state"]
    assert by_category["temporary"] == expected["temp"] > 0
    assert by_category["unknown"] == max(expected["live"], expected["step_own"]) \
        - expected["params"] - expected["state"]


def test_an_out_of_memory_error_is_written_with_xlas_message(tmp_path):
    out, expected = run(tmp_path, "--json", ending="oom")
    assert out.returncode == 1  # the program's own status: it died of the error
    assert "RESOURCE_EXHAUSTED" in out.stderr  # the program's traceback, as without vramscope
    document = json.loads(out.stdout)
    assert document["devices"][0]["peak_allocated"]["bytes"] >= expected["live"]
    notes = "\n".join(document["notes"])
    assert "the program ran out of GPU memory; XLA said: RESOURCE_EXHAUSTED" in notes


def test_sigterm_writes_the_profile_then_the_program_dies_of_it(tmp_path):
    out, expected = run(tmp_path, "--json", ending="signal")
    assert out.returncode == 128 + 15, out.stderr  # the program's own end: killed by SIGTERM
    sidecar = json.loads(next((tmp_path / "out").glob("*.sidecar.json")).read_text())
    assert sidecar["end"]["reason"] == "signal" and sidecar["end"]["exception"] == "signal 15"
    document = json.loads(out.stdout)
    assert document["devices"][0]["at_dump"]["allocated_bytes"] == expected["live"]


def test_the_flight_recorder_writes_only_for_an_out_of_memory_error(tmp_path):
    out, _ = run(tmp_path, "--on-oom")
    assert out.returncode == 0
    assert "no out-of-memory error" in out.stderr
    assert not (tmp_path / "out").exists()
    out, _ = run(tmp_path, "--on-oom", "--json", ending="oom")
    assert out.returncode == 1
    sidecars = list((tmp_path / "out").glob("*.sidecar.json"))
    assert json.loads(sidecars[0].read_text())["end"]["reason"] == "oom"


def test_a_cpu_only_program_outside_the_test_mode_is_not_recorded(tmp_path):
    out, expected = run(tmp_path, cpu_mode=False)
    assert out.returncode == 0 and expected is not None
    assert "nothing was captured" in out.stderr
    assert not (tmp_path / "out").exists()
