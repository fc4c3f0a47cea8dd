"""The parent side of the golden-capture scripts: child processes under a time-out, the suites'
driver (fresh Pythons, --jobs at a time, metadata.json after every case), the common flags, the
size of a suite's files. Stdlib only."""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import traceback
from pathlib import Path

from .common import (DEFAULT_MAX_ENTRIES, ENV_KEYS, REPO, STAGE_TAG, fmt_bytes, gpu_metadata,
                     stages_of, utc_now, write_json)


def _text(b) -> str:
    return b.decode(errors="replace") if isinstance(b, bytes) else (b or "")


def run_process(cmd: list[str], *, env: dict | None = None, cwd=None, timeout: float | None = None,
                new_session: bool = False) -> dict:
    """Runs `cmd` to its end or `timeout` seconds: {"rc" (None when timed out), "timed_out",
    "seconds", "stdout", "stderr"}. Past the time-out the child is killed (with new_session, its
    whole session: torchrun's ranks, a compiler's workers), and what it wrote is kept."""
    t0 = time.perf_counter()
    with subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          text=True, start_new_session=new_session) as proc:
        try:
            out, err = proc.communicate(timeout=timeout)
            timed_out = False
        except subprocess.TimeoutExpired:
            timed_out = True
            if new_session:
                os.killpg(proc.pid, signal.SIGKILL)
            else:
                proc.kill()
            try:  # the rest of its output; a grandchild that holds the pipes is not waited for
                out, err = proc.communicate(timeout=10)
            except subprocess.TimeoutExpired as e:
                out, err = _text(e.stdout), _text(e.stderr)
    return {"rc": None if timed_out else proc.returncode, "timed_out": timed_out,
            "seconds": time.perf_counter() - t0, "stdout": out or "", "stderr": err or ""}


