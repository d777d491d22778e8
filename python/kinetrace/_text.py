"""Human-readable figures, shared by the reports' ``format()`` and the command line."""

from __future__ import annotations

from collections.abc import Mapping

__all__ = ["change_pct", "counts", "duration", "p_value", "plural", "signed_duration", "size"]


def plural(n: int, word: str) -> str:
    """``1 event``, ``2,000 events``."""
    return f"{n:,} {word}{'' if n == 1 else 's'}"


def size(n: float) -> str:
    """A byte count in decimal units: ``12.3 MB``."""
    for unit, scale in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n:.0f} B"


def duration(us: float) -> str:
    """Microseconds in the largest unit that keeps the figure above 1: ``2.500 ms``."""
    if us < 1000:
        return f"{us:.3f} us"
    if us < 1_000_000:
        return f"{us / 1000:.3f} ms"
    return f"{us / 1_000_000:.3f} s"


def signed_duration(us: float) -> str:
    """A change in microseconds with its sign: ``+2.500 ms``, ``-40.000 us``."""
    return ("-" if us < 0 else "+") + duration(abs(us))


def change_pct(x: float | None) -> str:
    """A change in %, signed, one decimal; ``-`` where there is none."""
    return "-" if x is None else f"{x:+.1f}%"


def p_value(p: float | None) -> str:
    """A p-value in two significant digits, ``<0.0001`` below that; ``-`` where none."""
    return "-" if p is None else f"{p:.2g}" if p >= 0.0001 else "<0.0001"


def counts(counts: Mapping[str, int], lead: str = ": ", limit: int = 12) -> str:
    """``LEAD a 3, b 2, ... (N more)`` over the first ``limit`` entries; ``""`` when empty."""
    if not counts:
        return ""
    items = list(counts.items())
    text = ", ".join(f"{k if k else '(none)'} {n:,}" for k, n in items[:limit])
    if len(items) > limit:
        text += f", ... ({len(items) - limit} more)"
    return lead + text
