"""Shown output against printed output: `...` lines and `...` inside a line, aligned in order."""

from __future__ import annotations

import re

from doc_test.parse import Shown


def is_gap(line: str) -> bool:
    return line.strip() == "..."


def exact_pattern(line: str) -> re.Pattern:
    return re.compile(".*?".join(re.escape(p) for p in line.rstrip().split("...")))


NUMBER_RE = re.compile(r"\d[\d,]*(?:\.\d+)?")


def shape(text: str) -> str:
    """A regex for text of the same shape: numbers and runs of spaces masked."""
    out = []
    pos = 0
    for m in re.finditer(r"\d[\d,]*(?:\.\d+)?| +", text):
        out.append(re.escape(text[pos:m.start()]))
        out.append(r"\d[\d,]*(?:\.\d+)?" if m.group()[0].isdigit() else " +")
        pos = m.end()
    out.append(re.escape(text[pos:]))
    return "".join(out)


def shape_pattern(line: str) -> re.Pattern:
    """Each literal part of the line a group of its shape; `...` any text."""
    return re.compile("(.*?)".join(f"({shape(p)})" for p in line.rstrip().split("...")))


def align(shown: list[str], printed: list[str], pattern) -> tuple[list | None, tuple]:
    """Aligns shown lines (gaps: `...` lines) to printed lines in order.
    Returns (for each shown line its printed index or None for a gap, when all of it aligns;
    else None) and the failure: (index of the shown line that cannot align, or len(shown) for
    output left over; the printed indices it could have taken)."""
    pats = [None if is_gap(s) else pattern(s) for s in shown]
    n = len(printed)
    reach = [{0}]           # reach[i]: printed positions after aligning shown[:i]
    back: list[dict] = []   # back[i][j_after] = j_before
    for i, p in enumerate(pats):
        cur = reach[-1]
        nxt: dict = {}
        if p is None:
            lo = min(cur)
            for k in range(lo, n + 1):
                nxt.setdefault(k, max(j for j in cur if j <= k))
        else:
            for j in sorted(cur):
                if j < n and p.fullmatch(printed[j].rstrip()):
                    nxt.setdefault(j + 1, j)
        if not nxt:
            return None, (i, sorted(cur))
        back.append(nxt)
        reach.append(set(nxt))
    if n not in reach[-1]:
        return None, (len(shown), sorted(reach[-1]))
    result: list = [None] * len(shown)
    j = n
    for i in range(len(shown) - 1, -1, -1):
        prev = back[i][j]
        result[i] = None if pats[i] is None else prev
        j = prev
    return result, ()


def compare(shown: Shown, printed: list[str]) -> tuple[int, str] | None:
    """None when the printed lines match the shown ones; else (page line, what differs)."""
    lines = shown.lines
    ok, failure = align(lines, printed, exact_pattern)
    if ok is not None:
        return None
    i, candidates = failure
    if i == len(lines):
        lineno = shown.line_numbers[-1] if lines else shown.command.line
        last = lines[-1].rstrip() if lines else "$ " + shown.command.text
        extra = printed[max(candidates)].rstrip()
        return lineno, (f"shown nothing after '{last}' but the command prints more: '{extra}' "
                        "(end the block with a '...' line if the rest is left out)")
    pat = shape_pattern(lines[i])
    pick = next((j for j in candidates if j < len(printed) and pat.fullmatch(printed[j].rstrip())),
                None)
    if pick is None:
        pick = min(candidates)
    if pick >= len(printed):
        return shown.line_numbers[i], (f"shown '{lines[i].rstrip()}' but the command prints "
                                       "nothing more")
    return shown.line_numbers[i], (f"shown '{lines[i].rstrip()}' but the command prints "
                                   f"'{printed[pick].rstrip()}'")