class Driver:
    """Runs a suite's cases, each in a fresh Python (this script with --child <case>), `--jobs`
    at a time, so that the caching allocator starts empty and one failure or time-out does not
    stop the others: one line per case, the output of a failed one in logs/<case>.log, and
    metadata.json rewritten after every case (keeping the entries of earlier runs of the same
    kind), so that a run cut short keeps what finished. A suite subclasses it with what is its
    own: the child's arguments, a case's entry from its sidecar, its line, its metadata."""

    tool = ""                     # the script's name in messages
    script = ""                   # the script's path (its __file__)
    metadata_format = ""
    refuse_foreign_metadata = True  # another script's metadata.json in --out: refuse (else replace)
    out_hint = ""                 # where such a suite's output goes, for that message
    dry_desc = "dry run on the CPU, no snapshots"
    head_format = "[{done:>2}/{n}] {case:<22} {status:<6}"
    gpu_line_torch = False        # the GPU line names torch and its CUDA too

    suite: list = []              # every case of the suite, in its order (for metadata.json)

    def __init__(self, args, cases: list, suite: list | None = None):
        self.args, self.cases = args, cases
        if suite is not None:
            self.suite = suite
        self.out = Path(args.out)
        self.lock = threading.Lock()
        self.done = 0
        self.results: dict[str, dict] = {}
        self.previous: dict[str, dict] = {}
        self.env_info: dict = {}
        self.started = utc_now()
        self.t0 = time.perf_counter()

    # ------------------------------------------------------------ what a suite says of itself
    def child_args(self, case) -> list[str]:
        return []

    def child_env(self, case) -> dict:
        return dict(os.environ, PYTHONUNBUFFERED="1")

    def entry(self, case, attempts: list[dict]) -> dict:
        """The case's entry in metadata.json, with its "status" ("FAILED" writes the log)."""
        raise NotImplementedError

    def ok_text(self, r: dict, attempts: list[dict]) -> str:
        """What the case's line says after its head when it did not fail."""
        return ""

    def metadata(self, cases: dict) -> dict:
        raise NotImplementedError

    def more_header(self) -> list[str]:
        return []

    def check(self) -> int:
        """Before anything is written: non-zero (the exit status) to stop."""
        return 0

    def report(self, results: dict, elapsed: float) -> int:
        raise NotImplementedError

    # ------------------------------------------------------------------------ the mechanics
    def command(self, case, *extra: str) -> list[str]:
        return [sys.executable, str(Path(self.script).resolve()), "--child", case.name,
                "--out", str(self.out), *self.child_args(case), *extra,
                *(["--dry-run-cpu"] if self.args.dry_run_cpu else [])]

    def stale_files(self, case) -> list[str]:
        n = case.name
        return [f"{n}.sidecar.json", f"{n}.pickle.gz", f"logs/{n}.log", f".{n}.pickle.tmp",
                f".{n}.pickle.gz.tmp", f"{n}.sidecar.json.tmp"]

    def attempt(self, case, cmd: list[str] | None = None, env: dict | None = None) -> dict:
        p = run_process(cmd or self.command(case), env=env or self.child_env(case), cwd=str(REPO),
                        timeout=self.args.timeout)
        output = p["stdout"] + p["stderr"]
        stages = stages_of(output)
        return {"rc": p["rc"], "timed_out": p["timed_out"], "seconds": round(p["seconds"], 1),
                "last_stage": stages[-1] if stages else None, "output": output}

    def run_case(self, case) -> dict:
        for stale in self.stale_files(case):  # nothing of an earlier run may pass for this one's
            (self.out / stale).unlink(missing_ok=True)
        return self.finish(case, [self.attempt(case)])

    @staticmethod
    def public(a: dict) -> dict:
        """An attempt as metadata.json keeps it (without the output)."""
        return {k: v for k, v in a.items() if k != "output"}

    def read_sidecar(self, case, build) -> dict:
        """build(sidecar, path): the entry's fields from the case's sidecar; a missing or odd
        sidecar makes the case FAILED."""
        path = self.out / f"{case.name}.sidecar.json"
        try:
            return build(json.loads(path.read_text()), path)
        except (OSError, ValueError, KeyError) as e:
            return {"status": "FAILED", "error": f"no readable sidecar: {type(e).__name__}: {e}"}

    def log_text(self, attempts: list[dict]) -> str:
        a = attempts[-1]
        return (f"### rc={a['rc']} timed_out={a['timed_out']} last_stage={a['last_stage']}\n"
                f"{a['output']}")

    def finish(self, case, attempts: list[dict]) -> dict:
        result = self.entry(case, attempts)
        if result["status"] == "FAILED":
            log = self.out / "logs" / f"{case.name}.log"
            log.parent.mkdir(exist_ok=True)
            log.write_text(self.log_text(attempts))
            result["log"] = str(log.relative_to(self.out))
        with self.lock:
            self.done += 1
            self.results[case.name] = result
            self.print_line(result, attempts)
            self.write_metadata(self.results)
        return result

    def print_line(self, r: dict, attempts: list[dict]) -> None:
        head = self.head_format.format(done=self.done, n=len(self.cases), case=r["case"],
                                       status=r["status"])
        if r["status"] != "FAILED":
            print(f"{head} {self.ok_text(r, attempts)}", flush=True)
            return
        a = attempts[-1]
        secs = sum(x["seconds"] for x in attempts)
        why = "timed out" if a["timed_out"] else f"exit code {a['rc']}"
        print(f"{head} {why} in stage {a['last_stage']!r} after {secs:.1f} s; "
              f"log: {r.get('log')}", flush=True)
        for ln in [ln for ln in a["output"].splitlines()
                   if ln.strip() and not ln.startswith(STAGE_TAG)][-6:]:
            print(f"        | {ln}", flush=True)

    def merged(self, results: dict) -> dict:
        """The earlier runs' entries with this run's over them, in the suite's order."""
        merged = dict(self.previous)
        merged.update(results)
        return {c.name: merged[c.name] for c in self.suite if c.name in merged}

    def write_metadata(self, results: dict) -> Path:
        path = self.out / "metadata.json"
        write_json(path, self.metadata(self.merged(results)))
        return path

    def load_previous(self) -> int:
        """The cases of the metadata.json already in --out when it is this suite's, from a run
        of the same kind (dry or not). Another script's: refused (exit 2), or replaced."""
        path = self.out / "metadata.json"
        if not path.exists():
            return 0
        try:
            old = json.loads(path.read_text())
        except (OSError, ValueError) as e:
            if not self.refuse_foreign_metadata:
                return 0
            print(f"{self.tool}: error: {path} is unreadable ({e}); use another --out",
                  file=sys.stderr)
            return 2
        if old.get("format") != self.metadata_format:
            if not self.refuse_foreign_metadata:
                return 0
            print(f"{self.tool}: error: {path} is {old.get('format')!r}, not this script's; use "
                  f"another --out (e.g. {self.out_hint})", file=sys.stderr)
            return 2
        if old.get("dry_run_cpu") == self.args.dry_run_cpu:
            self.previous = old.get("cases", {})
        return 0

    def main(self) -> int:
        """The whole parent side; returns the exit status (3: no torch or no GPU)."""
        rc = self.load_previous()
        if rc:
            return rc
        self.started, self.t0 = utc_now(), time.perf_counter()
        env_info = self.env_info = gpu_metadata(self.args.dry_run_cpu)
        if "error" in env_info and "torch" not in env_info:
            print(f"{self.tool}: error: {env_info['error']}", file=sys.stderr)
            return 3
        if not self.args.dry_run_cpu and not env_info.get("gpu"):
            print(f"{self.tool}: error: no CUDA GPU ({env_info.get('error', 'unknown reason')});"
                  " use --dry-run-cpu to test without one", file=sys.stderr, flush=True)
            return 3
        rc = self.check()
        if rc:
            return rc
        self.out.mkdir(parents=True, exist_ok=True)
        if os.environ.get("PYTORCH_CUDA_ALLOC_CONF"):
            print(f"warning: PYTORCH_CUDA_ALLOC_CONF={os.environ['PYTORCH_CUDA_ALLOC_CONF']!r} is "
                  "set; the goldens are meant to use the default allocator settings", flush=True)
        print(f"{self.tool}: {len(self.cases)} case(s) -> {self.out} "
              f"({self.dry_desc if self.args.dry_run_cpu else 'CUDA'}, {self.args.jobs} at a "
              f"time, timeout {self.args.timeout} s each)" + self.header_suffix(), flush=True)
        for line in self.more_header():
            print(line, flush=True)
        gpu = env_info.get("gpu") or {}
        if gpu:
            print(f"GPU: {gpu['name']}, {fmt_bytes(gpu['total_memory'])}, sm "
                  f"{gpu['compute_capability']}, driver {gpu.get('driver_version')}"
                  + (f"; torch {env_info['torch']} (CUDA {env_info['torch_cuda']})"
                     if self.gpu_line_torch else ""), flush=True)
        results = self.run()
        return self.report(results, time.perf_counter() - self.t0)

    def header_suffix(self) -> str:
        return ""

    def run(self) -> dict:
        """Every selected case; returns this run's entries (a driver error is FAILED)."""
        with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, self.args.jobs)) as pool:
            futures = [pool.submit(self.run_case, c) for c in self.cases]
            for f in futures:
                try:
                    f.result()
                except Exception:  # noqa: BLE001 - a driver bug: report it, keep the rest
                    traceback.print_exc()
        return {c.name: self.results.get(c.name, {"case": c.name, "status": "FAILED",
                                                  "error": "driver error"}) for c in self.cases}

    def outcome(self, results: dict, *, skips: bool = False) -> tuple[str, list[str]]:
        """"<ok>/<n> ok[, <k> skipped: ...], <m> failed[: ...]" and the failed cases' names."""
        failed = [n for n, r in results.items() if r["status"] == "FAILED"]
        skipped = [n for n, r in results.items() if r["status"] == "skipped"]
        text = f"{len(results) - len(failed) - len(skipped)}/{len(results)} ok"
        if skips:
            text += f", {len(skipped)} skipped" + (": " + ", ".join(skipped) if skipped else "")
        text += f", {len(failed)} failed" + (": " + ", ".join(failed) if failed else "")
        return text, failed

    def env_record(self, keys=ENV_KEYS) -> dict:
        return {k: os.environ.get(k) for k in keys}


