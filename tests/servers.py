"""Real HTTP peers for the server tests, all on loopback.

- :class:`LlamaServer`: llama-cpp-python's OpenAI-compatible server (``python -m
  llama_cpp.server``, its ``server`` extra) in a subprocess, serving the packaged SmolLM2 GGUF
  (chat, alias ``smollm2``) and the nomic-embed-text GGUF (embeddings, alias
  ``nomic-embed-text``) from one config file, one thread each. The server keeps one model loaded
  and swaps on demand (each swap is a GGUF load from the page cache, well under a second here).
- :class:`HTTPPeer`: a stdlib ``ThreadingHTTPServer`` in a thread answering with a handler
  function and recording every request. :class:`FaultProxy` forwards to the real server, or
  delays, or answers HTTP 500 / broken JSON / non-JSON / JSON of the wrong shape; the Ollama
  tests replay recorded responses through it. These are real HTTP peers, not mock objects.

``llama_server`` is a session fixture: import it into a test module (``from servers import
llama_server``). Every module shares one server process (started on first use, stopped at
the end of the session).
"""

from __future__ import annotations

import atexit
import json
import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Callable

import pytest

ROOT = Path(__file__).resolve().parents[1]
MODEL_DIR = ROOT / ".cache" / "adiyan" / "models"
CHAT_ALIAS = "smollm2"
EMBED_ALIAS = "nomic-embed-text"
STARTUP_TIMEOUT_S = 180.0


