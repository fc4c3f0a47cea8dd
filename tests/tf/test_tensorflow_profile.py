"""TensorFlow's profiler on the CPU, recorded afresh with tensorflow-cpu and Keras: `vramscope
report` reads the .xplane.pb by content, the buffers vramscope.tf marks hold exactly the model's
variables (weights) and the optimizer's (optimizer state), and a profile TensorFlow recorded no
memory in is refused with the setting that fixes it.

Each recording runs in its own process: TF_CPU_ALLOCATOR_USE_BFC must be set before TensorFlow
starts."""

import json
import os
import sqlite3
import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("tensorflow")
pytest.importorskip("keras")

BIN = os.environ["VRAMSCOPE_BIN"]

RECORD = textwrap.dedent("""
    import json, sys
    import keras
    import tensorflow as tf
    import vramscope.tf

    logdir, optimizer, marks = sys.argv[1], sys.argv[2], sys.argv[3] == "marks"
    keras.utils.set_random_seed(0)
    opt = (keras.optimizers.Adam(1e-3) if optimizer == "adam"
           else keras.optimizers.SGD(1e-2, momentum=0.9))
    if marks:
        context = vramscope.tf.profile(logdir)
    else:
        tf.profiler.experimental.start(logdir)
    prof = context.__enter__() if marks else None
    model = keras.Sequential([keras.Input((48,)), keras.layers.Dense(96, activation="relu"),
                              keras.layers.Dense(96, activation="relu"), keras.layers.Dense(8)])
    model.compile(optimizer=opt,
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    x = tf.random.normal((96, 48))
    y = tf.random.uniform((96,), maxval=8, dtype=tf.int64)
    callbacks = [vramscope.tf.callback()] if marks else []
    model.fit(x, y, batch_size=32, epochs=1, verbose=0, callbacks=callbacks)
    if marks:
        vramscope.tf.mark_variables(model)
        context.__exit__(None, None, None)
        path = prof.path
    else:
        tf.profiler.experimental.stop()
        import glob
        path = glob.glob(logdir + "/plugins/profile/*/*.xplane.pb")[0]
    print(json.dumps({
        "path": path,
        "weights": sum(int(v.numpy().nbytes) for v in model.variables),
        "optimizer": {v.path: int(v.numpy().nbytes) for v in model.optimizer.variables},
    }))
""")


def record(tmp_path, optimizer="adam", marks=True, bfc=True):
    env = dict(os.environ, TF_CPU_ALLOCATOR_USE_BFC="true" if bfc else "false",
               TF_CPP_MIN_LOG_LEVEL="2")
    out = subprocess.run([sys.executable, "-c", RECORD, str(tmp_path / "logs"), optimizer,
                          "marks" if marks else "plain"],
                         capture_output=True, text=True, env=env, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1]), out.stderr


def report(path, tmp_path):
    db = tmp_path / "report.sqlite"
    out = subprocess.run([BIN, "report", path, "--json", "-o", str(db)], capture_output=True,
                         text=True, check=True)
    document = json.loads(out.stdout)
    with sqlite3.connect(db) as c:
        at_end = dict(c.execute(
            "SELECT category, SUM(requested_bytes) FROM vramscope_allocations "
            "WHERE alive_at_end = 1 GROUP BY category").fetchall())
        made = {category: (n, requested) for category, n, requested in c.execute(
            "SELECT category, COUNT(*), SUM(requested_bytes) FROM vramscope_allocations "
            "GROUP BY category").fetchall()}
    return document, at_end, made


@pytest.mark.parametrize("optimizer", ["adam", "sgd_momentum"])
def test_variables_are_weights_and_slots_optimizer_state(tmp_path, optimizer):
    expected, _ = record(tmp_path, optimizer)
    document, at_end, made = report(expected["path"], tmp_path)
    assert document["source"]["format"].startswith("profiler XSpace memory events")
    assert document["source"]["device_type"] == "cpu"
    assert at_end["weight"] == expected["weights"]
    # Keras keeps the learning rate's scalar outside the BFC allocator (the note names it).
    outside = {p: n for p, n in expected["optimizer"].items() if p.endswith("learning_rate")}
    assert at_end["optimizer_state"] == sum(expected["optimizer"].values()) - sum(outside.values())
    notes = "\n".join(document["notes"])
    assert "never matched a buffer" in notes and list(outside)[0] in notes
    assert "steps: the 3 calls of tf.function multi_step_on_iterator" in notes
    # Over the whole profile: each step makes a gradient of each of the 6 variables (requested
    # bytes: the variables' own), and the forward pass's outputs are activations.
    assert made["gradient"] == (3 * 6, 3 * expected["weights"])
    assert made["activation"][0] > 0


def test_without_marks_the_variables_are_not_told_apart(tmp_path):
    expected, _ = record(tmp_path, marks=False)
    document, at_end, _ = report(expected["path"], tmp_path)
    assert "weight" not in at_end
    assert any("no vramscope.variable marks" in n for n in document["notes"])


def test_a_profile_without_memory_events_says_what_to_set(tmp_path):
    expected, stderr = record(tmp_path, bfc=False)
    assert "TF_CPU_ALLOCATOR_USE_BFC=true" in stderr  # vramscope.tf.profile's warning
    out = subprocess.run([BIN, "report", expected["path"]], capture_output=True, text=True)
    assert out.returncode != 0
    assert "no memory events" in out.stderr
    assert "TF_CPU_ALLOCATOR_USE_BFC=true" in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1