class StacksDriver(Driver):
    """A driver whose children record the allocator history with --stacks (add_stacks_flags):
    TORCH_SYMBOLIZE_MODE for them (symbolize_mode), and a case that failed with stacks='all' past
    its imports retried with 'python' (unless --no-fallback); after a time-out with 'all', the
    remaining cases record Python stacks only. Each attempt says its stacks (None in a dry run)."""

    def __init__(self, args, cases: list, suite: list | None = None):
        super().__init__(args, cases, suite)
        self.python_stacks_only = args.stacks == "python"  # set when "all" timed out once
        self.symbolize_mode = symbolize_mode(args)

    def child_env(self, case) -> dict:
        env = super().child_env(case)
        if self.symbolize_mode:
            env["TORCH_SYMBOLIZE_MODE"] = self.symbolize_mode
        return env

    def stacks_attempt(self, case, stacks: str) -> dict:
        return {"stacks": None if self.args.dry_run_cpu else stacks,
                **self.attempt(case, self.command(case, "--stacks", stacks))}

    def run_case(self, case) -> dict:
        for stale in self.stale_files(case):  # nothing of an earlier run may pass for this one's
            (self.out / stale).unlink(missing_ok=True)
        stacks = "python" if self.python_stacks_only else self.args.stacks
        a = self.stacks_attempt(case, stacks)
        attempts = [a]
        if (a["rc"] != 0 and stacks == "all" and not self.args.dry_run_cpu
                and not self.args.no_fallback and a["last_stage"] not in ("import", None)):
            if a["timed_out"]:
                with self.lock:
                    if not self.python_stacks_only:
                        self.python_stacks_only = True
                        print(f"!! {case.name}: stacks='all' timed out in stage "
                              f"{a['last_stage']!r}; this and the remaining cases record "
                              "Python stacks only", flush=True)
            else:
                print(f"!! {case.name}: failed with stacks='all' in stage {a['last_stage']!r}; "
                      "retrying with stacks='python'", flush=True)
            attempts.append(self.stacks_attempt(case, "python"))
        return self.finish(case, attempts)

    def log_text(self, attempts: list[dict]) -> str:
        return "\n\n".join(f"### attempt {i + 1}: stacks={a['stacks']} rc={a['rc']} "
                           f"timed_out={a['timed_out']} last_stage={a['last_stage']}\n{a['output']}"
                           for i, a in enumerate(attempts))


