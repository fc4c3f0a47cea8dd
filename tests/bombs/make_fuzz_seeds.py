#!/usr/bin/env python3
"""Writes a small bomb of each kind (bombs.py, scaled to the fuzz targets' max_len) into the fuzz
corpora, so that every fuzz run starts from inputs that would break the resource contract if a
limit were lost. Run from anywhere; rewrites only the bomb_* seeds.

    python3 tests/bombs/make_fuzz_seeds.py
"""

from __future__ import annotations

import gzip
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bombs  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
KIB = 1024


def main() -> None:
    pickle_corpus = REPO / "fuzz/pickle_reader/corpus"
    any_file = REPO / "fuzz/input_file/corpus"
    any_file.mkdir(exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        t = Path(tmp)
        seeds = {
            "bomb_shared_segments.pickle": bombs.shared_segments(t, fan_out=60),
            "bomb_shared_trace_entries.pickle": bombs.shared_trace_entries(t, fan_out=40),
            "bomb_stacked_segments.pickle": bombs.stacked_segments(t, count=20),
        }
        for name, path in seeds.items():
            shutil.copyfile(path, pickle_corpus / name)
            shutil.copyfile(path, any_file / name)
        # gzip bombs: 2 members of 2 MiB zeros (4 KB), a pickle header before 8 MiB of zeros.
        shutil.copyfile(bombs.zeros_gzip(t, members=2, member_bytes=2 * KIB * KIB),
                        any_file / "bomb_zeros.pickle.gz")
        shutil.copyfile(bombs.pickle_headed_gzip(t, inflated_bytes=8 * KIB * KIB),
                        any_file / "bomb_pickle_headed.pickle.gz")
        shutil.copyfile(bombs.deep_profiler_trace(t, depth=1500),
                        REPO / "fuzz/kineto_source/corpus/bomb_deep.json")
        shutil.copyfile(bombs.deep_memory_timeline(t, depth=1500),
                        REPO / "fuzz/memory_timeline_source/corpus/bomb_deep.json")
        shutil.copyfile(bombs.deep_layers_config(t), REPO / "fuzz/predict_input/corpus/bomb_layers.json")
        sidecar_corpus = REPO / "fuzz/capture_sidecar/corpus"
        deep = bombs.deep_sidecar(t, REPO / "goldens/h200/mlp_adam_fp32.pickle.gz", depth=3000)
        shutil.copyfile(deep.with_name("run.sidecar.json"), sidecar_corpus / "bomb_deep_phases.json")
        # The report database behind `view`: the smallest seed with its allocations an endless view.
        viewer_corpus = REPO / "fuzz/viewer_report/corpus"
        smallest = min((p for p in viewer_corpus.glob("*.sqlite") if not p.name.startswith("bomb_")),
                       key=lambda p: p.stat().st_size)
        shutil.copyfile(bombs.recursive_view_report(t, smallest), viewer_corpus / "bomb_endless_view.sqlite")
        # The ordinary inputs of every source, plain and gzipped, beside the bombs.
        plain = [REPO / "fuzz/kineto_source/corpus/modern.json",
                 REPO / "fuzz/memory_timeline_source/corpus/all_actions.json",
                 REPO / "fuzz/native_trace/corpus/every_kind.vstrace"]
        for path in plain:
            shutil.copyfile(path, any_file / path.name)
            (any_file / (path.name + ".gz")).write_bytes(gzip.compress(path.read_bytes(), mtime=0))
        snapshot = min((p for p in pickle_corpus.glob("*.pickle") if not p.name.startswith(("bomb_", "regression_"))),
                       key=lambda p: abs(p.stat().st_size - 2 * KIB))
        shutil.copyfile(snapshot, any_file / snapshot.name)
        (any_file / (snapshot.name + ".gz")).write_bytes(gzip.compress(snapshot.read_bytes(), mtime=0))
    for path in sorted(any_file.iterdir()):
        print(f"{path.stat().st_size:8d} {path.relative_to(REPO)}")


if __name__ == "__main__":
    main()
