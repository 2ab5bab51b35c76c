"""A real ``redis-server`` on a free loopback port, for the tests.

``RedisServer`` starts the Debian ``redis-server`` binary (a temporary working
directory; no persistence, or an append-only file written at every command with
``appendonly=True``) and can be killed and restarted on the same port, which is
how the fault tests simulate Redis lost mid-crawl: restarted empty, or with its
data (the AOF of its working directory). The session fixture
``redis_server`` starts one for the whole test run and stops it at the end.

If ``redis-server`` is not installed the Redis tests FAIL when ``CI`` is set
(``.ci/run`` installs it, so a missing binary there is a defect), and are
skipped with a clear reason on a developer machine.
"""
import ctypes
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

import pytest


def _die_with_parent():
    """In the child: get SIGKILL when the test process dies (no orphan servers)."""
    if sys.platform.startswith("linux"):
        try:
            libc = ctypes.CDLL("libc.so.6", use_errno=True)
            libc.prctl(1, signal.SIGKILL)           # PR_SET_PDEATHSIG
        except OSError:
            pass


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class RedisServer:
    """One ``redis-server`` process on 127.0.0.1, owned by the caller."""

    def __init__(self, binary="redis-server", port=None, appendonly=False, extra=()):
        self.binary = binary
        self.port = port or free_port()
        self.dir = tempfile.mkdtemp(prefix="simdup-redis-")
        self.proc = None
        #: every write in the AOF before Redis answers: a kill loses nothing
        self.appendonly = appendonly
        self.extra = list(extra)

    @property
    def url(self):
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self, timeout=10.0):
        if self.proc is not None and self.proc.poll() is None:
            return self
        self.proc = subprocess.Popen(
            [self.binary, "--port", str(self.port), "--bind", "127.0.0.1",
             "--save", "", "--dir", self.dir,
             *(("--appendonly", "yes", "--appendfsync", "always") if self.appendonly
               else ("--appendonly", "no")),
             "--protected-mode", "no", "--loglevel", "warning",
             "--maxclients", "1000", *self.extra],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
            # PDEATHSIG follows the creating *thread*: only from the main thread
            preexec_fn=_die_with_parent
            if threading.current_thread() is threading.main_thread() else None)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                err = self.proc.stderr.read().decode(errors="replace")
                raise RuntimeError(f"redis-server exited with {self.proc.returncode}: {err}")
            if self.ping():
                return self
            time.sleep(0.02)
        self.stop()
        raise RuntimeError(f"redis-server did not answer on port {self.port} in {timeout} s")

    def ping(self):
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=0.5) as sock:
                sock.sendall(b"PING\r\n")
                return sock.recv(16).startswith(b"+PONG")
        except OSError:
            return False

    def wipe(self):
        """Forget the data on disk (the server stopped): it restarts empty."""
        assert self.proc is None, "stop the server first"
        shutil.rmtree(self.dir, ignore_errors=True)
        os.makedirs(self.dir)

    def stop(self):
        """Kill the server (SIGKILL: an abrupt loss, like a crash)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        if self.proc is not None and self.proc.stderr is not None:
            self.proc.stderr.close()
        self.proc = None

    def close(self):
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)


def redis_binary():
    """Path of redis-server, or fail (CI) / skip (locally) with the reason."""
    binary = shutil.which("redis-server")
    if binary is None:
        reason = ("redis-server is not installed (Debian package redis-server; "
                  ".ci/run installs it)")
        if os.environ.get("CI"):
            pytest.fail(reason)
        pytest.skip(reason)
    return binary


@pytest.fixture(scope="session")
def redis_server():
    """A running RedisServer shared by the session; tests use distinct keys."""
    server = RedisServer(redis_binary()).start()
    try:
        yield server
    finally:
        server.close()


@pytest.fixture
def private_redis():
    """A RedisServer of the test's own, which the test may kill and restart
    (it comes back empty)."""
    server = RedisServer(redis_binary()).start()
    try:
        yield server
    finally:
        server.close()


@pytest.fixture
def aof_redis():
    """A RedisServer of the test's own with an append-only file fsynced at
    every write: killed and restarted, it comes back with its data."""
    server = RedisServer(redis_binary(), appendonly=True).start()
    try:
        yield server
    finally:
        server.close()