def case_files(name: str, logs: bool = True) -> list[str]:
    """The files a case leaves in the output folder (relative paths): its sidecar, its snapshot
    and (with logs) the log of its failure."""
    return [f"{name}.sidecar.json", f"{name}.pickle.gz"] + ([f"logs/{name}.log"] if logs else [])


def suite_bytes(out: Path, names, files_of) -> int:
    """Bytes of the files the cases `names` left in `out` (files_of(name): relative paths)."""
    return sum(p.stat().st_size for n in names for f in files_of(n) for p in [out / f]
               if p.is_file())


def drop_snapshots(out: Path, names: list[str], results: dict, budget: int, reserve: int,
                   files_of, entry_of, flag: str = "--size-budget") -> list[str]:
    """Drop the largest kept snapshots (<case>.pickle.gz) until the suite's files fit in `budget`
    bytes with `reserve` left for metadata.json; rewrites those cases' sidecars ("snapshot":
    not kept, and why) and their entries in `results` (entry_of(sidecar, path)). Returns the
    cases dropped."""
    def total() -> int:
        return suite_bytes(out, names, files_of) + reserve

    dropped = []
    while total() > budget:
        candidates = sorted((p for p in (out / f"{n}.pickle.gz" for n in names) if p.is_file()),
                            key=lambda p: p.stat().st_size, reverse=True)
        if not candidates:
            break
        gz = candidates[0]
        name = gz.name.removesuffix(".pickle.gz")
        note = (f"not kept: dropped by the driver, the run's files were {total():,} B with it, "
                f"over the budget of {budget:,} B ({flag})")
        gz.unlink()
        sidecar_path = out / f"{name}.sidecar.json"
        try:
            sidecar = json.loads(sidecar_path.read_text())
            snap = sidecar.get("snapshot") or {}
            snap.update({"kept": False, "file": None, "sha256_gz": None, "note": note})
            sidecar["snapshot"] = snap
            write_json(sidecar_path, sidecar)
            if name in results and results[name].get("status") == "ok":
                results[name].update(entry_of(sidecar, sidecar_path))
        except (OSError, ValueError) as e:
            print(f"warning: could not note the dropped snapshot in {sidecar_path}: {e}",
                  flush=True)
        dropped.append(name)
        print(f"!! {name}: snapshot dropped to keep {out} under {fmt_bytes(budget)}", flush=True)
    return dropped


