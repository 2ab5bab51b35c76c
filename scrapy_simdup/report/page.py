"""The report as one HTML file: inline CSS and SVG, no script, no external resource."""
from __future__ import annotations

import json
import time
from html import escape

from scrapy_simdup._version import __version__
from scrapy_simdup.fingerprint.sketch import SKETCH_BYTES, matches_needed, similarity
from scrapy_simdup.merge.output import open_output
from scrapy_simdup.report import svg
from scrapy_simdup.report.data import ReportData

#: thresholds of the "at other thresholds" table (those above the floor are shown)
OTHER_THRESHOLDS = (0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.7, 0.9)

CSS = """
:root { --near: #d9480f; --below: #adb5bd; --ink: #212529; --muted: #6c757d; --line: #dee2e6; }
* { box-sizing: border-box; }
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, "DejaVu Sans", sans-serif;
       color: var(--ink); margin: 0; background: #f8f9fa; }
main { max-width: 1000px; margin: 0 auto; padding: 24px 28px 48px; background: #fff; }
h1 { font-size: 24px; margin: 0 0 4px; }
h2 { font-size: 18px; margin: 32px 0 8px; padding-top: 12px; border-top: 1px solid var(--line); }
h3 { font-size: 14px; margin: 18px 0 4px; }
p.meta, p.note, .caption { color: var(--muted); }
.cards { display: flex; flex-wrap: wrap; gap: 12px; margin: 16px 0; }
.card { flex: 1 1 150px; border: 1px solid var(--line); border-radius: 6px; padding: 10px 14px; }
.card .n { font-size: 26px; font-weight: 600; }
.card .n.near { color: var(--near); }
.card .label { color: var(--muted); font-size: 12px; }
table { border-collapse: collapse; width: 100%; margin: 6px 0 10px; font-size: 13px; }
th, td { text-align: left; padding: 4px 8px; border-bottom: 1px solid var(--line);
         vertical-align: top; }
th { font-weight: 600; background: #f1f3f5; }
td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
td.url, td code { word-break: break-all; }
.wide { overflow-x: auto; }
table.crawls { font-size: 12px; }
code { font-size: 12px; }
svg { display: block; max-width: 100%; height: auto; margin: 8px 0; }
svg text { font: 11px system-ui, -apple-system, "DejaVu Sans", sans-serif; fill: var(--ink); }
svg .title { font-size: 13px; font-weight: 600; }
svg .tick, svg .row-note { fill: var(--muted); }
svg .axis-title { fill: var(--muted); font-size: 12px; }
svg .grid { stroke: #f1f3f5; }
svg .axis { stroke: var(--muted); }
svg .s-near { fill: var(--near); }
svg .s-below { fill: var(--below); }
svg .track { fill: #f1f3f5; }
svg .threshold { stroke: var(--ink); stroke-width: 1.5; stroke-dasharray: 5 3; }
svg .threshold-label { font-weight: 600; }
.legend span { display: inline-block; margin-right: 14px; }
.legend i { display: inline-block; width: 11px; height: 11px; margin-right: 5px;
            vertical-align: -1px; }
.cluster { border: 1px solid var(--line); border-radius: 6px; padding: 8px 12px; margin: 10px 0; }
.cluster .size { font-weight: 600; color: var(--near); }
"""


def _n(value) -> str:
    return f"{value:,}" if isinstance(value, int) else escape(str(value))


def _num_cell(value, key: str | None = None) -> str:
    attr = f' data-n="{escape(key)}"' if key else ""
    return f'<td class="num"{attr}>{"&ndash;" if value is None else _n(value)}</td>'


def _when(t) -> str:
    if not isinstance(t, (int, float)):
        return "&ndash;"
    return escape(time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(t)))


def _skipped(skipped: dict) -> str:
    if not skipped:
        return "0"
    total = sum(skipped.values())
    return f"{total:,} (" + ", ".join(f"{escape(k)}&nbsp;{v:,}" for k, v in
                                      sorted(skipped.items(), key=lambda kv: -kv[1])) + ")"


def _card(value, label: str, key: str, near: bool = False) -> str:
    return (f'<div class="card"><div class="n{" near" if near else ""}" data-n="{key}">'
            f'{_n(value)}</div><div class="label">{escape(label)}</div></div>')


