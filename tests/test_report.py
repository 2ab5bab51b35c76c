"""``simdup rescore`` and ``simdup report``: re-scoring from batch files, one
cluster definition, and the HTML report of a real crawl opened in headless
Chromium."""
from __future__ import annotations

import html
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from scrapy_simdup.cli import main
from scrapy_simdup.fingerprint.sketch import matches_needed
from scrapy_simdup.merge import merge, stats
from scrapy_simdup.merge.collection import Collection
from scrapy_simdup.merge.rescore import rescore
from scrapy_simdup.report import gather, render
from scrapy_simdup.storage.batchfile import list_batches, read_batch
from scrapy_simdup.storage.batchwriter import BatchWriter
from tests.batch_pages import features_page, write_crawl
from tests.crawl_jobs import checkout_env, run_job, write_job
from tests.http_server import PageServer


def _words(rng, n):
    return [f"w{int(x)}" for x in rng.integers(0, 5000, n)]


def _crawl_with_revisits(directory):
    """40 pages in 10 clusters of 4, then 15 of them crawled again (the same
    URL and page: revisits), and 5 lone pages crawled twice."""
    rng = np.random.default_rng(11)
    docs = {}
    with BatchWriter(directory, batch_size=16) as w:
        for c in range(10):
            base = _words(rng, 300)
            for v in range(4):
                doc = list(base)
                for _ in range(8 * v):
                    doc[int(rng.integers(len(doc)))] = "edit"
                docs[f"https://news.example/{c}/{v}?utm_source=x"] = doc
        for k in range(5):
            docs[f"https://other.example/lone/{k}"] = _words(rng, 300)
        for url, doc in docs.items():
            w.append(features_page(doc), url)
        again = [u for u in docs if "lone" in u] + list(docs)[:10]
        for url in again:
            w.append(features_page(docs[url]), url)
    return directory


def test_rescore_is_a_fresh_merge_and_leaves_the_collection_alone(tmp_path):
    d = write_crawl(tmp_path / "crawl")
    merge([d], distance=22, min_similarity=0.15)       # the crawls' own collection
    before = {p.name: p.read_bytes() for p in (d / "collection").iterdir() if p.is_file()}
    for s in (0.1, 0.5, 0.9):
        res = rescore([d], distance=22, min_similarity=s)
        fresh = merge([d], tmp_path / f"fresh-{s}", distance=22, min_similarity=s)
        assert np.array_equal(res.pairs, fresh.pairs_array)
        coll = Collection(tmp_path / f"fresh-{s}")
        assert res.urls.all == coll.urls(np.arange(coll.count))
    after = {p.name: p.read_bytes() for p in (d / "collection").iterdir() if p.is_file()}
    assert after == before


def test_the_best_earlier_match_says_where_every_threshold_cuts(tmp_path):
    """A page has a pair at threshold S exactly when its best earlier match
    has at least matches_needed(S) equal bins."""
    d = _crawl_with_revisits(tmp_path / "crawl")
    res = rescore([d], distance=22, min_similarity=0.15, best=True)
    for s in (0.1, 0.15, 0.3, 0.5, 0.8):
        fresh = merge([d], tmp_path / f"fresh-{s}", distance=22, min_similarity=s)
        flagged = set(fresh.pairs_array["id"].tolist())
        assert flagged == set(np.flatnonzero(res.best_matches >= matches_needed(s)).tolist())
    assert 0 < len(flagged) < res.count


