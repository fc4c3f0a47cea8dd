"""The Python API (docs/guide/python.md) from the freshly installed package, in the fresh virtual
environment `pip install .` made (conftest.py): it finds its own installed program, its typed
results equal the report database's columns on every golden and real fixture, a transformers
config object predicts what its config.json does, errors are typed, and Ctrl-C stops a call and
leaves the interpreter alive."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path


from conftest import SOURCE, clean_env, skip_unless_required, torch_python

sys.path.insert(0, str(SOURCE / "tests" / "support"))
from captures import unpack_capture, unpack_two_rank_capture  # noqa: E402

SHARED = Path(os.environ.get("VRAMSCOPE_SHARED_DIR") or SOURCE.parent / "shared")
FIXTURES = SHARED / "fixtures" / "real"
HERE = Path(__file__).resolve().parent


def installed_python(installed, code, *args, timeout=600, **kwargs):
    return subprocess.run([str(installed.python), "-c", code, *args], capture_output=True,
                          text=True, env=clean_env(), timeout=timeout, **kwargs)


def test_every_field_equals_the_database(installed, tmp_path):
    """Every golden snapshot, trace and capture folder, and every real fixture: the API's fields
    against the database's columns (api_against_database.py reads it with its own SQL)."""
    inputs = sorted(str(p) for p in (SOURCE / "goldens").rglob("*")
                    if p.name.endswith((".pickle.gz", ".json.gz", ".vstrace")))
    runs, _ = unpack_two_rank_capture(tmp_path)
    inputs.append(str(runs))
    fixtures = sorted(str(p) for p in FIXTURES.iterdir()
                      if p.name.endswith((".pickle", ".json.gz"))) if FIXTURES.is_dir() else []
    if not fixtures:
        print(f"no real fixtures at {FIXTURES}: the goldens only")
    work = tmp_path / "work"
    work.mkdir()
    proc = subprocess.run([str(installed.python), str(HERE / "api_against_database.py"),
                           str(work), *inputs, *fixtures], capture_output=True, text=True,
                          env=clean_env(), timeout=1200, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["mismatches"] == []
    assert result["checked"] == len(inputs) + len(fixtures)
    assert result["checked"] > 100 and result["fields"] > 100 * result["checked"], result


def test_transformers_config_object_equals_its_config_json(installed, tmp_path):
    """predict(model=GPT2Config()) is `vramscope predict --model config.json` for the file
    GPT2Config().to_json_file() writes (transformers lives in the torch environment)."""
    python = torch_python()
    if not python.exists() or subprocess.run([str(python), "-c", "import transformers"],
                                             capture_output=True, env=clean_env()).returncode:
        skip_unless_required(f"no Python with transformers at {python}")
    code = ("import sys, json; sys.path.insert(0, sys.argv[1]); import vramscope\n"
            "from transformers import GPT2Config\n"
            "r = vramscope.predict(GPT2Config(), batch=2, seq=128, database=False)\n"
            "GPT2Config().to_json_file(sys.argv[2])\n"
            "d = r.device()\n"
            "print(json.dumps([d.peak_allocated.bytes, d.peak_reserved.bytes, "
            "{c: s.bytes for c, s in d.categories_at_peak.items()}]))\n")
    config = tmp_path / "config.json"
    env = clean_env(PATH=f"{installed.bin}{os.pathsep}{os.environ.get('PATH', '')}")
    proc = subprocess.run([str(python), "-c", code, str(installed.site_packages), str(config)],
                          capture_output=True, text=True, env=env, timeout=600, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    api = json.loads(proc.stdout.strip().splitlines()[-1])
    cli = subprocess.run([str(installed.vramscope), "predict", "--model", str(config), "--batch",
                          "2", "--seq", "128", "--json", "--quiet"], capture_output=True,
                         text=True, env=clean_env(), timeout=600)
    assert cli.returncode == 0, cli.stderr
    device = json.loads(cli.stdout)["devices"][0]
    assert api == [device["peak_allocated"]["bytes"], device["peak_reserved"]["bytes"],
                   {c["category"]: c["bytes"] for c in device["live_at_peak"]["by_category"]}]
    assert api[0] > 1 << 30  # GPT-2 small, batch 2 x 128 under AdamW: model states alone ~2 GB


def test_a_cut_off_snapshot_is_a_partial_report(installed, tmp_path):
    """A snapshot cut off while written is reported up to the cut, and the Report says so."""
    whole = (SOURCE / "examples" / "synthetic_mlp_adam_step.pickle").read_bytes()
    cut = tmp_path / "cut.pickle"
    cut.write_bytes(whole[:len(whole) * 3 // 4])
    code = ("import sys, vramscope\n"
            "r = vramscope.report(sys.argv[1], database=False)\n"
            "w = vramscope.report(sys.argv[2], database=False)\n"
            "print(r.partial, r.cut_at_byte, w.partial, w.cut_at_byte)\n"
            "print(0 < r.device().events < w.device().events)\n")
    proc = installed_python(installed, code, str(cut),
                            str(SOURCE / "examples" / "synthetic_mlp_adam_step.pickle"),
                            cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == [f"True {len(whole) * 3 // 4} False None", "True"]


def test_a_window_of_a_recording(installed, tmp_path):
    """from_=, to= and step_range= are --from, --to and --step-range: the built-in example's
    second iteration holds fewer events than the whole, and a keyword's trailing underscore is
    dropped."""
    code = ("import vramscope\n"
            "whole = vramscope.report(database=False)\n"
            "part = vramscope.report(database=False, from_=50, to=120)\n"
            "step = vramscope.report(database=False, step_range='2')\n"
            "print(whole.device().events, part.device().events, len(step.device().iterations))\n")
    proc = installed_python(installed, code, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["193", "71", "1"]
    # split() returns the pieces in order; each reports its part of the trace.
    code = ("import vramscope\n"
            "pieces = vramscope.split(None, 3, output='.')\n"
            "print(*[p.name for p in pieces])\n"
            "print(sum(vramscope.report(p, database=False).device().events for p in pieces))\n")
    proc = installed_python(installed, code, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == [
        " ".join(f"vramscope-example.part{i}of3.pickle" for i in (1, 2, 3)), "193"]


def test_errors_are_typed_with_the_commands_line(installed, tmp_path):
    code = ("import vramscope\n"
            "for call in (lambda: vramscope.report('missing.pickle'),\n"
            "             lambda: vramscope.predict('gpt2', no_such_option=1),\n"
            "             lambda: vramscope.predict(3.5)):\n"
            "    try:\n"
            "        call()\n"
            "    except vramscope.VramscopeError as e:\n"
            "        print(type(e).__name__, e.exit_code, e.message)\n"
            "print(bool(vramscope.explain('no message here')))\n")
    proc = installed_python(installed, code, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0] == "InputError 1 missing.pickle: no such file"
    assert lines[1].startswith("UsageError 2 ") and "--no-such-option" in lines[1]
    assert lines[2].startswith("UsageError 2 predict(model=...) takes")
    assert lines[3] == "False"


def test_ctrl_c_stops_the_call_and_leaves_python_alive(installed, tmp_path):
    """SIGINT to a Python inside a long call (the program predicting a 405B model over many
    steps): KeyboardInterrupt reaches the caller, the program is gone, and the interpreter goes
    on to its next statement."""
    # Ctrl-C as an interactive Python has it, even when this test runs where SIGINT is ignored
    # (a background job of a shell: its children inherit SIG_IGN).
    code = ("import os, signal, sys, time, vramscope\n"
            "signal.signal(signal.SIGINT, signal.default_int_handler)\n"
            "print('started', flush=True)\n"
            "t = time.monotonic()\n"
            "try:\n"
            "    vramscope.predict('llama3-405b', batch=64, steps=1000, max_events=100000000, "
            "database=False)\n"
            "    print('finished')\n"
            "except KeyboardInterrupt:\n"
            "    print('interrupted after', round(time.monotonic() - t, 1), flush=True)\n"
            "print('alive', vramscope.explain('x').messages)\n")
    proc = subprocess.Popen([str(installed.python), "-c", code], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=clean_env(), cwd=tmp_path)
    assert proc.stdout.readline().strip() == "started"
    time.sleep(2)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert "interrupted after" in out and "alive ()" in out, (out, err)
    assert "finished" not in out
    leftovers = subprocess.run(["pgrep", "-f", "llama3-405b"], capture_output=True, text=True)
    assert leftovers.stdout.strip() == "", "the vramscope program outlived the interrupt"


def test_typed_package_passes_mypy_strict_on_the_examples(installed, tmp_path):
    """The installed package is typed (py.typed): `mypy --strict` on examples/python_api/, run
    in the fresh environment against what pip installed, not the checkout."""
    assert (installed.site_packages / "vramscope" / "py.typed").is_file()
    pip = subprocess.run([str(installed.python), "-m", "pip", "install", "-q",
                          "--disable-pip-version-check", "mypy"], capture_output=True, text=True,
                         env=clean_env(), timeout=600)
    if pip.returncode != 0:
        skip_unless_required(f"pip cannot install mypy: {pip.stderr.strip()[-300:]}")
    examples = sorted(str(p) for p in (SOURCE / "examples" / "python_api").glob("*.py"))
    assert examples
    proc = subprocess.run([str(installed.python), "-m", "mypy", "--strict", "--no-incremental",
                           *examples], capture_output=True, text=True, env=clean_env(),
                          timeout=600, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.startswith("Success: no issues found")


REPORT_MANY = """
import json, sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
import vramscope


def main():
    folder = Path(sys.argv[1])
    paths = sorted(str(p) for p in folder.glob("*.pickle"))[::-1]  # any order: rows come sorted
    report = vramscope.report(folder, database=folder / "r.sqlite", force=True)
    out = {"folder": [list(r.__dict__.values()) for r in report.ranks()]}
    with ProcessPoolExecutor(2) as pool:
        pooled = vramscope.report_many(paths, pool)
    out["pool"] = [list(r.__dict__.values()) for r in pooled.rows]
    out["bounding"] = pooled.bounding.label
    if sys.argv[2] == "dask":
        from distributed import Client, LocalCluster
        with LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                          dashboard_address=None) as cluster, Client(cluster) as client:
            rows = vramscope.report_many(paths, client).rows
        out["dask"] = [list(r.__dict__.values()) for r in rows]
    print(json.dumps(out))


if __name__ == "__main__":  # Dask's and the pool's workers import this file
    main()
"""


def test_report_many_on_a_process_pool_and_dask_equals_report_folder(installed, tmp_path):
    """A four-rank pipeline-parallel job (ranks 2 and 3 hold more): each rank reported by a
    worker of a ProcessPoolExecutor, and of a Dask LocalCluster, merged into the same rank rows
    as `vramscope report FOLDER`."""
    runs, case = unpack_capture(tmp_path, "ranks4_pp_fsdp2_gpt_adamw_fp32")
    dask = subprocess.run([str(installed.python), "-m", "pip", "install", "-q",
                           "--disable-pip-version-check", "dask[distributed]"],
                          capture_output=True, text=True, env=clean_env(), timeout=900)
    mode = "dask" if dask.returncode == 0 else "pool"
    if mode == "pool":
        print(f"pip cannot install dask: the process pool only ({dask.stderr.strip()[-200:]})")
    script = tmp_path / "report_many.py"
    script.write_text(REPORT_MANY)
    proc = subprocess.run([str(installed.python), str(script), str(runs), mode],
                          capture_output=True, text=True, env=clean_env(), timeout=900,
                          cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert len(got["folder"]) == 4
    assert got["pool"] == got["folder"]
    # PyTorch's own peaks of the ranks, and the bounding one the folder's report names.
    assert [r[4] for r in got["pool"]] == [case["ranks"][f"rank{i}"]["max_memory_reserved"]
                                           for i in range(4)]
    assert got["bounding"] == "rank2"
    if mode == "dask":
        assert got["dask"] == got["folder"]
    else:
        skip_unless_required("dask could not be installed from PyPI (the process pool passed)")