def free_port() -> int:
    """A TCP port nothing listens on right now (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _server_env() -> dict[str, str]:
    """This environment without the variables llama_cpp.server would read as settings.

    Its settings are pydantic ``BaseSettings`` (every field readable from the environment, any
    case) and its ``__main__`` reads ``HOST`` / ``PORT`` / ``CONFIG_FILE``: a stray ``PORT``
    or ``API_KEY`` on a CI machine must not move or lock the test server.
    """
    from llama_cpp.server.settings import ModelSettings, ServerSettings

    fields = {f.lower() for f in (*ModelSettings.model_fields, *ServerSettings.model_fields)}
    fields |= {"host", "port", "config_file"}
    env = {k: v for k, v in os.environ.items() if k.lower() not in fields}
    env["HF_HUB_OFFLINE"] = "1"
    return env


class LlamaServer:
    """llama_cpp.server in a subprocess on a free loopback port; see the module docstring."""

    def __init__(self, workdir: Path, *, threads: int = 1):
        from adiyan.models import assets

        self.workdir = Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.chat_path = str(assets.smollm2_path())
        self.embed_path = str(assets.nomic_gguf_path(MODEL_DIR, progress=False))
        common = {"n_threads": threads, "n_threads_batch": threads, "seed": 0, "logits_all": False, "verbose": False}
        self.config = {
            "host": "127.0.0.1", "port": self.port,
            "models": [
                {"model": self.chat_path, "model_alias": CHAT_ALIAS, "n_ctx": 2048, **common},
                # the same context and batch sizes as the in-process LlamaCppEmbedder
                {"model": self.embed_path, "model_alias": EMBED_ALIAS, "embedding": True, "n_ctx": 2048,
                 "n_batch": 2048, "n_ubatch": 2048, **common},
            ],
        }
        self.config_path = self.workdir / "llama_server.json"
        self.log_path = self.workdir / "llama_server.log"
        self.proc: subprocess.Popen | None = None
        self.startup_s: float | None = None

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def url(self) -> str:
        """The OpenAI-compatible base URL (what ``openai-compatible:URL`` takes)."""
        return self.base + "/v1"

    def start(self) -> "LlamaServer":
        self.config_path.write_text(json.dumps(self.config, indent=1))
        log = self.log_path.open("wb")
        t0 = time.monotonic()
        self.proc = subprocess.Popen([sys.executable, "-m", "llama_cpp.server", "--config_file", str(self.config_path)],
                                     stdout=log, stderr=subprocess.STDOUT, env=_server_env(), cwd=self.workdir,
                                     start_new_session=True)
        log.close()
        deadline = t0 + STARTUP_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"llama_cpp.server exited with {self.proc.returncode} at start:\n{self.log_tail()}")
            try:
                with urllib.request.urlopen(self.base + "/v1/models", timeout=5) as resp:
                    ids = {m["id"] for m in json.load(resp)["data"]}
                if {CHAT_ALIAS, EMBED_ALIAS} <= ids:
                    self.startup_s = time.monotonic() - t0
                    return self
            except (urllib.error.URLError, ConnectionError, TimeoutError, ValueError, KeyError):
                pass
            time.sleep(0.2)
        self.stop()
        raise RuntimeError(f"llama_cpp.server did not answer on {self.base} within {STARTUP_TIMEOUT_S:g} s:\n"
                           f"{self.log_tail()}")

    def log_tail(self, n: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return "<no log>"

    def requests(self, path: str) -> int:
        """POST requests to ``path`` the server has answered with 200, from its access log."""
        text = self.log_path.read_text(errors="replace")
        return text.count(f'"POST {path} HTTP/1.1" 200')

    def stop(self) -> None:
        proc, self.proc = self.proc, None
        if proc is None or proc.poll() is not None:
            return
        os.killpg(proc.pid, signal.SIGTERM)  # its own session: the server and nothing else
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(15)


_shared: LlamaServer | None = None
_shared_lock = threading.Lock()


def shared_llama_server() -> LlamaServer:
    """The one server of this test process, started on first use and stopped at exit."""
    global _shared
    with _shared_lock:
        if _shared is None or _shared.proc is None or _shared.proc.poll() is not None:
            workdir = Path(tempfile.mkdtemp(prefix="adiyan-llama-server-"))
            _shared = LlamaServer(workdir)
            atexit.register(_stop_and_clean, _shared)
            _shared.start()
        return _shared


def over_http(make_settings, url: str, **more):
    """Settings that send the LLM, the judge and the embedder to the OpenAI-compatible ``url``."""
    return make_settings(**{"llm.name": f"openai-compatible:{url}", "llm.model": CHAT_ALIAS, "llm.max_tokens": 48,
                            "embedder.name": f"openai-compatible:{url}", "embedder.model": EMBED_ALIAS,
                            "eval.judge": f"openai-compatible:{url}", "eval.judge_model": CHAT_ALIAS,
                            "eval.judge_max_tokens": 48, **more})


def _stop_and_clean(server: LlamaServer) -> None:
    server.stop()
    shutil.rmtree(server.workdir, ignore_errors=True)


@pytest.fixture(scope="session")
def llama_server():
    server = shared_llama_server()
    yield server
    _stop_and_clean(server)


# ------------------------------------------------------------------ HTTP peers of our own

Reply = tuple[int, dict[str, str], bytes]
Handler = Callable[[str, str, bytes], Reply]


def json_reply(obj, status: int = 200) -> Reply:
    return status, {"Content-Type": "application/json"}, json.dumps(obj).encode()


class HTTPPeer:
    """A loopback HTTP server in a thread: ``handler(method, path, body) -> (status, headers,
    body)`` answers every request; ``requests`` records ``(method, path, body bytes)``."""

    def __init__(self, handler: Handler, *, port: int = 0):
        self.handler = handler
        self.requests: list[tuple[str, str, bytes]] = []
        self._local = threading.local()  # the connection of the request a handler thread serves
        peer = self

        class _Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _serve(self):
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                peer.requests.append((self.command, self.path, body))
                peer._local.conn = self.connection
                status, headers, out = peer.handler(self.command, self.path, body)
                try:
                    self.send_response(status)
                    for k, v in headers.items():
                        self.send_header(k, v)
                    self.send_header("Content-Length", str(len(out)))
                    self.end_headers()
                    self.wfile.write(out)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (its timeout): nothing to answer

            do_GET = do_POST = _serve

            def log_message(self, *args):
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", port), _Handler)
        self._server.daemon_threads = True
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.05,), name="test-http-peer",
                                        daemon=True)
        self._thread.start()

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def client_gone(self) -> bool:
        """Whether the client of the request this thread serves has hung up (its timeout)."""
        conn = getattr(self._local, "conn", None)
        if conn is None:
            return False
        try:
            readable, _, _ = select.select([conn], [], [], 0)
            return bool(readable) and conn.recv(1, socket.MSG_PEEK) == b""
        except OSError:
            return True

    def posted(self, path: str) -> list[dict]:
        """JSON bodies POSTed to ``path`` so far."""
        return [json.loads(b) for m, p, b in self.requests if m == "POST" and p == path]

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


FAULTS = {
    # a 500 with an HTML body, as a crashing reverse proxy sends
    "http500": (500, {"Content-Type": "text/html"}, b"<html><body>Internal Server Error</body></html>"),
    # JSON cut off mid-object, under a JSON content type
    "broken_json": (200, {"Content-Type": "application/json"}, b'{"id": "chatcmpl-1", "choices": [{"index": 0, "mess'),
    # a plain-text body (a captive portal, a misrouted URL)
    "not_json": (200, {"Content-Type": "text/plain"}, b"upstream connect error or disconnect/reset before headers"),
    # valid JSON of the wrong shape: no choices / no data
    "wrong_shape": (200, {"Content-Type": "application/json"}, b'{"object": "error", "message": "overloaded"}'),
}


class FaultProxy(HTTPPeer):
    """In front of the real server: ``mode`` is ``pass``, ``delay`` (sleep ``delay_s`` then
    forward) or one of :data:`FAULTS`. ``url`` is the OpenAI-compatible base URL to use."""

    def __init__(self, upstream: str, *, port: int = 0):
        self.upstream = upstream
        self.mode = "pass"
        self.delay_s = 0.0
        super().__init__(self._handle, port=port)

    @property
    def url(self) -> str:
        return self.base + "/v1"

    def _handle(self, method: str, path: str, body: bytes) -> Reply:
        if self.mode in FAULTS:
            return FAULTS[self.mode]
        if self.mode == "delay":
            time.sleep(self.delay_s)
            if self.client_gone():  # a slow server's late answer to nobody: spare the real server the work
                return 504, {"Content-Type": "text/plain"}, b"client gone"
        req = urllib.request.Request(self.upstream + path, data=body if method == "POST" else None, method=method,
                                     headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=300) as resp:
                return resp.status, {"Content-Type": resp.headers.get("Content-Type", "application/json")}, resp.read()
        except urllib.error.HTTPError as exc:
            return exc.code, {"Content-Type": exc.headers.get("Content-Type", "text/plain")}, exc.read()
