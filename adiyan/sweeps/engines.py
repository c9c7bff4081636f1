"""Kernel engines: how a point's notebook is executed.

``papermill`` starts a fresh kernel per point (full isolation; every point pays for kernel
start, imports and model loads); ``persistent`` runs the points of one worker in one kernel
that stays up, the user namespace cleared between points, so imports, loaded models, opened
indexes and caches are shared and a point costs only its own work. Both go through papermill
(parameters injected after the ``parameters`` cell, per-cell progress) on a kernel manager we
start and shut down ourselves.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import threading
from pathlib import Path

import nbformat

from .spec import DEFAULT_KERNEL, SweepSpec

ENGINE_NAME = "adiyan-sweep"
_REGISTERED = threading.Event()

# Between the points of a persistent kernel: drop the user's variables and figures. Cheaper than
# %reset -f (which also runs a full gc over a heap holding torch and the models).
RESET_CODE = ("_ip = get_ipython()\n"
              "for _n in [n for n in _ip.user_ns if not n.startswith('_') and n not in _ip.user_ns_hidden]:\n"
              "    del _ip.user_ns[_n]\n"
              "import matplotlib.pyplot as _plt; _plt.close('all'); del _plt, _ip, _n\n")


def register_engine() -> None:
    """A papermill engine that runs on a kernel manager we own: fresh per point, or kept alive."""
    if _REGISTERED.is_set():
        return
    from papermill.clientwrap import PapermillNotebookClient  # heavy: only the runner executes notebooks
    from papermill.engines import NBClientEngine, papermill_engines  # heavy: as above
    from papermill.log import logger  # heavy: as above

    class SweepEngine(NBClientEngine):
        @classmethod
        def execute_managed_notebook(cls, nb_man, kernel_name, log_output=False, stdout_file=None,
                                     stderr_file=None, start_timeout=60, execution_timeout=None,
                                     kernel=None, **kwargs):
            client = PapermillNotebookClient(nb_man, km=kernel.km, kernel_name=kernel_name, timeout=execution_timeout,
                                             startup_timeout=start_timeout, log=logger, log_output=log_output,
                                             stdout_file=stdout_file, stderr_file=stderr_file)
            client.kc = kernel.client()  # one client per kernel, kept open across its points
            nb = client.execute(cleanup_kc=False)
            if kernel.persistent:  # clear the namespace for the next point; modules and models stay
                client.wait_for_reply(client.kc.execute(RESET_CODE, silent=True, store_history=False))
            return nb

    papermill_engines.register(ENGINE_NAME, SweepEngine)
    _REGISTERED.set()


class Kernel:
    """One kernel (IPC transport, cwd = the project root) and its client, started and shut down by us."""

    def __init__(self, kernel_name: str, cwd: Path, *, persistent: bool):
        from jupyter_client.manager import KernelManager  # heavy: only the runner starts kernels

        self.kernel_name, self.cwd, self.persistent = kernel_name, cwd, persistent
        # IPC sockets under a private folder: kernels started at once never pick the same paths.
        self._sockets = tempfile.mkdtemp(prefix=f"adiyan-kernel-{os.getpid()}-")
        self.km = KernelManager(kernel_name=kernel_name, transport="ipc", ip=os.path.join(self._sockets, "k"))
        self.km.start_kernel(cwd=str(cwd))
        self._kc = None

    def client(self):
        if self._kc is None:
            kc = self.km.client()
            kc.start_channels()
            kc.wait_for_ready(timeout=120)
            kc.allow_stdin = False
            self._kc = kc
        return self._kc

    def alive(self) -> bool:
        return self.km.is_alive()

    def close(self, now: bool = False) -> None:
        with contextlib.suppress(Exception):
            if self._kc is not None:
                self._kc.stop_channels()
        self._kc = None
        with contextlib.suppress(Exception):
            self.km.shutdown_kernel(now=now)  # a clean exit runs the kernel's atexit (replica clean-up)
        with contextlib.suppress(Exception):
            self.km.cleanup_resources()
        shutil.rmtree(self._sockets, ignore_errors=True)


def kernel_name(spec: SweepSpec) -> str:
    """The spec's kernel, else the notebook's kernelspec, else the project's (``adiyan``)."""
    if spec.kernel:
        return spec.kernel
    nb = nbformat.read(str(spec.notebook), as_version=4)
    return (nb.metadata.get("kernelspec") or {}).get("name") or DEFAULT_KERNEL


def error_text(exc: BaseException) -> str:
    """A failed point's error in one line: the cell and exception of a notebook error."""
    name = type(exc).__name__
    if name == "PapermillExecutionError":
        return f"cell {getattr(exc, 'exec_count', '?')}: {getattr(exc, 'ename', '')}: {getattr(exc, 'evalue', '')}"
    return f"{name}: {exc}"
