#!/usr/bin/env python3
"""Runs the command blocks of the user documentation and checks the output they show.

    python3 scripts/doc_blocks.py                  # check README.md and the pages below
    python3 scripts/doc_blocks.py docs/x.md        # check one page
    python3 scripts/doc_blocks.py --write          # regenerate the shown output from real runs
    python3 scripts/doc_blocks.py --list           # every block, its directive and line

Pages covered (PAGES): README.md, docs/guide/*.md and docs/*.md, found by glob: the pages a user
follows to install, run every verb, describe a model and query a report. Not covered:
docs/benchmarks.md (its commands are benchmarks that take minutes and print timings of the
machine they ran on), docs/accuracy.md (a report generated from the goldens by
scripts/accuracy.py and scripts/families_vs_tracer.py --write: regenerated, not followed; its
commands are the table's rows, one golden each), docs/design/* (design notes for developers:
their blocks are excerpts of formats and code, not commands to follow) and DEVELOPERS.md (GPU
sessions).

Every fenced block of a covered page carries a directive, an HTML comment on the line just before
its fence (GitHub does not show it); a block without one is an error, so no new block escapes:

    <!-- doc-test: run [with=FIXTURE,...] -->       each command of the block runs, and must exit 0
    <!-- doc-test: output [with=FIXTURE,...] -->    `$ command` lines, each followed by what it
                                                    prints (any exit status: error examples too)
    <!-- doc-test: sql with=DATABASE -->            SQL statements, run against that fixture
    <!-- doc-test: usage -->                        a `vramscope VERB [flags]` synopsis: every flag
                                                    it shows is one `vramscope VERB --help` lists
    <!-- doc-test: code -->                         an excerpt (Python, JSON, ...), not a command:
                                                    Python must parse, JSON must load
    <!-- doc-test: not-run: REASON -->              a command that cannot run here; REASON says
                                                    why and what checks it instead

Any kind may end with `: NOTE` (for not-run the reason is required). Write blocks fenced: an
indented code block is not seen.

Commands: one per line; a line ending in `\\` or inside an open quote continues on the next;
`# comments` outside quotes are dropped; each runs with bash, as a user would type it.

Where and how they run (check mode): each run/output block gets a fresh temporary folder TMP and
its commands run in TMP/work TWICE, the second time after the first in the same folder, so that
commands must also work when their earlier outputs are there. The first run is the one a page
shows (output blocks are compared with it); the second must end as the first did (run blocks:
status 0), its output not compared (a default-named output says ", replacing the earlier one"),
except that a second run refused with "vramscope: error: X: already exists; pass --force to
overwrite it", X an output the command names with -o/--output/--html, is what the README
promises for named outputs, and passes.

TMP/work holds symlinks to the repository's examples/, tests/, goldens/ and python/, a
`build/vramscope` symlink, and the fixtures the directive names; `../shared` is TMP/shared, a
symlink to the shared folder (VRAMSCOPE_SHARED_DIR, default <repo>/../shared). `vramscope` on PATH
is the binary under test (VRAMSCOPE_BIN, default build-release/vramscope, else build/vramscope);
HOME and TMPDIR are folders inside TMP. FIXTURES lists the fixtures, each made from the
repository's real data (`run.pickle` is the built-in example's golden, `runs/` two H200 goldens
laid out as ranks exactly as tests/e2e/test_run_cli.py does, ...). Two fixtures are not files:
`shared` (the block reads ../shared/fixtures: skipped when the folder is absent) and `torch`
(python3, python and ~/venv/bin/python are a Python with PyTorch and transformers, for the
tracer: VRAMSCOPE_TORCH_PYTHON, else the venv scripts/test.sh installs,
$VRAMSCOPE_TORCH_VENV or ~/.cache/vramscope/torch-venv; without one the block is skipped, unless
VRAMSCOPE_TORCH_PYTHON or VRAMSCOPE_REQUIRE_TORCH=1 says it must run, as in CI). Elsewhere python3
and python are the Python running this script.

Comparison: what a command prints is its stdout followed by its stderr. Outputs are
deterministic for a given binary and input; the only normalisation is that trailing whitespace
of every line is ignored (editors strip it from the page) and the temporary folder's path reads
TMP. Shown output may be shortened: a line that is only `...` (any indentation) stands for any
number of lines, and `...` inside a line for any text (so a line ending in `...` matches every
line that starts with the text before it). Shown lines are aligned to printed lines in order; a
mismatch is reported as `FILE:LINE: shown '...' but the command prints '...'`.

--write regenerates output blocks from one run: a block with no `...` is replaced by the output
whole; otherwise each shown line is matched to a printed line of the same shape (numbers masked,
runs of spaces as one) in order and replaced by it, keeping the `...`. Lines with no such match
are reported and left as they were (fix them by hand, then check again). Review the diff.

The code: this file is the command line (and the module tests/e2e/test_doc_blocks.py imports);
the work is done by the package scripts/doc_test/ beside it, one module per job: parse.py (pages,
directives, commands), fixtures.py, run.py (the temporary folder), compare.py, write.py (--write)
and check.py (one block of each kind).

Only the Python standard library is used.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

# The checker's parts, one job each, are the package doc_test beside this file (see its
# __init__.py); this file is the command line and re-exports their names (the tests use them).
_HERE = str(Path(__file__).resolve().parent)
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)

from doc_test.check import (Result, _where, check_block, check_code,  # noqa: E402
                            check_output, check_sql, check_usage)
from doc_test.common import REPO, DocError, display, regenerate_hint  # noqa: E402
from doc_test.compare import (NUMBER_RE, align, compare, exact_pattern, is_gap,  # noqa: E402
                              shape, shape_pattern)
from doc_test.fixtures import (COMMAND_TIMEOUT_S, FIXTURES, Skip, binary,  # noqa: E402
                               shared_dir, torch_python, torch_required)
from doc_test.parse import (KINDS, NOT_PAGES, PAGE_GLOBS, PAGES, RUN_KINDS, Block,  # noqa: E402
                            Command, Shown, pages, parse_directive, parse_page,
                            split_commands, split_output_block)
from doc_test.run import (OUTPUT_FLAGS, REPO_FOLDERS, Context, named_outputs,  # noqa: E402
                          refused_named_output)
from doc_test.write import regenerate, write_page  # noqa: E402

__all__ = [
    "REPO", "DocError", "display", "regenerate_hint",
    "PAGE_GLOBS", "NOT_PAGES", "PAGES", "KINDS", "RUN_KINDS", "pages", "Block", "Command",
    "Shown", "parse_directive", "parse_page", "split_commands", "split_output_block",
    "COMMAND_TIMEOUT_S", "FIXTURES", "Skip", "binary", "shared_dir", "torch_python",
    "torch_required",
    "REPO_FOLDERS", "OUTPUT_FLAGS", "Context", "named_outputs", "refused_named_output",
    "NUMBER_RE", "is_gap", "exact_pattern", "shape", "shape_pattern", "align", "compare",
    "regenerate", "write_page",
    "Result", "check_block", "check_code", "check_usage", "check_sql", "check_output",
    "check_page", "main",
]


def check_page(page: Path, write: bool = False, verbose: bool = False,
               out=sys.stdout) -> tuple[int, int, int]:
    """Checks (or regenerates) one page; returns (failed, checked, skipped) counts."""
    blocks = parse_page(page)
    results = []
    failed = checked = skipped = 0
    for b in blocks:
        started = time.monotonic()
        r = check_block(b, write=write and b.kind == "output")
        took = f", {time.monotonic() - started:.1f} s" if b.kind in RUN_KINDS + ("sql",) else ""
        results.append(r)
        if r.skipped:
            skipped += 1
            if verbose:
                print(f"{b.name}: {b.kind}: skipped ({r.skipped})", file=out)
        elif r.errors:
            failed += 1
            for e in r.errors:
                print(e, file=out)
        else:
            checked += 1
            if verbose:
                print(f"{b.name}: {b.kind}: ok{took}", file=out)
        for lineno in r.unmatched:
            print(f"{_where(b, lineno)}: no printed line of this shape; fix it by hand", file=out)
    if write:
        write_page(page, results)
    return failed, checked, skipped


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("pages", nargs="*", type=Path,
                    help=f"pages to check (default: {', '.join(PAGES)})")
    ap.add_argument("--write", action="store_true",
                    help="regenerate the output blocks from real runs (then review the diff)")
    ap.add_argument("--list", action="store_true", help="list the blocks and their directives")
    ap.add_argument("-v", "--verbose", action="store_true", help="say what happened to each block")
    args = ap.parse_args(argv)
    pages = args.pages or [REPO / p for p in PAGES]
    total_failed = 0
    for page in pages:
        try:
            if args.list:
                for b in parse_page(page):
                    extra = (f" with={','.join(b.fixtures)}" if b.fixtures else "") + \
                        (f": {b.note}" if b.note else "")
                    print(f"{b.name}: {b.kind}{extra}")
                continue
            failed, checked, skipped = check_page(page, write=args.write, verbose=args.verbose)
        except DocError as e:
            print(e)
            total_failed += 1
            continue
        total_failed += failed
        print(f"{display(page)}: {checked} blocks {'regenerated or ' if args.write else ''}"
              f"checked, {skipped} not run, {failed} failed")
    return 1 if total_failed else 0


if __name__ == "__main__":
    sys.exit(main())
