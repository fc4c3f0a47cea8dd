"""End-to-end tests of `vramscope predict --model org/name[@revision]`: a model named by its
Hugging Face Hub id. Offline, its config.json is read from a real cache layout (refs/,
snapshots/ linking into blobs/) under HF_HUB_CACHE and predicts what the same file given as a
path does, the report naming the id and the commit. Not cached, it is downloaded by
huggingface_hub (run by --python) from a local server standing in for the Hub through
HF_ENDPOINT, answering as the Hub does (X-Repo-Commit, ETag, X-Error-Code). Every failure (not
found, gated, offline, no huggingface_hub) is one line and a non-zero exit.

The download tests need a Python with huggingface_hub: $VRAMSCOPE_TORCH_PYTHON, else
~/.cache/vramscope/torch-venv/bin/python. Without one they skip, and fail where
VRAMSCOPE_REQUIRE_INSTALL=1 (CI) says they must run.
"""

from __future__ import annotations

import hashlib
import http.server
import json
import os
import subprocess
import threading
from pathlib import Path

import pytest

from conftest import REPO, assert_failure, run_binary

# meta-llama/Llama-3.2-1B's config.json (transformers 4.45), as the Hub serves it.
LLAMA_32_1B = json.loads((REPO / "examples" / "predict" / "llama3.2-1b.json").read_text())
# Its published size: embed_tokens (tied head) + 16 layers of GQA attention, MLP and two norms.
LLAMA_32_1B_PARAMETERS = 1_235_814_400
REPO_ID = "meta-llama/Llama-3.2-1B"
COMMIT = "4e20de362430cd3b72f300e6b0f18e50e7166e08"
OTHER_COMMIT = "221e3535e1ac4840bdf061a12b634139c84e144c"
SETUP = ("--seq", "256", "--steps", "1", "--json", "-q")


