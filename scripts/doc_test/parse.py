"""The pages covered, their fenced blocks with their directives, and the commands of a block."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from doc_test.common import REPO, DocError, display
from doc_test.fixtures import FIXTURES

# The pages a user follows, found by glob so that no page (and no block) escapes: the README, the
# guides (one per command) and the reference pages beside them.
PAGE_GLOBS = ("README.md", "docs/guide/*.md", "docs/*.md")
# Not followed: generated reports and measurements (see scripts/doc_blocks.py).
NOT_PAGES = ("docs/benchmarks.md", "docs/accuracy.md")


def pages() -> list[Path]:
    found = []
    for pattern in PAGE_GLOBS:
        for path in sorted(REPO.glob(pattern)):
            if str(path.relative_to(REPO)) not in NOT_PAGES and path not in found:
                found.append(path)
    return found


PAGES = tuple(str(p.relative_to(REPO)) for p in pages())
KINDS = ("run", "output", "sql", "usage", "code", "not-run")
RUN_KINDS = ("run", "output")
DIRECTIVE_RE = re.compile(r"^\s*<!--\s*doc-test:\s*(.*?)\s*-->\s*$")
FENCE_RE = re.compile(r"^(\s*)(`{3,}|~{3,})(.*)$")


# --------------------------------------------------------------------------------------------
# Pages and blocks
# --------------------------------------------------------------------------------------------


@dataclass
class Block:
    page: Path
    fence_line: int      # 1-based line of the opening fence
    indent: str          # the fence's indentation, removed from the content lines
    lang: str
    kind: str
    fixtures: list[str]
    note: str
    lines: list[str]     # content, indentation removed
    first_line: int      # 1-based line of lines[0]

    @property
    def name(self) -> str:
        return f"{display(self.page)}:{self.fence_line}"


def parse_directive(text: str, where: str) -> tuple[str, list[str], str]:
    """'KIND [with=A,B] [: NOTE]' -> (kind, fixtures, note)."""
    head, sep, note = text.partition(":")
    words = head.split()
    if not words or words[0] not in KINDS:
        raise DocError(f"{where}: unknown doc-test directive {text!r} (kinds: {', '.join(KINDS)})")
    kind = words[0]
    fixtures: list[str] = []
    for word in words[1:]:
        key, eq, value = word.partition("=")
        if key != "with" or not eq or not value:
            raise DocError(f"{where}: unknown option {word!r} in doc-test directive (with=A,B)")
        fixtures += [v for v in value.split(",") if v]
    for f in fixtures:
        if f not in FIXTURES:
            raise DocError(f"{where}: unknown fixture {f!r} (known: {', '.join(sorted(FIXTURES))})")
    note = note.strip()
    if kind == "not-run" and not note:
        raise DocError(f"{where}: 'not-run' needs a reason: <!-- doc-test: not-run: WHY, and what "
                       "checks it instead -->")
    if kind == "sql" and len([f for f in fixtures if f.endswith(".sqlite")]) != 1:
        raise DocError(f"{where}: 'sql' needs one database: with=NAME.sqlite")
    return kind, fixtures, note


def parse_page(page: Path) -> list[Block]:
    """Every fenced block of the page with its directive; DocError for a block without one."""
    page = Path(page)
    text = page.read_text(encoding="utf-8").split("\n")
    blocks: list[Block] = []
    i = 0
    pending: tuple[int, str] | None = None
    while i < len(text):
        line = text[i]
        d = DIRECTIVE_RE.match(line)
        if d:
            if pending:
                raise DocError(f"{display(page)}:{pending[0]}: doc-test directive not followed by "
                               "a fenced block")
            pending = (i + 1, d.group(1))
            i += 1
            continue
        m = FENCE_RE.match(line)
        if not m:
            if pending and line.strip():
                raise DocError(f"{display(page)}:{pending[0]}: doc-test directive not followed by "
                               "a fenced block (it must be on the line just before the fence)")
            pending = None if line.strip() else pending
            i += 1
            continue
        indent, fence, info = m.group(1), m.group(2), m.group(3).strip()
        start = i
        i += 1
        body: list[str] = []
        while i < len(text):
            c = FENCE_RE.match(text[i])
            if c and c.group(2)[0] == fence[0] and len(c.group(2)) >= len(fence) \
                    and not c.group(3).strip():
                break
            body.append(text[i][len(indent):] if text[i].startswith(indent) else text[i].lstrip())
            i += 1
        else:
            raise DocError(f"{display(page)}:{start + 1}: fenced block never closed")
        i += 1
        where = f"{display(page)}:{start + 1}"
        if pending and pending[0] != start:
            raise DocError(f"{display(page)}:{pending[0]}: doc-test directive not on the line "
                           f"just before the fence of line {start + 1}")
        if not pending:
            raise DocError(f"{where}: fenced block without a doc-test directive: put one on the "
                           "line before its fence, e.g. <!-- doc-test: run -->, <!-- doc-test: "
                           "output -->, <!-- doc-test: code --> or <!-- doc-test: not-run: WHY "
                           "-->; see scripts/doc_blocks.py")
        kind, fixtures, note = parse_directive(pending[1], where)
        pending = None
        blocks.append(Block(page, start + 1, indent, info.split()[0] if info else "", kind,
                            fixtures, note, body, start + 2))
    if pending:
        raise DocError(f"{display(page)}:{pending[0]}: doc-test directive not followed by a "
                       "fenced block")
    return blocks


# --------------------------------------------------------------------------------------------
# Commands
# --------------------------------------------------------------------------------------------


def _scan(text: str) -> tuple[str | None, int | None]:
    """Shell quoting of `text`: (the quote still open at its end or None, the index where a
    `# comment` starts outside quotes or None)."""
    quote = None
    i = 0
    while i < len(text):
        c = text[i]
        if quote == "'":
            if c == "'":
                quote = None
        elif quote == '"':
            if c == "\\":
                i += 1
            elif c == '"':
                quote = None
        elif c == "\\":
            i += 1
        elif c in "'\"":
            quote = c
        elif c == "#" and (i == 0 or text[i - 1] in " \t"):
            return None, i
        i += 1
    return quote, None


@dataclass
class Command:
    text: str
    line: int            # 1-based line on the page
    lines: int = 1       # how many page lines it takes


def _command_end(lines: list[str], i: int, first: str) -> tuple[str, int]:
    """The command that starts with `first` (lines[i] without its '$ '), continued while a quote
    is open or a line ends in a backslash: (its text without a trailing comment, lines taken)."""
    buf = [first]
    n = 1
    while True:
        joined = "\n".join(buf)
        quote, comment = _scan(joined)
        if comment is not None:
            joined = joined[:comment].rstrip()
        if quote is None and not joined.endswith("\\"):
            return joined.strip(), n
        if i + n >= len(lines):
            raise DocError(f"command not finished (an open quote or a final backslash): "
                           f"{joined.splitlines()[0]!r}")
        buf.append(lines[i + n])
        n += 1


def split_commands(lines: list[str], first_line: int) -> list[Command]:
    """The commands of a run block: one per line, with continuations, without comments."""
    commands: list[Command] = []
    i = 0
    while i < len(lines):
        if not lines[i].strip() or lines[i].lstrip().startswith("#"):
            i += 1
            continue
        text, n = _command_end(lines, i, lines[i])
        commands.append(Command(text, first_line + i, n))
        i += n
    return commands


@dataclass
class Shown:
    """One `$ command` of an output block and the lines shown after it."""
    command: Command
    lines: list[str] = field(default_factory=list)
    line_numbers: list[int] = field(default_factory=list)   # 1-based page lines of `lines`


def split_output_block(block: Block) -> list[Shown]:
    shown: list[Shown] = []
    i = 0
    while i < len(block.lines):
        line = block.lines[i]
        lineno = block.first_line + i
        if line.startswith("$ "):
            text, n = _command_end(block.lines, i, line[2:])
            shown.append(Shown(Command(text, lineno, n)))
            i += n
            continue
        if not shown:
            raise DocError(f"{display(block.page)}:{lineno}: an output block starts with the "
                           "command that prints it: '$ vramscope ...'")
        shown[-1].lines.append(line)
        shown[-1].line_numbers.append(lineno)
        i += 1
    return shown
