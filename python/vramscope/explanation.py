"""The result of :func:`vramscope.explain`: what each out-of-memory message in a text means.

Figures read from a message are ranges (``ByteRange``), since a message rounds them ("1.50 GiB"
is any size that prints so); ``.json`` is the whole versioned document of ``explain --json``
(schema ``schemas/explain.schema.json``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Optional


@dataclass(frozen=True)
class ByteRange:
    """A size known to lie in [lo, hi] bytes."""
    lo: int
    hi: int


@dataclass(frozen=True)
class Holder:
    """One thing that held the GPU's memory when the message was written."""
    holder: str
    what: str
    bytes: ByteRange
    assumed: bool


@dataclass(frozen=True)
class OomMessageExplanation:
    """One message: its text, the verdict (who held the GPU, in one sentence), the cause the
    figures prove (``fragmentation``, ``other_processes``, ``too_large``...), and what to change."""
    text: str
    backend: str
    kind: str
    cause: str
    verdict: str
    holder: str
    holders: tuple[Holder, ...]
    advice: tuple[str, ...]
    shortfall: Optional[ByteRange]
    json: Mapping[str, Any] = field(repr=False)


@dataclass(frozen=True)
class Explanation:
    """Every message found (``messages``; empty when the text holds none) and how many more
    were left out past ``max_messages``."""
    messages: tuple[OomMessageExplanation, ...]
    left_out: int
    json: Mapping[str, Any] = field(repr=False)

    def __bool__(self) -> bool:
        return bool(self.messages)


def _range(value: Any) -> Optional[ByteRange]:
    if not isinstance(value, dict):
        return None
    return ByteRange(int(value["lo"]), int(value["hi"]))


def explanation_from_json(document: Mapping[str, Any]) -> Explanation:
    """The Explanation of an ``explain --json`` document."""
    messages = []
    for m in document.get("messages", []):
        verdict = m.get("verdict") or {}
        holders = tuple(Holder(str(h["holder"]), str(h["what"]), ByteRange(
            int(h["bytes"]["lo"]), int(h["bytes"]["hi"])), bool(h.get("assumed")))
            for h in verdict.get("holders", []))
        messages.append(OomMessageExplanation(
            text=str(m.get("text", "")), backend=str(m.get("backend", "")),
            kind=str(m.get("kind", "")), cause=str(m.get("cause", "")),
            verdict=str(verdict.get("sentence", "")), holder=str(verdict.get("holder", "")),
            holders=holders, advice=tuple(str(a) for a in m.get("advice", [])),
            shortfall=_range(m.get("shortfall")), json=m))
    return Explanation(tuple(messages), int(document.get("left_out", 0)), document)
