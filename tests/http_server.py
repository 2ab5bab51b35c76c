"""A local HTTP server for the integration tests (127.0.0.1, free port, thread).

Routes:
  /page/<name>       the page ``pages[name]`` as text/html (query string ignored)
  /gz/<name>         the same, gzip-compressed (Content-Encoding: gzip)
  /redirect/<name>   302 -> /page/<name>?utm_source=redirect
  /raw/<name>        ``raw[name] = (content_type, bytes)`` as is
  /links             an index page linking every /page/<name>
  /item?id=<name>    the page ``pages[name]`` (a content parameter)
  /flip/<name>?v=<n> ``pages[name]`` while n < 100, else another page (a
                     parameter that starts to matter)
"""
from __future__ import annotations

import gzip
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit


class _Handler(BaseHTTPRequestHandler):
    server_version = "simdup-test/1"

    def log_message(self, *args):  # keep the test output clean
        pass

    def _send(self, status, body: bytes, content_type="text/html; charset=utf-8", headers=()):
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        for key, value in headers:
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        path = urlsplit(self.path).path
        query = parse_qs(urlsplit(self.path).query)
        parts = path.strip("/").split("/", 1)
        route, name = parts[0], parts[1] if len(parts) > 1 else ""
        pages, raw = self.server.pages, self.server.raw
        if route == "page" and name in pages:
            self._send(200, pages[name])
        elif route == "gz" and name in pages:
            self._send(200, gzip.compress(pages[name]), headers=[("Content-Encoding", "gzip")])
        elif route == "redirect" and name in pages:
            self._send(302, b"", headers=[("Location", f"/page/{name}?utm_source=redirect")])
        elif route == "raw" and name in raw:
            content_type, body = raw[name]
            self._send(200, body, content_type)
        elif route == "item" and query.get("id", [""])[0] in pages:
            self._send(200, pages[query["id"][0]])
        elif route == "flip" and name in pages and query.get("v", ["0"])[0].isdigit():
            n = int(query.get("v", ["0"])[0])
            self._send(200, pages[name] if n < 100 else pages[sorted(pages)[n % len(pages)]])
        elif route == "links":
            links = "".join(f'<a href="/page/{n}">{n}</a>\n' for n in sorted(pages))
            self._send(200, f"<html><body>{links}</body></html>".encode())
        else:
            self._send(404, b"<html><body>not found</body></html>")


class _Server(ThreadingHTTPServer):
    # several crawlers at 16 requests each: the listen backlog of 5 that
    # socketserver sets would drop connections on a loaded machine, and a
    # dropped SYN is retried for up to two minutes
    request_queue_size = 128


class PageServer:
    """``with PageServer(pages, raw) as server: server.url("/page/a")``."""

    def __init__(self, pages: dict[str, bytes], raw: dict[str, tuple[str, bytes]] | None = None):
        self.httpd = _Server(("127.0.0.1", 0), _Handler)
        self.httpd.daemon_threads = True
        self.httpd.pages = pages
        self.httpd.raw = raw or {}
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def base(self) -> str:
        host, port = self.httpd.server_address[:2]
        return f"http://{host}:{port}"

    def url(self, path: str) -> str:
        return self.base + path

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(5)
