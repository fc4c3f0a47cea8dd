"""What every part of the checker uses: the repository, how a page is named in messages, and the
error of a page that breaks the rules."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def regenerate_hint(page: Path) -> str:
    return f"regenerate: python3 scripts/doc_blocks.py --write {display(page)}"


def display(path: Path) -> str:
    try:
        return str(Path(path).resolve().relative_to(REPO))
    except ValueError:
        return str(path)



class DocError(Exception):
    """A page that breaks the rules (a block without a directive, a bad directive)."""
