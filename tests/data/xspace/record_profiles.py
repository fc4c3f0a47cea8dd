"""Records the XSpace profiles in this folder: a Keras MLP trained for two steps under
TensorFlow's profiler on the CPU, through vramscope.tf.profile, with vramscope.tf.callback()
marking the variables' buffers when training starts and after each batch.

    TF_CPU_ALLOCATOR_USE_BFC=true PYTHONPATH=python python tests/data/xspace/record_profiles.py

Recorded with tensorflow-cpu 2.21.0 and keras 3.15.1 (see README.md). Prints the variables'
sizes, which xspace_source_test checks the report against.
"""

import gzip
import os
import shutil
import sys
import tempfile

os.environ.setdefault("TF_CPU_ALLOCATOR_USE_BFC", "true")
import keras  # noqa: E402
import tensorflow as tf  # noqa: E402

import vramscope.tf  # noqa: E402

here = os.path.dirname(os.path.abspath(__file__))
keras.utils.set_random_seed(0)
logdir = tempfile.mkdtemp()
with vramscope.tf.profile(logdir) as prof:
    model = keras.Sequential([keras.Input((64,)), keras.layers.Dense(128, activation="relu"),
                              keras.layers.Dense(10)])
    model.compile(optimizer=keras.optimizers.Adam(1e-3),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    x = tf.random.normal((64, 64))
    y = tf.random.uniform((64,), maxval=10, dtype=tf.int64)
    model.fit(x, y, batch_size=32, epochs=1, verbose=0, callbacks=[vramscope.tf.callback()])
    vramscope.tf.mark_variables(model)
with open(prof.path, "rb") as src, gzip.open(os.path.join(here, "keras_mlp_adam.xplane.pb.gz"),
                                             "wb", compresslevel=9) as dst:
    shutil.copyfileobj(src, dst)
shutil.rmtree(logdir)
print("tensorflow", tf.__version__, "keras", keras.__version__, file=sys.stderr)
print("weights", sum(int(v.numpy().nbytes) for v in model.variables))
print("optimizer_state", sum(int(v.numpy().nbytes) for v in model.optimizer.variables))
