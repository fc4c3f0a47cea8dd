"""Rendering results inline in Jupyter (``_repr_html_``): the summary as a small HTML table."""

from __future__ import annotations

import html
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .results import Report


def _size(n: int) -> str:
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(value) < 1024 or unit == "TiB":
            return f"{value:.2f} {unit}" if unit != "B" else f"{int(value)} B"
        value /= 1024
    return f"{n} B"


def report_html(report: "Report") -> str:
    """The summary of a report: each device's peaks and its bytes by category at the peak."""
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
