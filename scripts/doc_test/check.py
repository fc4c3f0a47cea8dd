"""Checking one block: each kind of directive, the run twice in one folder, and what the page
shows against what the commands print."""

from __future__ import annotations

import ast
import json
import re
import subprocess
from dataclasses import dataclass, field

from doc_test.common import REPO, DocError, display, regenerate_hint
from doc_test.compare import compare
from doc_test.fixtures import Skip, binary
from doc_test.parse import Block, split_commands, split_output_block
from doc_test.run import Context, refused_named_output
from doc_test.write import regenerate


@dataclass
class Result:
    block: Block
    errors: list[str] = field(default_factory=list)
    skipped: str = ""
    # --write: the block's new content lines and the page lines left for a person.
    new_lines: list[str] | None = None
    unmatched: list[int] = field(default_factory=list)


def _where(block: Block, line: int) -> str:
    return f"{display(block.page)}:{line}"


def check_code(block: Block, result: Result) -> None:
    text = "\n".join(block.lines)
    if block.lang == "python":
        try:
            ast.parse(text)
        except SyntaxError as e:
            result.errors.append(f"{_where(block, block.first_line + (e.lineno or 1) - 1)}: "
                                 f"the Python excerpt does not parse: {e.msg}")
    elif block.lang == "json":
        try:
            json.loads(text)
        except json.JSONDecodeError as e:
            result.errors.append(f"{_where(block, block.first_line + e.lineno - 1)}: "
                                 f"the JSON does not load: {e.msg}")


def check_usage(block: Block, result: Result) -> None:
    text = "\n".join(block.lines)
    words = text.split()
    if len(words) < 2 or words[0] != "vramscope":
        result.errors.append(f"{_where(block, block.first_line)}: a usage block starts with "
                             "'vramscope VERB'")
        return
    proc = subprocess.run([str(binary()), words[1], "--help"], capture_output=True, text=True,
                          timeout=60)
    listed = set(re.findall(r"(?<![\w-])(--?[A-Za-z][\w-]*)", proc.stdout))
    for n, line in enumerate(block.lines):
        for flag in re.findall(r"(?<![\w-])(--?[A-Za-z][\w-]*)", line):
            if flag not in listed:
                result.errors.append(f"{_where(block, block.first_line + n)}: shows {flag}, which "
                                     f"'vramscope {words[1]} --help' does not list")


def check_sql(block: Block, result: Result, ctx: Context) -> None:
    import sqlite3
    db = next(f for f in block.fixtures if f.endswith(".sqlite"))
    conn = sqlite3.connect(f"file:{ctx.work / db}?mode=ro", uri=True)
    statements, buf, start = [], "", 0
    for n, line in enumerate(block.lines):
        if not buf.strip():
            start = block.first_line + n
        buf += line + "\n"
        if sqlite3.complete_statement(buf):
            statements.append((start, buf.strip()))
            buf = ""
    if buf.strip():
        result.errors.append(f"{_where(block, start)}: SQL statement not finished (no ';')")
    for start, sql in statements:
        params = {name: None for name in re.findall(r":(\w+)", sql)}
        try:
            conn.execute(sql, params).fetchall()
        except sqlite3.Error as e:
            result.errors.append(f"{_where(block, start)}: the SQL fails on {db}: {e}")
    conn.close()


def check_block(block: Block, write: bool = False) -> Result:
    """Checks one block (or, with write, also regenerates an output block from one run)."""
    result = Result(block)
    if block.kind == "not-run":
        # Not run here, but its reason must name what does check it, and that must exist: a
        # reason naming a test or script that was renamed or removed fails.
        paths = re.findall(r"(?:tests|scripts|src|bench|goldens)/[\w./-]*", block.note)
        named = [p for p in paths if (REPO / p.rstrip(".")).exists()]
        missing = [p for p in paths if p not in named]
        if missing:
            result.errors.append(f"{_where(block, block.fence_line)}: the reason names "
                                 f"{', '.join(missing)}, which does not exist")
        elif not named:
            result.errors.append(f"{_where(block, block.fence_line)}: the reason names no test or "
                                 "script of this repository that checks the block instead")
        result.skipped = f"not run: {block.note}"
        return result
    if block.kind == "code":
        check_code(block, result)
        return result
    if block.kind == "usage":
        check_usage(block, result)
        return result
    try:  # the commands parse before anything runs
        if block.kind == "run":
            split_commands(block.lines, block.first_line)
        elif block.kind == "output":
            split_output_block(block)
    except DocError as e:
        result.errors.append(f"{block.name}: {e}")
        return result
    ctx = Context(block)
    try:
        try:
            ctx.setup()
        except Skip as e:
            result.skipped = str(e)
            return result
        except Exception as e:  # a fixture that cannot be made is a failure of the check
            result.errors.append(f"{block.name}: setting up {', '.join(block.fixtures)}: {e}")
            return result
        if block.kind == "sql":
            check_sql(block, result, ctx)
        elif block.kind == "run":
            commands = split_commands(block.lines, block.first_line)
            failed = set()
            for attempt in ("", " (the second time, in the same folder)"):
                for c in commands:
                    code, out = ctx.run(c.text)
                    if attempt and (c.line in failed or refused_named_output(c.text, code, out)):
                        continue
                    if code != 0:
                        failed.add(c.line)
                        tail = "\n    ".join(out.rstrip().splitlines()[-5:])
                        result.errors.append(f"{_where(block, c.line)}: `{c.text}` exited with "
                                             f"status {code}{attempt}:\n    {tail}")
        else:
            check_output(block, result, ctx, write)
    finally:
        ctx.close()
    return result


def check_output(block: Block, result: Result, ctx: Context, write: bool) -> None:
    """The first run (a fresh folder) must print what the page shows; the second, in the same
    folder, must end as the first did (its output may differ: "replacing the earlier one")."""
    items = split_output_block(block)
    new_lines: list[str] = []
    first_codes = []
    for item in items:
        code, out = ctx.run(item.command.text)
        first_codes.append(code)
        printed = out.split("\n")
        if printed and printed[-1] == "":
            printed.pop()
        if write:
            first = item.command.line - block.first_line
            new_lines += block.lines[first:first + item.command.lines]
            lines, unmatched = regenerate(item, printed)
            new_lines += lines
            result.unmatched += unmatched
            continue
        bad = compare(item, printed)
        if bad:
            lineno, message = bad
            result.errors.append(f"{_where(block, lineno)}: {message}\n    "
                                 f"($ {item.command.text.splitlines()[0]}; "
                                 f"{regenerate_hint(block.page)})")
    if write:
        result.new_lines = new_lines
        return
    for item, first in zip(items, first_codes):
        code, out = ctx.run(item.command.text)
        if code != first and not refused_named_output(item.command.text, code, out):
            tail = "\n    ".join(out.rstrip().splitlines()[-3:])
            result.errors.append(f"{_where(block, item.command.line)}: `{item.command.text}` "
                                 f"exited with status {code} the second time, in the same "
                                 f"folder (the first time: {first}):\n    {tail}")