class WrittenCases(dict):
    """Cases whose metadata.json is rewritten (by `write`) whenever one is set: a step cut short
    by its time-out keeps what finished."""

    def __init__(self, write):
        super().__init__()
        self._write = write

    def __setitem__(self, name, case) -> None:
        super().__setitem__(name, case)
        self._write()


# ---------------------------------------------------------------------------- the command line


def parser(doc: str, *, jobs: int, timeout: int, cases_example: str, dry_help: str,
           timeout_help: str = "seconds allowed per case") -> argparse.ArgumentParser:
    """--out, --cases, --list, --dry-run-cpu, --jobs and --timeout, with the script's docstring
    as description (its first paragraph) and epilog (the rest)."""
    p = argparse.ArgumentParser(description=doc.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog=doc.split("\n\n", 1)[1])
    p.add_argument("--out", help="output folder (created if needed)")
    p.add_argument("--cases", help=f"comma-separated case names or shell patterns ({cases_example}); "
                                   "default: all")
    p.add_argument("--list", action="store_true", help="list the cases and exit")
    p.add_argument("--dry-run-cpu", action="store_true", help=dry_help)
    p.add_argument("--jobs", type=int, default=jobs,
                   help=f"cases run at the same time, each its own process (default {jobs})")
    p.add_argument("--timeout", type=int, default=timeout, help=f"{timeout_help} (default {timeout})")
    return p


def add_stacks_flags(p: argparse.ArgumentParser) -> None:
    """--stacks, --no-fallback, --symbolize-mode and --no-marks: a suite that records C++ frames."""
    p.add_argument("--stacks", choices=("all", "python"), default="all",
                   help="stacks= of _record_memory_history (default all: Python and C++ frames)")
    p.add_argument("--no-fallback", action="store_true",
                   help="do not retry a case that failed with stacks='all' with Python stacks")
    p.add_argument("--symbolize-mode", choices=("default", "addr2line", "fast", "dladdr"),
                   default="default",
                   help="TORCH_SYMBOLIZE_MODE for the C++ frames. 'default' leaves it to PyTorch "
                        "(addr2line in 2.11, as most users' snapshots have; falls back to 'fast' "
                        "when there is no addr2line program); 'fast' is PyTorch's in-process "
                        "symbolizer, 'dladdr' names from the dynamic symbol table only")
    p.add_argument("--no-marks", action="store_true",
                   help="no record_function / user_metadata phase marks in the snapshots")


def symbolize_mode(args) -> str | None:
    """TORCH_SYMBOLIZE_MODE for the children of add_stacks_flags' suite (None: leave the
    environment as it is)."""
    if args.symbolize_mode != "default":
        return args.symbolize_mode
    if os.environ.get("TORCH_SYMBOLIZE_MODE"):
        return None
    if args.stacks == "all" and not args.dry_run_cpu and not shutil.which(
            os.environ.get("TORCH_ADDR2LINE_BINARY") or "addr2line"):
        print("warning: no addr2line program (binutils) on PATH: C++ frames will be symbolized "
              "with TORCH_SYMBOLIZE_MODE=fast", flush=True)
        return "fast"
    return None


def add_max_entries(p: argparse.ArgumentParser) -> None:
    p.add_argument("--max-entries", type=int, default=DEFAULT_MAX_ENTRIES,
                   help=f"max_entries of the allocator history (default {DEFAULT_MAX_ENTRIES:,})")


def parse(p: argparse.ArgumentParser, argv, *, steps: int, seed: int, check_jobs: bool = False):
    """Adds the hidden --steps, --seed and --child, parses, checks --out and --steps (and with
    check_jobs, that --jobs and --timeout are at least 1)."""
    p.add_argument("--steps", type=int, default=steps, help=argparse.SUPPRESS)
    p.add_argument("--seed", type=int, default=seed, help=argparse.SUPPRESS)
    p.add_argument("--child", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if not args.list and not args.out:
        p.error("--out is required")
    if args.steps < 1:
        p.error("--steps must be at least 1")
    if check_jobs and (args.jobs < 1 or args.timeout < 1):
        p.error("--jobs and --timeout must be at least 1")
    return args