def test_stats_clusters_and_report_agree_on_the_clusters(tmp_path):
    """A page crawled twice alone (a revisit) is no cluster: stats used to
    count it, --clusters did not."""
    d = _crawl_with_revisits(tmp_path / "crawl")
    clusters, pairs = tmp_path / "clusters.jsonl", tmp_path / "pairs.jsonl"
    assert main(["merge", str(d), "--clusters", str(clusters), "--pairs", str(pairs)]) == 0
    lines = clusters.read_text().splitlines()
    assert len(lines) == 10
    assert stats([d])["collection"]["clusters"] == 10
    assert gather([d], distance=22, min_similarity=0.15).n_clusters == 10
    rows = [json.loads(line) for line in pairs.read_text().splitlines()]
    # (PSM-F: a re-crawled page of a cluster may first meet another page of it)
    lone = [r for r in rows if "lone" in r["url"]]
    assert len(lone) == 5 and all(r["revisit"] for r in lone)
    assert 5 <= sum(r["revisit"] for r in rows) <= 15
    # --no-revisits leaves them out (merge and rescore alike)
    lean = tmp_path / "lean.jsonl"
    assert main(["rescore", str(d), "--pairs", str(lean), "--no-revisits",
                 "--clusters", str(tmp_path / "c2.jsonl")]) == 0
    kept = [json.loads(line) for line in lean.read_text().splitlines()]
    assert kept == [r for r in rows if not r["revisit"]]
    assert (tmp_path / "c2.jsonl").read_text() == clusters.read_text()


def test_the_report_of_plain_batches_and_an_empty_directory(tmp_path):
    d = write_crawl(tmp_path / "crawl")
    data = gather([d], distance=22, min_similarity=0.15)
    assert data.totals["checked"] == 60 and data.n_clusters == 20
    assert data.totals["near_duplicates"] == 40
    assert [c["size"] for c in data.clusters] == [3] * 10
    assert data.crawls[0]["crawl"] == ""       # no crawl record: said as such
    page = render(data)
    assert "batches without a crawl record" in page
    (tmp_path / "empty").mkdir()
    empty = gather([tmp_path / "empty"], distance=22, min_similarity=0.15)
    assert empty.totals["checked"] == 0 and "<svg" in render(empty)


def test_report_refuses_an_output_inside_a_crawl_directory(tmp_path, capsys):
    d = write_crawl(tmp_path / "crawl")
    assert main(["report", str(d), "-o", str(d / "r.html")]) == 2
    assert "inside the crawl directory" in capsys.readouterr().err
    assert main(["report", str(tmp_path / "nowhere"), "-o", str(tmp_path / "r.html")]) == 2


# -- a real crawl, its report, and Chromium -----------------------------------------------

def chromium() -> str:
    path = shutil.which("chromium") or shutil.which("chromium-browser")
    if path is None:
        pytest.skip("Debian's chromium is not installed (`apt-get install chromium`; "
                    ".ci/run installs it where it can)")
    return path


