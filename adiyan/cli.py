"""``adiyan`` command line: thin verbs over the library (tasks.py calls the same functions)."""

from __future__ import annotations

import argparse
import json
import sys
import time

from .config import ConfigError, load_settings, parse_set


def _settings(args):
    return load_settings(args.config, parse_set(args.set or []))


def cmd_config(args) -> int:
    s = _settings(args)
    print(s.to_yaml(), end="")
    print(f"# config hash: {s.config_hash()}")
    return 0


def cmd_eval(args) -> int:
    from .eval.runner import run_eval, summary_lines

    s = _settings(args)
    run_dir = run_eval(s, progress=not args.quiet)
    print("\n".join(summary_lines(run_dir)))
    return 0


def cmd_models(args) -> int:
    from .models.check import check_models

    s = _settings(args)
    rows = check_models(s, only=args.only)
    print(json.dumps(rows, indent=2) if args.json else _table(rows))
    return 0 if all(r["ok"] for r in rows) else 1


def _table(rows) -> str:
    cols = ["name", "id", "size", "load_s", "ok", "smoke"]
    widths = {c: max(len(c), *(len(str(r.get(c, ""))) for r in rows)) for c in cols}
    widths["smoke"] = min(widths["smoke"], 70)
    line = "  ".join(c.ljust(widths[c]) for c in cols)
    out = [line, "-" * len(line)]
    for r in rows:
        out.append("  ".join(str(r.get(c, ""))[: widths[c]].ljust(widths[c]) for c in cols))
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="adiyan", description="Adiyan RAG workbench")
    p.add_argument("--config", help="YAML config file (else $ADIYAN_CONFIG, else defaults)")
    p.add_argument("--set", action="append", metavar="KEY=VALUE", help="override a config key (repeatable)")
    sub = p.add_subparsers(dest="cmd", required=True)
    sub.add_parser("config", help="print the resolved configuration and its hash").set_defaults(fn=cmd_config)
    pe = sub.add_parser("eval", help="run the evaluation job and write reports/<run-id>/")
    pe.add_argument("--quiet", action="store_true", help="no progress bars")
    pe.set_defaults(fn=cmd_eval)
    pm = sub.add_parser("models", help="prepare and check every offline model")
    pm.add_argument("--only", action="append", help="check only these model names")
    pm.add_argument("--json", action="store_true")
    pm.set_defaults(fn=cmd_models)
    args = p.parse_args(argv)
    try:
        return args.fn(args)
    except ConfigError as exc:
        print(f"adiyan: configuration error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
