"""Committed regressions: re-run a headline figure's command and fail on drift, naming the figure.

After Anserini's regressions: each ``benchmarks/regressions/NAME.yaml`` holds the command that
produces a set of figures, where each figure lands in the command's JSON output, the value it
must have and how far it may move::

    name: scifact-reference
    title: SciFact test, reference path (BEIR protocol, whole documents)
    budget: default            # default: part of `invoke bench --verify`; slow: only with --all / by name
    measured: 2026-12-04       # when the expected values were measured
    seconds: 95                # how long the command took then (warm embedding cache; cold in `cold_seconds`)
    command: "{python} benchmarks/scifact.py --no-rerank --no-hnsw --no-product --quiet --out {out}"
    figures:
      - label: BM25 nDCG@10
        path: [methods, bm25, ndcg@10, measured]   # keys into the JSON the command wrote to {out}
        expected: 0.6762
        tolerance: 0           # exact: deterministic retrieval metric
      - label: ingest / embed ratio
        path: [ratio_ingest_to_embed]
        at_most: 1.3           # a bound instead of a value ...
        why: a timing ratio; moves with load, the target is the bound   # ... needs its reason

A tolerance other than 0 and every bound need ``why``. ``{python}`` is this interpreter and
``{out}`` a fresh JSON path; the command runs from the repository root with the offline
environment. Exit status: 0 when every selected file held, 1 when a figure drifted or a command
failed, 2 for a malformed file.

    python benchmarks/verify.py [NAME ...] [--all] [--list] [--check-only JSON] [--tables] [--write-readme]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import shlex
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
REGRESSIONS = ROOT / "benchmarks" / "regressions"
README = ROOT / "README.md"


def table_pages() -> list[Path]:
    """The pages whose regression-table blocks are generated: README.md and every docs/ page."""
    return [README] + sorted((ROOT / "docs").rglob("*.md"))
OFFLINE_ENV = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "RAGAS_DO_NOT_TRACK": "true",
               "MEM0_TELEMETRY": "False", "TOKENIZERS_PARALLELISM": "false"}
BUDGETS = ("default", "slow")


class RegressionFileError(ValueError):
    """A regression file that cannot be read as one: names the file and the reason."""


@dataclass
class Figure:
    label: str
    path: list[str]
    expected: float | str | None = None
    tolerance: float | None = None
    at_least: float | None = None
    at_most: float | None = None
    why: str | None = None
    headline: str | None = None  # a row of the README's headline table, with this text

    def rule(self) -> str:
        if self.expected is not None:
            if isinstance(self.expected, (str, bool)):
                return "exact"
            return "exact" if not self.tolerance else f"± {self.tolerance:g}"
        parts = ([f"≥ {self.at_least:g}"] if self.at_least is not None else []) + (
            [f"≤ {self.at_most:g}"] if self.at_most is not None else [])
        return " and ".join(parts)

    def shown(self) -> str:
        if isinstance(self.expected, bool):
            return str(self.expected).lower()
        if self.expected is not None:
            return self.expected if isinstance(self.expected, str) else f"{self.expected:g}"
        return self.rule()

    def check(self, value) -> str | None:
        """None when ``value`` holds, else the reason it does not."""
        if value is None:
            return "missing from the output"
        if isinstance(self.expected, bool):
            return None if value is self.expected else f"{value!r} is not {self.expected}"
        if isinstance(self.expected, str):
            return None if str(value) == self.expected else f"{value!r} != expected {self.expected!r}"
        try:
            v = float(value)
        except (TypeError, ValueError):
            return f"{value!r} is not a number"
        if math.isnan(v):
            return "NaN"
        if self.expected is not None:
            tol = self.tolerance or 0.0
            if abs(v - float(self.expected)) > tol + 1e-12:
                return f"{v:g} drifted from expected {float(self.expected):g} (tolerance {tol:g})"
        if self.at_least is not None and v < self.at_least:
            return f"{v:g} below the bound {self.at_least:g}"
        if self.at_most is not None and v > self.at_most:
            return f"{v:g} above the bound {self.at_most:g}"
        return None


@dataclass
class Regression:
    name: str
    file: Path
    title: str
    command: str
    budget: str
    figures: list[Figure]
    measured: str | None = None
    seconds: float | None = None
    notes: str | None = None
    extra: dict = field(default_factory=dict)


def _fail(file: Path, reason: str):
    raise RegressionFileError(f"{file}: {reason}")


def load(file: Path) -> Regression:
    """Read and validate one regression file; RegressionFileError names the file and the reason."""
    try:
        raw = yaml.safe_load(file.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        _fail(file, f"not readable as YAML ({exc})")
    if not isinstance(raw, dict):
        _fail(file, "must be a mapping with name, command and figures")
    for key in ("name", "command", "figures"):
        if not raw.get(key):
            _fail(file, f"missing '{key}'")
    if raw["name"] != file.stem:
        _fail(file, f"name {raw['name']!r} differs from the file name {file.stem!r}")
    if "{out}" not in raw["command"]:
        _fail(file, "the command must write its JSON to {out}")
    budget = raw.get("budget", "default")
    if budget not in BUDGETS:
        _fail(file, f"budget {budget!r} is not one of {BUDGETS}")
    figures = []
    for i, f in enumerate(raw["figures"]):
        where = f"figure {i + 1} ({f.get('label', '?') if isinstance(f, dict) else f!r})"
        if not isinstance(f, dict) or not f.get("label") or not f.get("path"):
            _fail(file, f"{where}: needs a label and a path")
        path = f["path"]
        if isinstance(path, str) or not isinstance(path, list) or not all(isinstance(p, (str, int)) for p in path):
            _fail(file, f"{where}: path must be a list of keys")
        has_value = "expected" in f
        has_bound = "at_least" in f or "at_most" in f
        if has_value == has_bound:
            _fail(file, f"{where}: give either expected (with tolerance) or at_least / at_most")
        if has_value and not isinstance(f["expected"], (str, bool)) and "tolerance" not in f:
            _fail(file, f"{where}: a numeric expected value needs a tolerance (0 for exact)")
        if (has_bound or (f.get("tolerance") or 0) != 0) and not f.get("why"):
            _fail(file, f"{where}: a tolerance or bound needs 'why'")
        unknown = set(f) - {"label", "path", "expected", "tolerance", "at_least", "at_most", "why", "headline"}
        if unknown:
            _fail(file, f"{where}: unknown keys {sorted(unknown)}")
        figures.append(Figure(label=f["label"], path=[str(p) for p in path], expected=f.get("expected"),
                              tolerance=f.get("tolerance"), at_least=f.get("at_least"), at_most=f.get("at_most"),
                              why=f.get("why"), headline=f.get("headline")))
    known = {"name", "title", "command", "budget", "figures", "measured", "seconds", "notes"}
    if not isinstance(raw.get("headline_order", 0), int):
        _fail(file, "headline_order must be an integer (the file's place in the README's headline table)")
    return Regression(name=raw["name"], file=file, title=raw.get("title") or raw["name"], command=raw["command"],
                      budget=budget, figures=figures, measured=str(raw["measured"]) if raw.get("measured") else None,
                      seconds=raw.get("seconds"), notes=raw.get("notes"),
                      extra={k: v for k, v in raw.items() if k not in known})


def load_all(directory: Path = REGRESSIONS) -> list[Regression]:
    return [load(f) for f in sorted(directory.glob("*.yaml"))]


def lookup(data, path: list[str]):
    """The value at ``path`` (keys; integers index lists), or None when absent."""
    cur = data
    for key in path:
        if isinstance(cur, dict) and key in cur:
            cur = cur[key]
        elif isinstance(cur, list) and re.fullmatch(r"-?\d+", key) and -len(cur) <= int(key) < len(cur):
            cur = cur[int(key)]
        else:
            return None
    return cur


def check(reg: Regression, data: dict) -> list[dict]:
    """One row per figure: label, value, rule, ok, reason."""
    rows = []
    for fig in reg.figures:
        value = lookup(data, fig.path)
        reason = fig.check(value)
        rows.append({"label": fig.label, "path": "/".join(fig.path), "value": value, "rule": fig.rule(),
                     "expected": fig.shown(), "ok": reason is None, "reason": reason})
    return rows


def run(reg: Regression, *, python: str = sys.executable, keep: Path | None = None) -> dict:
    """Run the file's command and check its figures; returns the verdict (never raises on drift)."""
    with tempfile.TemporaryDirectory(prefix=f"verify-{reg.name}-") as tmp:
        out = Path(keep) if keep else Path(tmp) / f"{reg.name}.json"
        cmd = reg.command.replace("{python}", shlex.quote(python)).replace("{out}", shlex.quote(str(out)))
        t0 = time.perf_counter()
        proc = subprocess.run(cmd, shell=True, cwd=ROOT, env={**os.environ, **OFFLINE_ENV},
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        seconds = round(time.perf_counter() - t0, 1)
        verdict = {"name": reg.name, "command": cmd, "seconds": seconds, "exit_code": proc.returncode}
        if not out.is_file():
            tail = "\n".join(proc.stdout.splitlines()[-15:])
            return {**verdict, "ok": False, "figures": [],
                    "error": f"the command wrote no JSON to {out} (exit {proc.returncode}):\n{tail}"}
        data = json.loads(out.read_text(encoding="utf-8"))
    rows = check(reg, data)
    return {**verdict, "ok": all(r["ok"] for r in rows), "figures": rows}


def print_verdict(v: dict) -> None:
    status = "held" if v["ok"] else "DRIFTED" if v.get("figures") else "FAILED"
    print(f"{v['name']}: {status} ({v.get('seconds', '?')} s)", flush=True)
    if v.get("error"):
        print("  " + v["error"].replace("\n", "\n  "))
    for r in v.get("figures", []):
        mark = "ok " if r["ok"] else "BAD"
        extra = "" if r["ok"] else f"  <- {r['reason']}"
        print(f"  {mark} {r['label']}: {r['value']!r} (expected {r['expected']}, {r['rule']}){extra}")


# README tables ------------------------------------------------------------------------------------

def table(reg: Regression) -> str:
    """The Markdown table a README block shows for one regression file."""
    when = f", measured {reg.measured}" if reg.measured else ""
    lines = [f"*{reg.title}* — `benchmarks/regressions/{reg.name}.yaml`{when}; re-check: "
             f"`invoke bench --verify {reg.name}`" + (" (slow)" if reg.budget == "slow" else ""), "",
             "| figure | value | rule |", "|---|---:|---|"]
    lines += [f"| {f.label} | {f.shown()} | {f.rule()} |" for f in reg.figures]
    return "\n".join(lines)


BLOCK = re.compile(r"<!-- regression-table: (?P<name>[\w.-]+) -->\n(?P<body>.*?)<!-- /regression-table -->",
                   re.DOTALL)


def readme_blocks(text: str) -> dict[str, str]:
    return {m["name"]: m["body"].strip() for m in BLOCK.finditer(text)}


def render_readme(text: str, regs: dict[str, Regression]) -> str:
    """README text with every regression-table block (and the headline block) regenerated."""
    text = HEADLINE.sub(lambda m: f"<!-- regression-headline -->\n{headline_table(regs)}\n"
                                  "<!-- /regression-headline -->", text)
    def sub(m):
        name = m["name"]
        if name not in regs:
            raise RegressionFileError(f"README.md: block regression-table: {name} has no file "
                                      f"benchmarks/regressions/{name}.yaml")
        return f"<!-- regression-table: {name} -->\n{table(regs[name])}\n<!-- /regression-table -->"
    return BLOCK.sub(sub, text)


HEADLINE = re.compile(r"<!-- regression-headline -->\n(?P<body>.*?)<!-- /regression-headline -->", re.DOTALL)


def headline_table(regs: dict[str, Regression]) -> str:
    """The README's headline figures: every figure marked ``headline``, one row each, with its file."""
    lines = ["| what | figure | measured | re-check |", "|---|---:|---|---|"]
    for r in sorted(regs.values(), key=lambda r: (r.extra.get("headline_order", 99), r.name)):
        for f in r.figures:
            if f.headline:
                slow = " (slow)" if r.budget == "slow" else ""
                lines.append(f"| {f.headline} | {f.shown()} | {r.measured or '?'} | "
                             f"`invoke bench --verify {r.name}`{slow} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("names", nargs="*", help="regression names (default: every file in the default budget)")
    p.add_argument("--all", action="store_true", help="every file, slow ones included")
    p.add_argument("--list", action="store_true", help="list the files, their budgets and figures")
    p.add_argument("--check-only", metavar="JSON", help="check an existing output instead of running (one NAME)")
    p.add_argument("--keep", metavar="JSON", help="keep the command's JSON here (one NAME)")
    p.add_argument("--tables", action="store_true", help="print the README tables")
    p.add_argument("--write-readme", action="store_true", help="regenerate the regression-table blocks of README.md "
                   "and docs/*.md")
    p.add_argument("--dir", default=str(REGRESSIONS), help=argparse.SUPPRESS)
    p.add_argument("--json", metavar="FILE", help="write the verdicts here")
    a = p.parse_args(argv)
    try:
        regs = {r.name: r for r in load_all(Path(a.dir))}
    except RegressionFileError as exc:
        print(f"verify: {exc}", file=sys.stderr)
        return 2
    names = [n for item in a.names for n in item.split(",") if n]
    unknown = [n for n in names if n not in regs]
    if unknown:
        print(f"verify: no regression file for {unknown}; known: {', '.join(regs)}", file=sys.stderr)
        return 2
    if a.list:
        for r in regs.values():
            print(f"{r.name:<28} {r.budget:<8} {len(r.figures):>2} figures  ~{r.seconds or '?'} s  {r.title}")
        return 0
    if a.tables:
        print("\n\n".join(table(r) for r in regs.values()))
        return 0
    if a.write_readme:
        for page in table_pages():
            text = page.read_text(encoding="utf-8")
            if readme_blocks(text) or HEADLINE.search(text):
                try:
                    new = render_readme(text, regs)
                except RegressionFileError as exc:
                    print(f"verify: {page.relative_to(ROOT)}: {exc}", file=sys.stderr)
                    return 2
                page.write_text(new, encoding="utf-8")
                print(f"verify: regenerated {len(readme_blocks(new)) + len(HEADLINE.findall(new))} blocks in "
                      f"{page.relative_to(ROOT)}")
        return 0
    selected = [regs[n] for n in names] if names else [r for r in regs.values() if a.all or r.budget == "default"]
    if a.check_only:
        if len(selected) != 1:
            print("verify: --check-only takes exactly one NAME", file=sys.stderr)
            return 2
        data = json.loads(Path(a.check_only).read_text(encoding="utf-8"))
        print(f"verify: --check-only re-read {a.check_only} and re-ran nothing: this checks the file against "
              f"{selected[0].name}'s figures, not the code (`invoke bench --verify {selected[0].name}` re-runs it)")
        rows = check(selected[0], data)
        verdicts = [{"name": selected[0].name, "ok": all(r["ok"] for r in rows), "figures": rows, "seconds": 0}]
        print_verdict(verdicts[0])
    else:
        skipped = [r.name for r in regs.values() if r not in selected]
        if skipped and not names:
            print(f"verify: not run (slow; `--all` or by name): {', '.join(skipped)}")
        verdicts = []
        for r in selected:
            print(f"verify: {r.name}: {r.command}", flush=True)
            verdicts.append(run(r, keep=Path(a.keep) if a.keep and len(selected) == 1 else None))
            print_verdict(verdicts[-1])
    if a.json:
        Path(a.json).parent.mkdir(parents=True, exist_ok=True)
        Path(a.json).write_text(json.dumps(verdicts, indent=2, default=str), encoding="utf-8")
    bad = [v["name"] for v in verdicts if not v["ok"]]
    print(f"verify: {len(verdicts) - len(bad)}/{len(verdicts)} held" + (f"; drifted or failed: {', '.join(bad)}"
                                                                      if bad else ""))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
