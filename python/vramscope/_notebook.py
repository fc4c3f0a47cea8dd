"""Results inline in Jupyter (``_repr_html_``) and the ``%vramscope`` magics.

A report renders as its summary (each device's peaks and bytes by category at the peak) followed
by the self-contained viewer (``vramscope view``) in an ``<iframe srcdoc>``: nothing is fetched
from any URL, so the notebook works offline and keeps the page when saved. A page over
``MAX_INLINE_BYTES`` is not put into the notebook (it would weigh the file down): a link to the
full page on disk stands in its place.
"""

from __future__ import annotations

import html
import importlib
import shlex
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

if TYPE_CHECKING:
    from .results import Report

MAX_INLINE_BYTES = 5 << 20
_pages: dict[str, Path] = {}  # database -> the page made for it once


def _size(n: int) -> str:
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(value) < 1024 or unit == "TiB":
            return f"{value:.2f} {unit}" if unit != "B" else f"{int(value)} B"
        value /= 1024
    return f"{n} B"


def summary_html(report: "Report") -> str:
    """Each device's peaks and its bytes by category at the peak, as a small table."""
    title = "predicted" if report.predicted else html.escape(report.source or "built-in example")
    parts = [f"<div class='vramscope-report'><b>vramscope report</b>: {title}"]
    for device in report.devices:
        parts.append(
            f"<p>cuda:{device.device}: peak allocated {_size(device.peak_allocated.bytes)}, "
            f"peak reserved {_size(device.peak_reserved.bytes)} (step {device.peak_step}, "
            f"{html.escape(device.peak_phase)})</p><table><tr><th>category</th><th>bytes</th>"
            "<th>allocations</th></tr>")
        for share in device.categories_at_peak.values():
            parts.append(f"<tr><td>{share.category}</td><td>{_size(share.bytes)}</td>"
                         f"<td>{share.count}</td></tr>")
        parts.append("</table>")
    parts.append("</div>")
    return "".join(parts)


def viewer_html(report: "Report") -> str:
    """The viewer of the report's database in an iframe, or a link to it when too large; "" for
    a report without a database."""
    if report.database is None or not report.database.is_file():
        return ""
    key = str(report.database)
    page = _pages.get(key)
    if page is None or not page.is_file():
        from .api import view

        page = view(report.database, output=report.database.with_suffix(".html"), force=True)
        _pages[key] = page
    size = page.stat().st_size
    if size > MAX_INLINE_BYTES:
        return (f"<p>The viewer is {_size(size)}, more than a notebook should carry "
                f"({_size(MAX_INLINE_BYTES)}): <a href='{html.escape(page.as_uri())}' "
                f"target='_blank'>open {html.escape(str(page))}</a></p>")
    return ("<iframe class='vramscope-viewer' sandbox='allow-scripts' "
            "style='width:100%;height:760px;border:1px solid #ccc' "
            f"srcdoc=\"{html.escape(page.read_text(encoding='utf-8'), quote=True)}\"></iframe>")


def report_html(report: "Report") -> str:
    return summary_html(report) + viewer_html(report)


class _Shown:
    """What a magic returns: displays as its report (or its note)."""

    def __init__(self, report: Optional["Report"], note: str = "") -> None:
        self.report = report
        self.note = note

    def _repr_html_(self) -> str:
        if self.report is None:
            return f"<p>vramscope: {html.escape(self.note)}</p>"
        return report_html(self.report)

    def __repr__(self) -> str:
        return self.note or repr(self.report)


def vramscope_magic(line: str, cell: Optional[str] = None) -> Any:
    """``%vramscope report PATH ...`` / ``%vramscope predict --model gpt2 ...``: the command's
    report displayed (its flags as on the command line). ``%%vramscope [STEPS]``: the cell run
    under :func:`vramscope.capture` (``STEPS`` optimizer steps, else the whole cell), then its
    report displayed."""
    import tempfile

    from . import _engine
    from .inprocess import capture
    from .results import report_from_json

    if cell is not None:
        # IPython is there when a magic runs; imported opaquely (the package needs no stubs).
        get_ipython = importlib.import_module("IPython").get_ipython
        words = shlex.split(line)
        steps = int(words[0]) if words else None
        with capture(steps) as cap:
            result = get_ipython().run_cell(cell)
        if result.error_in_exec is not None:
            return None
        if not any(cap.folder.glob("*.pickle")):
            return _Shown(None, f"the cell made no snapshot in {cap.folder} (the recording "
                                "starts with CUDA)")
        return _Shown(cap.report())
    words = shlex.split(line)
    if not words or words[0] not in ("report", "predict"):
        raise ValueError("%vramscope report PATH [flags] | %vramscope predict --model M [flags]; "
                         "%%vramscope [STEPS] captures a cell")
    database = Path(tempfile.mkdtemp(prefix="vramscope-magic-")) / "report.sqlite"
    document, _ = _engine.run_json([*words, "--json", "--quiet", "-o", str(database)])
    return _Shown(report_from_json(document, database, None))


def load_ipython_extension(ipython: Any) -> None:
    """``%load_ext vramscope``."""
    ipython.register_magic_function(vramscope_magic, magic_kind="line_cell",
                                    magic_name="vramscope")
