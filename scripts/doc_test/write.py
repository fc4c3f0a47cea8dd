"""--write: shown output regenerated from printed output (figures by shape, `...` kept), and the
page rewritten with the new blocks."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from doc_test.compare import align, exact_pattern, is_gap, shape_pattern
from doc_test.parse import Shown

if TYPE_CHECKING:
    from doc_test.check import Result


def regenerate(shown: Shown, printed: list[str]) -> tuple[list[str], list[int]]:
    """New shown lines from the printed ones, and the page lines that found no match."""
    lines = shown.lines
    ok, _ = align(lines, printed, exact_pattern)
    if ok is not None:
        return list(lines), []
    if not any("..." in s for s in lines):
        return [p.rstrip() for p in printed], []

    def rebuilt(s: str, p: str) -> str:
        if exact_pattern(s).fullmatch(p.rstrip()):
            return s
        m = shape_pattern(s).fullmatch(p.rstrip())
        return "...".join(m.group(k) for k in range(1, len(m.groups()) + 1, 2))

    ok, _ = align(lines, printed, shape_pattern)
    if ok is not None:
        return [s if j is None else rebuilt(s, printed[j]) for s, j in zip(lines, ok)], []
    # No alignment of the whole: each shown line to the next printed line of its shape, in
    # order. Printed lines it skips are new: kept where no `...` stood before it, as are the
    # printed lines after the last shown one when the block does not end in `...`.
    out, unmatched, j, after_gap = [], [], 0, False
    for s, lineno in zip(lines, shown.line_numbers):
        if is_gap(s):
            out.append(s)
            after_gap = True
            continue
        pat = shape_pattern(s)
        k = next((k for k in range(j, len(printed)) if pat.fullmatch(printed[k].rstrip())), None)
        if k is None:
            out.append(s)
            unmatched.append(lineno)
            continue
        if not after_gap:
            out += [p.rstrip() for p in printed[j:k]]
        out.append(rebuilt(s, printed[k]))
        j, after_gap = k + 1, False
    if not after_gap:
        out += [p.rstrip() for p in printed[j:]]
    return out, unmatched


def write_page(page: Path, results: list[Result]) -> None:
    text = page.read_text(encoding="utf-8").split("\n")
    for r in sorted(results, key=lambda r: -r.block.fence_line):
        if r.new_lines is None:
            continue
        b = r.block
        start = b.first_line - 1
        new = [(b.indent + s) if s else "" for s in r.new_lines]
        text[start:start + len(b.lines)] = new
    page.write_text("\n".join(text), encoding="utf-8")