def open_in_chromium(page: Path, screenshot: Path, width: int = 1100,
                     height: int = 2400) -> list[str]:
    """Load ``page`` in headless Chromium, take a screenshot; the page's
    errors (JavaScript errors, console errors, resources that failed to
    load) as Chromium logged them."""
    proc = subprocess.run(
        [chromium(), "--headless", "--disable-gpu", "--no-sandbox", "--no-first-run",
         "--disable-extensions", f"--user-data-dir={page.parent / '.chromium'}",
         "--enable-logging=stderr", "--v=0", f"--window-size={width},{height}",
         f"--screenshot={screenshot}", page.resolve().as_uri()],
        capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    # console messages are logged as CONSOLE(line) "message"; network failures
    # as net::ERR_...; everything else (dbus, GPU) is the browser's own
    return [line for line in proc.stderr.splitlines()
            if "CONSOLE" in line or "Uncaught" in line or "net::ERR_" in line
            or "Failed to load" in line]


def test_chromium_check_sees_a_broken_page(tmp_path):
    """The check below can fail: a page with a script error and a missing image."""
    bad = tmp_path / "bad.html"
    bad.write_text("<!DOCTYPE html><html><body><img src='missing.png'>"
                   "<script>undefinedFunction()</script></body></html>")
    errors = open_in_chromium(bad, tmp_path / "bad.png", 400, 300)
    assert any("undefinedFunction" in line for line in errors), errors


def _article(rng, vocab, n=260):
    return " ".join(vocab[i] for i in rng.integers(0, len(vocab), n))


def _html(title, text):
    paragraphs = "".join(f"<p>{text[i:i + 400]}</p>" for i in range(0, len(text), 400))
    return (f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{title}</title></head>"
            f"<body><article><h1>{title}</h1>{paragraphs}</article></body></html>").encode()


@pytest.fixture(scope="module")
def site():
    rng = np.random.default_rng(5)
    vocab = [f"word{i}" for i in range(3000)]
    pages = {}
    for a in range(8):
        text = _article(rng, vocab)
        pages[f"story{a}"] = _html(f"Story {a}", text)
        for v in range(a % 4):      # 0 to 3 copies: a tracking-parameter copy, a print view
            words = text.split()
            for _ in range(6 * (v + 1)):
                words[int(rng.integers(len(words)))] = "changed"
            pages[f"story{a}-copy{v}"] = _html(f"Story {a} (copy {v})", " ".join(words))
    with PageServer(pages, raw={"logo": ("image/png", b"\x89PNG\r\n\x1a\n" + bytes(40))}) \
            as server:
        server.names = sorted(pages)
        yield server


def _crawl(tmp_path, site, name, directory, urls):
    job = {"settings": {"LOG_LEVEL": "INFO", "ADDONS": {"scrapy_simdup.Addon": 0},
                        "CONCURRENT_REQUESTS": 1, "SIMDUP_DIR": str(directory),
                        "SIMDUP_BATCH_SIZE": 7},
           "requests": [{"url": u} for u in urls]}
    result = run_job(write_job(tmp_path / f"{name}.json", job), tmp_path / f"{name}-out.json",
                     cwd=tmp_path)
    assert result["error"] is None, result.get("traceback") or result["error"]
    return result["stats"]


def _numbers(page: str, key: str) -> list[int]:
    return [int(v.replace(",", "")) for v in
            re.findall(rf'data-n="{re.escape(key)}">([\d,]+)<', page)]


@pytest.mark.slow
def test_the_report_of_a_real_crawl(site, tmp_path):
    d = tmp_path / "simdup"
    pages = [site.url(f"/page/{n}") for n in site.names]
    skipped = [site.url("/raw/logo"), site.url("/missing")]
    first = _crawl(tmp_path, site, "first", d, pages + skipped)
    # a re-crawl of a few pages: revisits
    originals = [site.url(f"/page/{n}") for n in site.names if "copy" not in n]
    second = _crawl(tmp_path, site, "second", d, originals[:5])
    crawls = [first, second]
    out = tmp_path / "report" / "report.html"
    out.parent.mkdir()
    proc = subprocess.run([sys.executable, "-m", "scrapy_simdup.cli", "report", str(d),
                           "-o", str(out), "--json"], capture_output=True, text=True,
                          env=checkout_env(), timeout=300)
    assert proc.returncode == 0, proc.stderr
    info = json.loads(proc.stdout)
    page = out.read_text("utf-8")

    # the numbers shown, against the batch files and the crawls' own stats
    batches = [read_batch(p) for p in list_batches(d)]
    urls = [u for b in batches for u in b.urls]
    assert _numbers(page, "checked") == [len(urls)] == [info["checked"]]
    assert len(urls) == sum(c["simdup/checked"] for c in crawls)
    assert _numbers(page, "crawl-checked") == [c["simdup/checked"] for c in crawls]
    assert _numbers(page, "crawl-online-near") == [c.get("simdup/duplicates", 0)
                                                   for c in crawls]
    assert second["simdup/revisits"] == 5 and "simdup/revisits" not in first
    assert first["simdup/skipped/not_html"] == 1 and first["simdup/skipped/status"] == 1
    for reason in ("not_html&nbsp;1", "status&nbsp;1"):
        assert reason in page
    assert _numbers(page, "skipped") == [2]
    # at the report's threshold: the pairs of a fresh merge of the same files
    pairs_file = tmp_path / "pairs.jsonl"
    assert main(["merge", str(d), "--collection", str(tmp_path / "fresh"),
                 "--pairs", str(pairs_file), "--clusters", str(tmp_path / "c.jsonl")]) == 0
    pairs = [json.loads(line) for line in pairs_file.read_text().splitlines()]
    # every page with an earlier match is a near-duplicate or a revisit (its
    # URL met before: the 5 pages crawled again, whichever match PSM-F found)
    revisits = second["simdup/revisits"]
    assert _numbers(page, "revisits") == [revisits] == [5]
    assert _numbers(page, "near_duplicates") == [len(pairs) - revisits] == [12]
    n_clusters = len((tmp_path / "c.jsonl").read_text().splitlines())
    assert _numbers(page, "clusters") == [n_clusters] == [6]
    assert sorted(_numbers(page, "cluster-size"), reverse=True) == [4, 4, 3, 3, 2, 2]
    assert sum(_numbers(page, "crawl-near")) == len(pairs) - revisits
    assert _numbers(page, "crawl-revisits") == [0, 5]
    # no collection was made or changed by the report
    assert not (d / "collection").exists()
    # self-contained: nothing fetched from anywhere
    assert not re.search(r'(?:src|href)\s*=\s*["\']?(?:https?:)?//', page)
    assert "<script src" not in page and "<link" not in page
    assert html.unescape(page).count("<svg") == 4

    errors = open_in_chromium(out, tmp_path / "report.png")
    assert errors == []
    shot = (tmp_path / "report.png").read_bytes()
    assert shot[:8] == b"\x89PNG\r\n\x1a\n" and len(shot) > 20_000


def test_scrapy_simdup_report_inside_a_project(tmp_path):
    from tests.test_cli import _project, _run

    d = _crawl_with_revisits(tmp_path / "crawl")
    project, scrapy = _project(tmp_path, f"SIMDUP_DIR = {str(d)!r}\n")
    out = _run(scrapy + ["simdup", "report", "-o", "r.html", "--min-similarity", "0.5"],
               cwd=project)
    assert out.returncode == 0, out.stderr
    page = (project / "r.html").read_text("utf-8")
    assert "estimated similarity &ge; 0.5" in page and _numbers(page, "checked") == [60]
    out = _run(scrapy + ["simdup", "rescore", "--json", "--pairs", "p.jsonl"], cwd=project)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["fingerprints"] == 60 and (project / "p.jsonl").exists()
    assert not (d / "collection").exists()
    for args, message in ((["report"], "report needs -o"),
                          (["report", "-o", "x.html", "--pairs", "p"], "--pairs: not an option"),
                          (["merge", "-o", "x.html"], "-o: not an option of merge")):
        out = _run(scrapy + ["simdup", *args], cwd=project)
        assert out.returncode != 0 and message in out.stdout + out.stderr


def test_the_report_shows_the_canonical_url_a_copy_declared(tmp_path):
    """The batches keep each page's declared rel=canonical (issue 30): the
    re-scoring reads it back by id and the report shows it by the copy."""
    rng = np.random.default_rng(5)
    base = _words(rng, 300)
    d = tmp_path / "crawl"
    with BatchWriter(d, batch_size=4) as w:
        w.append(features_page(base), "https://a.example/story")
        for v in range(1, 4):
            doc = list(base)
            doc[v] = "edit"
            w.append(features_page(doc), f"https://b.example/copy/{v}",
                     canonical="https://a.example/story" if v < 3 else None)
    res = rescore([d], distance=22, min_similarity=0.15)
    assert res.canonicals == [None, "https://a.example/story", "https://a.example/story", None]
    page = render(gather([d], distance=22, min_similarity=0.15))
    assert page.count("canonical: https://a.example/story") == 2
    # batches without canonical URLs: none shown
    assert rescore([write_crawl(tmp_path / "plain")], distance=22,
                   min_similarity=0.15).canonicals is None