def hf_env(tmp_path: Path, **extra: str) -> dict:
    """Our environment with the Hugging Face variables pointed into tmp_path (none of the user's
    cache, token or endpoint leaks in), and no proxy for the local server."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("HF_", "HUGGINGFACE_")) and k.lower() not in (
               "http_proxy", "https_proxy", "all_proxy")}
    env.update(HF_HUB_CACHE=str(tmp_path / "hub"), HF_HOME=str(tmp_path / "hf-home"),
               HF_HUB_DISABLE_TELEMETRY="1", NO_PROXY="127.0.0.1,localhost")
    env.update(extra)
    return env


def write_cache(cache: Path, repo_id: str, commit: str, config: dict, ref: str = "main") -> Path:
    """The layout huggingface_hub writes: the blob named by its hash, the snapshot's config.json
    a relative link to it, refs/<ref> holding the commit."""
    repo = cache / ("models--" + repo_id.replace("/", "--"))
    text = json.dumps(config, indent=2).encode()
    blob = repo / "blobs" / hashlib.sha1(text).hexdigest()
    blob.parent.mkdir(parents=True, exist_ok=True)
    blob.write_bytes(text)
    snapshot = repo / "snapshots" / commit
    snapshot.mkdir(parents=True, exist_ok=True)
    (snapshot / "config.json").symlink_to(Path("..") / ".." / "blobs" / blob.name)
    (repo / "refs").mkdir(exist_ok=True)
    (repo / "refs" / ref).write_text(commit)
    return snapshot / "config.json"


def predict(tmp_path: Path, model: str, *args: str, env: dict) -> tuple[int, str, str]:
    return run_binary("predict", "--model", model, *args, cwd=tmp_path / "out", env=env,
                      timeout=180)


@pytest.fixture
def out(tmp_path) -> Path:
    d = tmp_path / "out"
    d.mkdir()
    return d


# --------------------------------------------------------------------------------------------
# Offline: the local cache
# --------------------------------------------------------------------------------------------


def test_cached_hub_id_predicts_what_its_config_file_does(tmp_path, out, vramscope_bin):
    config = write_cache(tmp_path / "hub", REPO_ID, COMMIT, LLAMA_32_1B)
    env = hf_env(tmp_path, HF_HUB_OFFLINE="1")  # never the network: the cache alone
    rc, by_id, err = predict(tmp_path, REPO_ID, *SETUP, env=env)
    assert rc == 0, err
    rc, by_path, err = predict(tmp_path, str(config.resolve()), *SETUP, env=env)
    assert rc == 0, err
    by_id, by_path = json.loads(by_id), json.loads(by_path)
    assert by_id["peak_usage_bytes"] == by_path["peak_usage_bytes"]
    by_id, by_path = by_id["prediction"], by_path["prediction"]
    assert by_id["parameters"] == by_path["parameters"] == LLAMA_32_1B_PARAMETERS
    assert by_id["model"].startswith(f"{REPO_ID}@{COMMIT[:12]} (llama)"), by_id["model"]
    assert list(out.iterdir()) == []


def test_revision_picks_its_snapshot(tmp_path, out, vramscope_bin):
    """@tag reads the tag's ref, @<commit> the snapshot itself; main stays main's."""
    write_cache(tmp_path / "hub", REPO_ID, COMMIT, LLAMA_32_1B)
    write_cache(tmp_path / "hub", REPO_ID, OTHER_COMMIT, dict(LLAMA_32_1B, num_hidden_layers=8),
                ref="v1")
    env = hf_env(tmp_path, HF_HUB_OFFLINE="1")
    models = {}
    for model in (REPO_ID, f"{REPO_ID}@v1", f"{REPO_ID}@{OTHER_COMMIT}"):
        rc, text, err = predict(tmp_path, model, *SETUP, env=env)
        assert rc == 0, err
        models[model] = json.loads(text)["prediction"]
    assert models[REPO_ID]["model"].startswith(f"{REPO_ID}@{COMMIT[:12]} ")
    for model in (f"{REPO_ID}@v1", f"{REPO_ID}@{OTHER_COMMIT}"):
        assert models[model]["model"].startswith(f"{REPO_ID}@{OTHER_COMMIT[:12]} ")
        assert models[model]["parameters"] < models[REPO_ID]["parameters"]


def test_a_file_of_that_name_stays_a_file(tmp_path, out, vramscope_bin):
    """org/name that exists on disk is the file, whatever the cache holds."""
    write_cache(tmp_path / "hub", REPO_ID, COMMIT, LLAMA_32_1B)
    local = out / REPO_ID
    local.parent.mkdir(parents=True)
    local.write_text(json.dumps(dict(LLAMA_32_1B, num_hidden_layers=4)))
    rc, text, err = predict(tmp_path, REPO_ID, *SETUP, env=hf_env(tmp_path, HF_HUB_OFFLINE="1"))
    assert rc == 0, err
    doc = json.loads(text)["prediction"]
    assert doc["model"].startswith(f"{REPO_ID} (llama)"), doc["model"]
    assert doc["parameters"] < LLAMA_32_1B_PARAMETERS


def test_offline_and_not_cached_is_one_line(tmp_path, out, vramscope_bin):
    rc, text, err = predict(tmp_path, "org/absent", *SETUP,
                            env=hf_env(tmp_path, HF_HUB_OFFLINE="1", HF_ENDPOINT="http://0.0.0.0:9"))
    assert_failure(rc, text, err, 2, ["--model org/absent", "HF_HUB_OFFLINE",
                                      "'hf download org/absent config.json'"], out)


def test_python_without_huggingface_hub_says_how_to_install_it(tmp_path, out, vramscope_bin):
    """python3 that cannot import huggingface_hub: a package of that name first on PYTHONPATH
    raising ImportError stands in for a missing install."""
    stub = tmp_path / "stub" / "huggingface_hub"
    stub.mkdir(parents=True)
    (stub / "__init__.py").write_text("raise ImportError('not installed')\n")
    env = hf_env(tmp_path, PYTHONPATH=str(stub.parent))
    rc, text, err = predict(tmp_path, "org/absent", *SETUP, env=env)
    assert_failure(rc, text, err, 2, ["needs huggingface_hub", "-m pip install huggingface_hub",
                                      "hf download org/absent config.json"], out)


# --------------------------------------------------------------------------------------------
# Not cached: downloaded by huggingface_hub from a stand-in Hub (HF_ENDPOINT)
# --------------------------------------------------------------------------------------------


def hub_python() -> str:
    python = os.environ.get("VRAMSCOPE_TORCH_PYTHON") or str(
        Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
        / "vramscope" / "torch-venv" / "bin" / "python")
    ok = Path(python).is_file() and subprocess.run(
        [python, "-c", "import huggingface_hub"], capture_output=True).returncode == 0
    if not ok:
        why = f"no Python with huggingface_hub ({python}; set VRAMSCOPE_TORCH_PYTHON)"
        if os.environ.get("VRAMSCOPE_REQUIRE_INSTALL") == "1":
            pytest.fail(why + " (VRAMSCOPE_REQUIRE_INSTALL=1)")
        pytest.skip(why)
    return python


class FakeHub(http.server.BaseHTTPRequestHandler):
    """HEAD and GET of {endpoint}/{repo}/resolve/{revision}/config.json, as file_download.py's
    get_hf_file_metadata and http_get make them, answered as huggingface.co does: the file with
    X-Repo-Commit, ETag and Content-Length; 401 RepoNotFound for an unknown repo, 401 GatedRepo
    for a gated one, 404 RevisionNotFound for an unknown revision."""

    repos = {REPO_ID: json.dumps(LLAMA_32_1B).encode()}
    gated = {"meta-llama/Gated"}
    requests: list[str] = []

    def answer(self, body: bool) -> None:
        FakeHub.requests.append(f"{self.command} {self.path}")
        repo, _, rest = self.path.split("?")[0].lstrip("/").partition("/resolve/")
        revision, _, filename = rest.rpartition("/")
        if repo in self.gated:
            return self.error(401, "GatedRepo", "Access to this model is restricted.")
        if repo not in self.repos:
            return self.error(401, "RepoNotFound", "Repository not found")
        if revision not in ("main", COMMIT):
            return self.error(404, "RevisionNotFound", "Invalid rev id")
        if filename != "config.json":
            return self.error(404, "EntryNotFound", "Entry not found")
        data = self.repos[repo]
        self.send_response(200)
        self.send_header("X-Repo-Commit", COMMIT)
        self.send_header("ETag", '"' + hashlib.sha1(data).hexdigest() + '"')
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        if body:
            self.wfile.write(data)

    def error(self, status: int, code: str, message: str) -> None:
        self.send_response(status)
        self.send_header("X-Error-Code", code)
        self.send_header("X-Error-Message", message)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def do_HEAD(self):  # noqa: N802 (http.server's names)
        self.answer(body=False)

    def do_GET(self):  # noqa: N802
        self.answer(body=True)

    def log_message(self, *args):
        pass


@pytest.fixture
def fake_hub():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), FakeHub)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    FakeHub.requests = []
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_download_fills_the_cache_then_reads_it(tmp_path, out, fake_hub, vramscope_bin):
    python = hub_python()
    env = hf_env(tmp_path, HF_ENDPOINT=fake_hub)
    rc, text, err = predict(tmp_path, REPO_ID, *SETUP, "--python", python, env=env)
    assert rc == 0, err
    doc = json.loads(text)["prediction"]
    assert doc["parameters"] == LLAMA_32_1B_PARAMETERS
    assert doc["model"].startswith(f"{REPO_ID}@{COMMIT[:12]} (llama)"), doc["model"]
    assert f"GET /{REPO_ID}/resolve/main/config.json" in FakeHub.requests, FakeHub.requests
    repo = tmp_path / "hub" / ("models--" + REPO_ID.replace("/", "--"))
    assert (repo / "refs" / "main").read_text() == COMMIT
    assert json.loads((repo / "snapshots" / COMMIT / "config.json").read_text()) == LLAMA_32_1B
    # Cached now: offline, and with no server, the same prediction.
    FakeHub.requests = []
    rc, again, err = predict(tmp_path, REPO_ID, *SETUP, env=hf_env(tmp_path, HF_HUB_OFFLINE="1"))
    assert rc == 0, err
    assert json.loads(again)["prediction"]["parameters"] == LLAMA_32_1B_PARAMETERS
    assert FakeHub.requests == []


@pytest.mark.parametrize("model, phrases", [
    ("org/absent", ["no such model on the Hugging Face Hub", "HF_TOKEN"]),
    ("meta-llama/Gated", ["a gated model", "accept its licence",
                          "https://huggingface.co/meta-llama/Gated", "HF_TOKEN"]),
    (f"{REPO_ID}@nope", ["the Hub has no revision 'nope'"]),
])
def test_download_failures_are_one_line(model, phrases, tmp_path, out, fake_hub, vramscope_bin):
    python = hub_python()
    rc, text, err = predict(tmp_path, model, *SETUP, "--python", python,
                            env=hf_env(tmp_path, HF_ENDPOINT=fake_hub))
    assert_failure(rc, text, err, 1, [f"--model {model}: ", *phrases], out)
    assert FakeHub.requests, "huggingface_hub asked the stand-in Hub nothing"


def test_unreachable_hub_is_one_line(tmp_path, out, vramscope_bin):
    """Nothing listens at HF_ENDPOINT: huggingface_hub's connection error, in one line."""
    python = hub_python()
    rc, text, err = predict(tmp_path, "org/absent", *SETUP, "--python", python,
                            env=hf_env(tmp_path, HF_ENDPOINT="http://127.0.0.1:9"))
    assert_failure(rc, text, err, 1, ["--model org/absent: ", "neither in the Hugging Face cache",
                                      "hf download org/absent config.json"], out)