def _summary(d: ReportData) -> str:
    t = d.totals
    skipped = sum(t["skipped"].values())
    out = ['<h2 id="summary">Summary</h2><div class="cards">',
           _card(t["checked"], "pages checked (fingerprinted)", "checked"),
           _card(t["near_duplicates"], "near-duplicates at this threshold", "near_duplicates",
                 near=True),
           _card(t["revisits"], "revisits (a URL met again)", "revisits"),
           _card(skipped, "pages skipped (not fingerprinted)", "skipped"),
           _card(d.n_clusters, "clusters", "clusters"), "</div>"]
    out.append('<div class="wide"><table class="crawls"><tr><th>crawl</th><th>started</th>'
               '<th class="num">batches</th><th class="num">checked</th>'
               '<th class="num">near-dup. (crawl)</th><th class="num">revisits (crawl)</th>'
               '<th>skipped (crawl)</th><th class="num">near-dup. (here)</th>'
               '<th class="num">revisits (here)</th></tr>')
    for row in d.crawls:
        name = escape(row["crawl"]) if row["crawl"] else "<i>batches without a crawl record</i>"
        state = "" if row["closed"] in (True, None) else " (not closed: killed or running)"
        out.append(f'<tr class="crawl"><td><code>{escape(row["dir"])}</code><br>{name}{state}</td>'
                   f'<td>{_when(row["started"])}</td>' + _num_cell(row["batches"])
                   + _num_cell(row["checked"], "crawl-checked")
                   + _num_cell(row["online_near_duplicates"], "crawl-online-near")
                   + _num_cell(row["online_revisits"])
                   + f'<td>{_skipped(row["skipped"])}</td>'
                   + _num_cell(row["near_duplicates"], "crawl-near")
                   + _num_cell(row["revisits"], "crawl-revisits") + "</tr>")
    out.append("</table></div>")
    out.append('<p class="caption">"crawl": what the crawl decided online, from its crawl '
               'record (or, for batches without one, their headers). "here": a fresh merge of '
               'every batch at this report\'s threshold, pages in the order the crawls met '
               'them. A revisit is a page with an earlier match whose URL was met before '
               '(a page crawled again); it counts neither as a near-duplicate nor in a '
               'cluster.'
               + (f' Skipped, all crawls: {_skipped(t["skipped"])}.' if t["skipped"] else "")
               + "</p>")
    return "".join(out)


def _threshold(d: ReportData) -> str:
    lo = d.floor_bins
    bins = list(range(lo, SKETCH_BYTES + 1))
    labels = [f"{similarity(b):.2f}" for b in bins]
    near = [d.best_hist[b] if b >= d.needed else 0 for b in bins]
    below = [d.best_hist[b] if b < d.needed else 0 for b in bins]
    at = max(0, d.needed - lo) if d.needed > lo else None
    out = ['<h2 id="threshold">Where the threshold cuts</h2>',
           '<p class="legend"><span><i style="background:var(--near)"></i>near-duplicate at '
           'this threshold</span><span><i style="background:var(--below)"></i>kept (its best '
           'earlier match is below the threshold)</span></p>',
           svg.histogram(near, below, labels, threshold_at=at,
                         threshold_label=f"min similarity {d.min_similarity:g}",
                         x_title="estimated similarity of the best earlier match "
                         "(equal sketch bins of 32)", y_title="pages",
                         title="Best earlier match of every checked page: similarity"),
           f'<p class="caption">Each page\'s most similar earlier page among its candidates '
           f'(within {d.distance} bits on either key). <span data-n="no_match">'
           f'{d.no_match:,}</span> pages have no earlier match of at least {lo} equal bins '
           f'(similarity {similarity(lo):.2f}) and are not drawn. A page is a near-duplicate '
           f'at a threshold exactly when its bar lies at or right of it.</p>']
    rows = []
    for s in OTHER_THRESHOLDS:
        k = matches_needed(s)
        if k >= lo:
            rows.append(f"<tr><td>{s:g}</td><td class=\"num\">{k}</td>"
                        f"<td class=\"num\">{sum(d.best_hist[k:]):,}</td></tr>")
    out.append('<h3>Pages with an earlier match at other thresholds</h3>'
               '<table style="width:auto"><tr><th>--min-similarity</th>'
               '<th class="num">equal bins</th><th class="num">pages</th></tr>'
               + "".join(rows) + "</table>"
               '<p class="caption">Revisits included. <code>simdup report --min-similarity '
               'S</code> (or <code>simdup rescore</code>) gives the pairs and clusters at '
               'another threshold without crawling again.</p>')
    labels = [str(h) for h in range(d.distance + 1)]
    out.append(svg.histogram(d.distance_near, d.distance_below, labels,
                             threshold_at=d.distance + 1,
                             threshold_label=f"radius {d.distance}",
                             x_title="bits between the page and its best earlier match "
                             "(the closer of the two keys)", y_title="pages",
                             title="Best earlier match of every checked page: distance"))
    return "".join(out)


