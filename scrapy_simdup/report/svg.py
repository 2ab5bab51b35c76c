"""The report's charts, written as inline SVG (no plotting library, no script).

Two kinds are enough: vertical bars over a numbered axis (a histogram,
each bar in one of two series stacked, with a marked threshold) and
horizontal bars of a share per row. Colours come from the page's CSS
classes (``.s-near``, ``.s-below``, ``.threshold``), text is escaped.
"""
from __future__ import annotations

from html import escape
from math import ceil, log10


def _nice_max(value: float) -> float:
    """The smallest 1, 2, 2.5 or 5 x 10^k not below ``value`` (an axis end)."""
    if value <= 0:
        return 1.0
    base = 10 ** int(log10(value)) if value >= 1 else 1.0
    for step in (1, 2, 2.5, 5, 10):
        if value <= step * base:
            return step * base
    return 10 * base  # pragma: no cover


def _num(value: float) -> str:
    return f"{int(value):,}" if float(value).is_integer() else f"{value:,.1f}"


def histogram(near: list, below: list, labels: list, *, threshold_at: float | None,
              threshold_label: str, x_title: str, y_title: str, title: str,
              width: int = 760, height: int = 300) -> str:
    """Stacked vertical bars: ``below[i]`` (lower series, ``.s-below``) and
    ``near[i]`` on top (``.s-near``), one bar per label; a dashed line at
    bar position ``threshold_at`` (its left edge; fractional: inside) with
    ``threshold_label``. Every label is drawn when they fit, else every k-th."""
    left, right, top, bottom = 64, 16, 34, 48
    plot_w, plot_h = width - left - right, height - top - bottom
    n = max(len(labels), 1)
    totals = [a + b for a, b in zip(near, below)]
    y_max = _nice_max(max(totals, default=0))
    slot = plot_w / n
    bar = max(1.0, slot * 0.8)
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height}" '
           f'width="{width}" height="{height}" role="img" aria-label="{escape(title)}">',
           f'<text class="title" x="{left}" y="18">{escape(title)}</text>']
    for k in range(5):                                  # grid and y ticks
        v = y_max * k / 4
        y = top + plot_h - plot_h * k / 4
        out.append(f'<line class="grid" x1="{left}" x2="{left + plot_w}" y1="{y:.1f}" '
                   f'y2="{y:.1f}"/>')
        out.append(f'<text class="tick" x="{left - 6}" y="{y + 4:.1f}" '
                   f'text-anchor="end">{_num(v)}</text>')
    every = max(1, ceil(n / (plot_w / 34)))
    for i, label in enumerate(labels):
        x = left + i * slot + (slot - bar) / 2
        y0 = top + plot_h
        for value, cls in ((below[i], "s-below"), (near[i], "s-near")):
            if value:
                h = plot_h * value / y_max
                y0 -= h
                out.append(f'<rect class="{cls}" x="{x:.1f}" y="{y0:.1f}" width="{bar:.1f}" '
                           f'height="{h:.1f}"><title>{escape(str(label))}: '
                           f'{_num(value)}</title></rect>')
        if i % every == 0:
            out.append(f'<text class="tick" x="{left + (i + 0.5) * slot:.1f}" '
                       f'y="{top + plot_h + 16}" text-anchor="middle">{escape(str(label))}</text>')
    out.append(f'<line class="axis" x1="{left}" x2="{left + plot_w}" y1="{top + plot_h}" '
               f'y2="{top + plot_h}"/>')
    if threshold_at is not None:
        x = left + threshold_at * slot
        out.append(f'<line class="threshold" x1="{x:.1f}" x2="{x:.1f}" y1="{top - 6}" '
                   f'y2="{top + plot_h}"/>')
        anchor = "end" if threshold_at > n * 0.7 else "start"
        dx = -5 if anchor == "end" else 5
        out.append(f'<text class="threshold-label" x="{x + dx:.1f}" y="{top + 6}" '
                   f'text-anchor="{anchor}">{escape(threshold_label)}</text>')
    out.append(f'<text class="axis-title" x="{left + plot_w / 2:.1f}" y="{height - 8}" '
               f'text-anchor="middle">{escape(x_title)}</text>')
    out.append(f'<text class="axis-title" transform="translate(14 {top + plot_h / 2:.1f}) '
               f'rotate(-90)" text-anchor="middle">{escape(y_title)}</text>')
    out.append("</svg>")
    return "".join(out)


def share_bars(rows: list, *, title: str, width: int = 760) -> str:
    """One horizontal bar per row ``(label, share in [0, 1], note)``: the
    share of near-duplicates, the label on the left, the note on the right."""
    label_w, note_w, row_h, top = 300, 170, 22, 30
    plot_w = width - label_w - note_w - 16
    height = top + row_h * max(len(rows), 1) + 8
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height}" '
           f'width="{width}" height="{height}" role="img" aria-label="{escape(title)}">',
           f'<text class="title" x="0" y="18">{escape(title)}</text>']
    for i, (label, share, note) in enumerate(rows):
        y = top + i * row_h
        text = label if len(label) <= 44 else label[:20] + "\u2026" + label[-23:]
        out.append(f'<text class="row-label" x="{label_w - 8}" y="{y + 15}" text-anchor="end">'
                   f'<title>{escape(label)}</title>{escape(text)}</text>')
        out.append(f'<rect class="track" x="{label_w}" y="{y + 4}" width="{plot_w}" '
                   f'height="{row_h - 8}"/>')
        if share > 0:
            out.append(f'<rect class="s-near" x="{label_w}" y="{y + 4}" '
                       f'width="{max(1.0, plot_w * min(share, 1.0)):.1f}" height="{row_h - 8}">'
                       f'<title>{escape(label)}: {100 * share:.1f}%</title></rect>')
        out.append(f'<text class="row-note" x="{label_w + plot_w + 8}" y="{y + 15}">'
                   f'{escape(note)}</text>')
    out.append("</svg>")
    return "".join(out)
