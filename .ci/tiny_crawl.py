"""A tiny real crawl with the installed scrapy-simdup (CI's package check).

Serves three article pages on 127.0.0.1 (two of them copies of one article
in other page furniture), crawls them with Scrapy and the add-on, and exits
non-zero unless the copy was detected and dropped. Reads the article texts
from the argument, a ground-truth.json of the article-extraction-benchmark.

    python tiny_crawl.py tests/data/sample/article-extraction-benchmark/ground-truth.json
"""
import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import scrapy
from scrapy.crawler import CrawlerProcess

import scrapy_simdup


def articles(path, n):
    truth = json.load(open(path, encoding="utf-8"))
    out = []
    for key in sorted(truth):
        paragraphs = [p for p in truth[key]["articleBody"].split("\n") if len(p.split()) >= 8]
        if sum(len(p.split()) for p in paragraphs) >= 300:
            out.append(paragraphs)
        if len(out) == n:
            return out
    raise SystemExit(f"{path}: not {n} articles of 300 words")


def page(paragraphs, aside):
    body = "".join(f"<p>{p}</p>" for p in paragraphs)
    return (f"<html><head><meta charset='utf-8'><title>{paragraphs[0][:50]}</title></head>"
            f"<body><nav><a href='/'>Home</a></nav><article>{body}</article>"
            f"<aside>{aside}</aside></body></html>").encode()


first, second = articles(sys.argv[1], 2)
PAGES = {"/a": page(first, "Subscribe today"), "/a-copy": page(first, "Download the app"),
         "/b": page(second, "Subscribe today")}
PAGES["/"] = ("<html><body>" + "".join(f"<a href='{p}'>{p}</a>" for p in PAGES)
              + "</body></html>").encode()


class Handler(BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def do_GET(self):
        body = PAGES.get(self.path)
        self.send_response(200 if body else 404)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(body or b"")))
        self.end_headers()
        self.wfile.write(body or b"")


class Spider(scrapy.Spider):
    name = "tiny"

    def parse(self, response):
        # the start page (never dropped) links the articles, crawled one by one
        for href in response.css("a::attr(href)").getall():
            if href != "/":
                yield response.follow(href, self.parse_article)

    def parse_article(self, response):
        yield {"url": response.url}


server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
threading.Thread(target=server.serve_forever, daemon=True).start()
Spider.start_urls = [f"http://127.0.0.1:{server.server_port}/"]
process = CrawlerProcess({"ADDONS": {"scrapy_simdup.Addon": 0}, "LOG_LEVEL": "INFO",
                          "CONCURRENT_REQUESTS": 1, "ROBOTSTXT_OBEY": False,
                          "TELNETCONSOLE_ENABLED": False})
crawler = process.create_crawler(Spider)
process.crawl(crawler)
process.start()
server.shutdown()
stats = crawler.stats.get_stats()
print(f"scrapy_simdup {scrapy_simdup.__version__} from {scrapy_simdup.__file__}")
print({k: v for k, v in stats.items() if k.startswith("simdup/")})
if stats.get("simdup/duplicates") != 1 or stats.get("simdup/dropped") != 1 \
        or stats.get("item_scraped_count") != 2:
    raise SystemExit("tiny crawl: expected the copy of /a dropped and two articles scraped")
print("tiny crawl: the near-duplicate was dropped")
