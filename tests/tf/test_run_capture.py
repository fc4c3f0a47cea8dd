"""`vramscope run` on a Keras training loop, unchanged: the bootstrap starts TensorFlow's profiler
at `import tensorflow`, marks the model's variables after every batch, stops after --steps
batches and writes <label>.xplane.pb with a sidecar; the report of the folder puts the model's
variables under weights and the optimizer's under optimizer state, byte for byte.

The runs use the bootstrap's CPU test mode (VRAMSCOPE_CAPTURE_CPU=1), which also turns on the
BFC allocator TensorFlow records CPU memory through (TF_CPU_ALLOCATOR_USE_BFC)."""

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

TRAIN = textwrap.dedent("""
    import json, sys
    import keras
    import tensorflow as tf

    class Sizes(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            with open(sys.argv[1], "w") as f:
                json.dump({
                    "batches": batch + 1,
                    "weights": sum(int(v.numpy().nbytes) for v in self.model.variables),
                    "optimizer": {v.path: int(v.numpy().nbytes)
                                  for v in self.model.optimizer.variables},
                }, f)

    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((48,)), keras.layers.Dense(96, activation="relu"),
                              keras.layers.Dense(8)])
    model.compile(optimizer=keras.optimizers.Adam(1e-3),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    x = tf.random.normal((128, 48))
    y = tf.random.uniform((128,), maxval=8, dtype=tf.int64)
    model.fit(x, y, batch_size=32, epochs=1, verbose=0, callbacks=[Sizes()])
    open(sys.argv[1] + ".done", "w").close()
    if sys.argv[2:] == ["signal"]:
        # A scheduler's time limit: SIGTERM, which the program does not handle.
        import os, signal, time
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(30)
""")


def run(tmp_path, *flags, ending="exit", rc=0):
    script = tmp_path / "train_tf.py"
    script.write_text(TRAIN)
    expected = tmp_path / "expected.json"
    env = dict(os.environ, VRAMSCOPE_CAPTURE_CPU="1", TF_CPP_MIN_LOG_LEVEL="2")
    env.pop("TF_CPU_ALLOCATOR_USE_BFC", None)
    out = subprocess.run([BIN, "run", "-o", str(tmp_path / "out"), "--json", *flags, "--",
                          sys.executable, str(script), str(expected), ending],
                         capture_output=True, text=True, env=env, cwd=tmp_path)
    assert out.returncode == rc, out.stderr
    return out, json.loads(expected.read_text())


def at_end(database):
    """Requested bytes alive at the end, by category (the breakdown at the peak is in the BFC
    allocator's rounded sizes, and a peak can fall inside a variable's copy-on-write update)."""
    with sqlite3.connect(database) as c:
        return dict(c.execute(
            "SELECT category, SUM(requested_bytes) FROM vramscope_allocations "
            "WHERE alive_at_end = 1 GROUP BY category").fetchall())


def report_at_end(folder, tmp_path):
    database = tmp_path / "report.sqlite"
    subprocess.run([BIN, "report", str(folder), "-o", str(database), "-q"], check=True)
    return at_end(database)


def optimizer_bytes(expected):
    # Keras keeps the learning rate's scalar outside the BFC allocator (the report notes it).
    return sum(n for p, n in expected["optimizer"].items() if not p.endswith("learning_rate"))


def test_steps_stop_the_fit_and_the_variables_are_named(tmp_path):
    out, expected = run(tmp_path, "--steps", "2")
    assert not (tmp_path / "expected.json.done").exists()  # stopped after the second batch
    assert expected["batches"] == 2
    files = sorted(p.name for p in (tmp_path / "out").iterdir())
    label = files[0].split(".")[0]
    assert f"{label}.xplane.pb" in files and f"{label}.sidecar.json" in files
    assert not any(name.startswith(".") for name in files)  # the profiler's folder is gone
    sidecar = json.loads((tmp_path / "out" / f"{label}.sidecar.json").read_text())
    assert sidecar["end"] == {**sidecar["end"], "reason": "steps", "steps_completed": 2}
    document = json.loads(out.stdout)
    assert document["source"]["format"].startswith("profiler XSpace memory events")
    notes = "\n".join(document["notes"])
    assert "the capture ended after 2 training steps (--steps)" in notes
    assert "adam/learning_rate" in notes  # the one variable outside the BFC allocator
    categories = report_at_end(tmp_path / "out", tmp_path)
    assert categories["weight"] == expected["weights"]
    assert categories["optimizer_state"] == optimizer_bytes(expected)


def test_without_steps_the_whole_fit_is_recorded(tmp_path):
    out, expected = run(tmp_path)
    assert (tmp_path / "expected.json.done").exists() and expected["batches"] == 4
    document = json.loads(out.stdout)
    assert "steps: the 4 calls of tf.function" in "\n".join(document["notes"])
    categories = report_at_end(tmp_path / "out", tmp_path)
    assert categories["weight"] == expected["weights"]
    assert categories["optimizer_state"] == optimizer_bytes(expected)


def test_sigterm_stops_the_profiler_and_writes_the_profile(tmp_path):
    out, expected = run(tmp_path, ending="signal", rc=128 + 15)
    assert (tmp_path / "expected.json.done").exists()
    files = sorted(p.name for p in (tmp_path / "out").iterdir())
    assert not any(name.startswith(".") for name in files)  # the profiler's folder is gone
    sidecar = json.loads(next((tmp_path / "out").glob("*.sidecar.json")).read_text())
    assert sidecar["end"]["reason"] == "signal" and sidecar["end"]["exception"] == "signal 15"
    assert json.loads(out.stdout)["source"]["format"].startswith("profiler XSpace memory events")
    categories = report_at_end(tmp_path / "out", tmp_path)
    assert categories["weight"] == expected["weights"]
    assert categories["optimizer_state"] == optimizer_bytes(expected)


def test_the_python_api_reports_the_capture(tmp_path, monkeypatch):
    import vramscope

    script = tmp_path / "train_tf.py"
    script.write_text(TRAIN)
    monkeypatch.setenv("VRAMSCOPE_CAPTURE_CPU", "1")
    monkeypatch.setenv("TF_CPP_MIN_LOG_LEVEL", "2")
    monkeypatch.delenv("TF_CPU_ALLOCATOR_USE_BFC", raising=False)
    result = vramscope.run([sys.executable, str(script), str(tmp_path / "expected.json")],
                           output=tmp_path / "out", steps=1, quiet=True)
    expected = json.loads((tmp_path / "expected.json").read_text())
    assert result.exit_code == 0 and result.report is not None
    assert result.report.device().categories_at_peak["weight"].count == 4  # 2 kernels, 2 biases
    categories = at_end(tmp_path / "out" / "report.sqlite")
    assert categories["weight"] == expected["weights"]
    assert categories["optimizer_state"] == optimizer_bytes(expected)
