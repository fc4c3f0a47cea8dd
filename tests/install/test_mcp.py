"""`vramscope mcp` from the installed command, with `mcp` (and jsonschema) installed from PyPI
into the fresh environment: a real MCP client session lists and calls every tool
(mcp_session.py)."""

import json
import subprocess

import pytest

from conftest import SOURCE, clean_env, skip_unless_required


def test_a_real_client_session_lists_and_calls_every_tool(installed, tmp_path):
    pip = subprocess.run([str(installed.python), "-m", "pip", "install", "-q",
                          "--disable-pip-version-check", "mcp", "jsonschema"],
                         capture_output=True, text=True, env=clean_env(), timeout=900)
    if pip.returncode != 0:
        skip_unless_required(f"pip cannot install mcp: {pip.stderr.strip()[-300:]}")
    goldens = SOURCE / "goldens" / "h100"
    proc = subprocess.run(
        [str(installed.python), str(SOURCE / "tests" / "install" / "mcp_session.py"),
         str(installed.vramscope), str(installed.python), str(SOURCE / "schemas"),
         str(goldens / "gpt_adamw_fp32.pickle.gz"), str(goldens / "gpt_adamw_bf16.pickle.gz")],
        capture_output=True, text=True, env=clean_env(), timeout=600, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-4000:]
    seen = json.loads(proc.stdout.strip().splitlines()[-1])
    assert seen["tools"] == ["diff", "explain", "plan", "predict", "report", "simulate"]
    assert seen["documented"]
    assert seen["report"] == {"schema_version": 3}
    assert seen["explain"] == {"schema_version": 3}
    assert seen["simulate"] == {"schema_version": 1}
    assert seen["diff"] == {"schema_version": 1, "failed": False}
    assert seen["predict"]["fit"].startswith("largest batch that fits: ")
    assert seen["plan"]["schema_version"] == 1 and seen["plan"]["options"] >= 1
    assert seen["error"] == [True, "Error executing tool report: /nonexistent/run.pickle: "
                                   "no such file"]


def test_without_the_mcp_package_it_says_how_to_get_it(installed, tmp_path):
    """The fresh environment before mcp is installed is not guaranteed (the test above installs
    it), so this runs the system's Python when it lacks mcp."""
    probe = subprocess.run(["python3", "-c", "import mcp"], capture_output=True, env=clean_env())
    if probe.returncode == 0:
        pytest.skip("python3 here has mcp installed")
    proc = subprocess.run([str(installed.vramscope), "mcp", "--python", "python3"],
                          capture_output=True, text=True, env=clean_env(), timeout=120,
                          stdin=subprocess.DEVNULL)
    assert proc.returncode == 1
    assert proc.stderr.count("\n") == 1 and "pip install mcp" in proc.stderr, proc.stderr