def _share_section(title: str, anchor: str, rows: list, what: str) -> str:
    out = [f'<h2 id="{anchor}">{escape(title)}</h2>']
    if not rows:
        return out[0] + '<p class="note">No pages.</p>'
    bars = [(r["name"], r["share"], f'{r["near_duplicates"]:,} of {r["pages"]:,} pages')
            for r in rows]
    out.append(svg.share_bars(bars, title=f"Share of near-duplicates per {what}, "
                              "most near-duplicates first"))
    out.append(f'<table class="{anchor}"><tr><th>{escape(what)}</th><th class="num">pages</th>'
               '<th class="num">near-duplicates</th><th class="num">share</th>'
               '<th class="num">revisits</th></tr>')
    for r in rows:
        out.append(f'<tr><td class="url"><code>{escape(r["name"])}</code></td>'
                   + _num_cell(r["pages"]) + _num_cell(r["near_duplicates"])
                   + f'<td class="num">{100 * r["share"]:.1f}%</td>'
                   + _num_cell(r["revisits"]) + "</tr>")
    out.append("</table>")
    return "".join(out)


def _clusters(d: ReportData) -> str:
    out = ['<h2 id="clusters">Largest clusters</h2>',
           f'<p><span data-n="clusters-total">{d.n_clusters:,}</span> clusters holding '
           f'{d.clustered_pages:,} distinct URLs. Definition: {escape(d.cluster_definition)}. '
           'The representative is the page met first; the similarity and distance are each '
           'page\'s to it.</p>']
    for c in d.clusters:
        out.append(f'<div class="cluster"><span class="size"><span data-n="cluster-size">'
                   f'{c["size"]:,}</span> pages</span> &middot; representative '
                   f'<code class="url">{escape(c["representative"])}</code>'
                   '<table><tr><th>URL</th><th class="num">similarity</th>'
                   '<th class="num">distance</th></tr>')
        for s in c["samples"]:
            canon = (f'<br><span class="caption">canonical: {escape(s["canonical"])}</span>'
                     if s.get("canonical") else "")
            out.append(f'<tr><td class="url">{escape(s["url"])}{canon}</td>'
                       f'<td class="num">{s["similarity"]:.2f}</td>'
                       f'<td class="num">{s["distance"]}</td></tr>')
        if c["more"]:
            out.append(f'<tr><td colspan="3" class="caption">and {c["more"]:,} more</td></tr>')
        out.append("</table></div>")
    if d.revisited:
        out.append('<h3 id="revisits">Revisits (apart from the clusters)</h3><table>'
                   '<tr><th>URL met again</th><th class="num">times</th></tr>')
        for r in d.revisited:
            out.append(f'<tr><td class="url">{escape(r["url"])}</td>'
                       f'<td class="num">{r["times"]:,}</td></tr>')
        out.append("</table>")
    return "".join(out)


def render(d: ReportData) -> str:
    """The report's HTML (one self-contained document)."""
    rule = (f"a page is a near-duplicate when an earlier page lies within {d.distance} bits of "
            f"it on either 64-bit key and their sketches agree in at least {d.needed} of "
            f"{SKETCH_BYTES} bins (estimated similarity &ge; {d.min_similarity:g})")
    body = [f"<h1>{escape(d.title)}</h1>",
            f'<p class="meta">{_when(d.generated)} &middot; scrapy-simdup {__version__} '
            f'&middot; {len(d.dirs)} director{"y" if len(d.dirs) == 1 else "ies"}: '
            + ", ".join(f"<code>{escape(x)}</code>" for x in d.dirs)
            + f' &middot; built in {d.seconds:.1f} s</p>',
            f"<p>Threshold: {rule}.</p>",
            _summary(d), _threshold(d),
            _share_section("Near-duplicates per host", "hosts", d.hosts, "host"),
            _share_section("Near-duplicates per URL pattern", "patterns", d.patterns,
                           "URL pattern"),
            '<p class="caption">A URL pattern is the path with its numbers as {n} and '
            'id-like segments as {id}, and the names of its query parameters.</p>',
            _clusters(d)]
    if d.notes:
        body.append('<h2 id="notes">Notes</h2><ul>'
                    + "".join(f"<li>{escape(n)}</li>" for n in d.notes) + "</ul>")
    data = json.dumps(d.as_dict(), ensure_ascii=True).replace("</", "<\\/")
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
            f"<title>{escape(d.title)}</title><style>{CSS}</style></head><body><main>"
            + "".join(body)
            + f'</main><script type="application/json" id="simdup-report-data">{data}</script>'
            "</body></html>\n")


def write_report(d: ReportData, target) -> None:
    """Write the report to ``target`` (a path, replaced atomically, or an open file)."""
    with open_output(target) as handle:
        handle.write(render(d))
