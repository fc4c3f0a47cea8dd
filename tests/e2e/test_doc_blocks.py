"""The README, the guides and the pages a user follows are executed (scripts/doc_blocks.py):
every command block runs twice in a fresh temporary folder, and every shown output, figures
included, is what the command prints. One test per block; a page that breaks the rules (a block without a
directive) fails its own test. Blocks that read ../shared/fixtures skip when it is absent, blocks
that need PyTorch when no torch Python is found (unless CI says it must be there).

To regenerate the shown output after a deliberate change: python3 scripts/doc_blocks.py --write
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from conftest import REPO, SHARED

sys.path.insert(0, str(REPO / "scripts"))
import doc_blocks  # noqa: E402


def block_params() -> list:
    params = []
    for page in doc_blocks.PAGES:
        try:
            blocks = doc_blocks.parse_page(REPO / page)
        except doc_blocks.DocError as e:
            params.append(pytest.param(None, str(e), id=f"{page}-unparsable"))
            continue
        for b in blocks:
            params.append(pytest.param(b, "", id=f"{page}:{b.fence_line}-{b.kind}"))
    return params


@pytest.fixture
def doc_env(vramscope_bin, monkeypatch):
    """The checker runs the binary and the shared folder the other end-to-end tests use."""
    monkeypatch.setenv("VRAMSCOPE_BIN", str(vramscope_bin))
    monkeypatch.setenv("VRAMSCOPE_SHARED_DIR", str(SHARED))


@pytest.mark.parametrize("block,page_error", block_params())
def test_block(doc_env, block, page_error):
    if page_error:
        pytest.fail(page_error, pytrace=False)
    result = doc_blocks.check_block(block)
    if result.errors:
        pytest.fail("\n".join(result.errors), pytrace=False)
    # A not-run block is checked for what it can be: its reason names the test or script of this
    # repository that runs it instead, and that exists (the checker's errors above).
    if result.skipped and block.kind != "not-run":
        pytest.skip(result.skipped)


def find_block(page: Path, command_start: str) -> doc_blocks.Block:
    for b in doc_blocks.parse_page(page):
        if b.kind == "output" and any(line.startswith("$ " + command_start) for line in b.lines):
            return b
    raise AssertionError(f"no output block of '{command_start}' in {page}")


TP_COMMAND = "vramscope predict --model llama2-7b --tp 2"


def test_a_changed_figure_fails_on_its_line_and_write_restores_it(doc_env, tmp_path):
    """Change one figure of a shown output: the check names that line, what it shows and what
    the command prints, and nothing else; --write puts the printed figure back."""
    page = tmp_path / "predict.md"
    original = (REPO / "docs" / "guide" / "predict.md").read_text()
    block = find_block(REPO / "docs" / "guide" / "predict.md", TP_COMMAND)
    offset = next(n for n, line in enumerate(block.lines) if line.lstrip().startswith("first stage"))
    lineno = block.first_line + offset  # 1-based line on the page
    lines = original.split("\n")
    shown = lines[lineno - 1]
    figure = re.search(r"\d+\.\d+ GiB", shown).group()
    changed = f"{float(figure.split()[0]) + 0.01:.2f} GiB"  # 16.21 GiB -> 16.22 GiB
    lines[lineno - 1] = shown.replace(figure, changed, 1)
    page.write_text("\n".join(lines))

    result = doc_blocks.check_block(find_block(page, TP_COMMAND))
    assert len(result.errors) == 1, result.errors
    message = result.errors[0]
    assert message.startswith(f"{page}:{lineno}: shown '{lines[lineno - 1].rstrip()}' but the "
                              f"command prints '{shown.rstrip()}'"), message
    assert "scripts/doc_blocks.py --write" in message

    # The whole page's check fails too (exit status 1), naming the line; --write restores it.
    trimmed = tmp_path / "one-block.md"
    b = find_block(page, TP_COMMAND)
    fence = lines[b.fence_line - 2:b.fence_line + len(b.lines) + 1]
    trimmed.write_text("# one block\n\n" + "\n".join(fence) + "\n")
    assert doc_blocks.main([str(trimmed)]) == 1
    assert doc_blocks.main(["--write", str(trimmed)]) == 0
    assert shown in trimmed.read_text().split("\n")
    assert doc_blocks.main([str(trimmed)]) == 0


def test_a_block_without_a_directive_is_refused(tmp_path, capsys):
    page = tmp_path / "page.md"
    page.write_text("# A page\n\n<!-- doc-test: run -->\n```sh\nvramscope --version\n```\n\n"
                    "Another:\n\n```sh\nvramscope --help\n```\n")
    with pytest.raises(doc_blocks.DocError, match=r"page.md:10: fenced block without a "
                                                  r"doc-test directive"):
        doc_blocks.parse_page(page)
    assert doc_blocks.main([str(page)]) == 1
    assert "page.md:10: fenced block without a doc-test directive" in capsys.readouterr().out


@pytest.mark.parametrize("directive,message", [
    ("not-run", "'not-run' needs a reason"),
    ("rn", "unknown doc-test directive"),
    ("run with=nothing.pickle", "unknown fixture 'nothing.pickle'"),
    ("sql", "'sql' needs one database"),
])
def test_a_bad_directive_is_refused(tmp_path, directive, message):
    page = tmp_path / "page.md"
    page.write_text(f"<!-- doc-test: {directive} -->\n```sh\nvramscope --version\n```\n")
    with pytest.raises(doc_blocks.DocError, match=re.escape(message)):
        doc_blocks.parse_page(page)


def shown(lines: list[str]) -> doc_blocks.Shown:
    return doc_blocks.Shown(doc_blocks.Command("cmd", 1), list(lines),
                            list(range(2, 2 + len(lines))))


@pytest.mark.parametrize("lines,printed,ok", [
    (["a", "b"], ["a", "b"], True),
    (["a", "b"], ["a", "b", "c"], False),                  # more printed than shown
    (["a", "..."], ["a", "b", "c"], True),                 # a `...` line: any number of lines
    (["a", "...", "c"], ["a", "c"], True),                 # ... zero included
    (["  ...", "x 1", "..."], ["w", "x 1", "y"], True),
    (["a long li..."], ["a long line, cut"], True),        # a line ending in `...`: a prefix
    (["owners (...):"], ["owners (42% high, 58% medium):"], True),
    (["x 1.00 MiB"], ["x 1.01 MiB"], False),
    (["a  "], ["a"], True),                                # trailing spaces are not compared
])
def test_shown_output_and_its_elisions(lines, printed, ok):
    assert (doc_blocks.compare(shown(lines), printed) is None) == ok


def test_write_keeps_elisions_and_replaces_figures_by_shape():
    new, unmatched = doc_blocks.regenerate(
        shown(["head 1", "...", "  peak  1.00 MiB (1,048,576 B)", "tail 99..."]),
        ["head 1", "x", "y", "  peak  12.50 MiB (13,107,200 B)", "tail 123456 and more"])
    assert new == ["head 1", "...", "  peak  12.50 MiB (13,107,200 B)", "tail 123456..."]
    assert unmatched == []
    new, unmatched = doc_blocks.regenerate(shown(["a 1", "...", "gone 2"]), ["a 2", "b"])
    assert new == ["a 2", "...", "gone 2"] and unmatched == [4]


def test_commands_join_continuations_and_drop_comments():
    lines = ["# a comment line", "vramscope report run.pickle   # the summary",
             "sqlite3 x.sqlite \\", "  \"SELECT 1 -- #not a comment", "   FROM t\"", ""]
    cmds = doc_blocks.split_commands(lines, 10)
    assert [(c.text, c.line) for c in cmds] == [
        ("vramscope report run.pickle", 11),
        ("sqlite3 x.sqlite \\\n  \"SELECT 1 -- #not a comment\n   FROM t\"", 12)]


@pytest.mark.parametrize("directive,body,message", [
    ("sql with=report.sqlite", "SELECT no_such_column FROM vramscope_timeline;",
     "the SQL fails on report.sqlite: no such column: no_such_column"),
    ("usage", "vramscope report [INPUT] [--no-such-flag]",
     "shows --no-such-flag, which 'vramscope report --help' does not list"),
    ("code", '{"input": [1024],\n "layers": [}', "the JSON does not load"),
    ("run", "vramscope report no-such.pickle", "exited with status 1"),
])
def test_each_kind_of_block_catches_drift(doc_env, tmp_path, directive, body, message):
    page = tmp_path / "page.md"
    lang = "json" if directive == "code" else ""
    page.write_text(f"<!-- doc-test: {directive} -->\n```{lang}\n{body}\n```\n")
    (block,) = doc_blocks.parse_page(page)
    errors = doc_blocks.check_block(block).errors
    assert len(errors) == 1 and message in errors[0], errors


def test_a_not_run_block_must_name_what_checks_it(doc_env, tmp_path):
    """A block that is not run here passes only when its reason names a test or script of this
    repository that exists: a renamed or removed one fails, and so does a reason naming none."""
    for reason, expected in (("tests/install/ runs it", None),
                             ("tests/no_such_suite/ runs it", "tests/no_such_suite/, which does "
                                                              "not exist"),
                             ("someone runs it by hand", "names no test or script")):
        page = tmp_path / "page.md"
        page.write_text(f"<!-- doc-test: not-run: {reason} -->\n```sh\nvramscope run -- x\n```\n")
        (block,) = doc_blocks.parse_page(page)
        result = doc_blocks.check_block(block)
        if expected is None:
            assert result.errors == []
        else:
            assert len(result.errors) == 1 and expected in result.errors[0], result.errors


def test_every_guide_and_reference_page_is_checked():
    """doc_blocks finds its pages by glob: the README, every guide and every reference page (no
    block escapes), and not the generated reports."""
    pages = set(doc_blocks.PAGES)
    guides = {str(p.relative_to(REPO)) for p in (REPO / "docs" / "guide").glob("*.md")}
    assert guides and guides <= pages, guides - pages
    assert {"README.md", "docs/report-database.md", "docs/predict-models.md"} <= pages
    assert not {"docs/benchmarks.md", "docs/accuracy.md"} & pages


def test_the_readme_is_a_front_door():
    """At most 300 lines, and it links every guide."""
    readme = (REPO / "README.md").read_text()
    assert len(readme.splitlines()) <= 300
    for guide in (REPO / "docs" / "guide").glob("*.md"):
        if guide.name != "README.md":
            assert f"docs/guide/{guide.name}" in readme, guide.name
