"""`invoke lab` serves (also as root, as in containers) at notebooks/ with the project's kernel."""

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
INVOKE = ROOT / ".venv" / "bin" / "invoke"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.skipif(not INVOKE.exists(), reason="needs the project's venv (scripts/install.sh)")
def test_invoke_lab_serves_the_notebooks_with_the_adiyan_kernel():
    port, token = _free_port(), "adiyan-test-token"
    proc = subprocess.Popen([str(INVOKE), "lab", "--port", str(port)], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, env={**os.environ, "JUPYTER_TOKEN": token},
                            start_new_session=True)
    try:
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 120
        contents = None
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                pytest.fail(f"invoke lab exited {proc.returncode}: {proc.stdout.read()[-2000:]}")
            try:
                with urllib.request.urlopen(f"{base}/api/contents?token={token}", timeout=5) as r:
                    contents = json.load(r)
                break
            except OSError:
                time.sleep(1)
        assert contents is not None, "the server never answered on its port"
        names = {c["name"] for c in contents["content"]}
        shipped = {p.name for p in (ROOT / "notebooks").glob("*.ipynb")}
        assert shipped and shipped <= names  # the root is notebooks/, every notebook listed
        with urllib.request.urlopen(f"{base}/api/kernelspecs?token={token}", timeout=5) as r:
            specs = json.load(r)
        assert specs["default"] == "adiyan"
        assert specs["kernelspecs"]["adiyan"]["spec"]["display_name"] == "Python (adiyan)"
        if os.geteuid() == 0:  # the case that used to exit at once
            assert "allow-root" in subprocess.run([sys.executable, "-c", "import tasks; print(tasks.lab_command())"],
                                                  cwd=ROOT, capture_output=True, text=True).stdout
    finally:
        os.killpg(proc.pid, 15)
        proc.wait(timeout=30)
