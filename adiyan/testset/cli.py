"""``adiyan testset generate`` and ``adiyan testset validate`` (added to the main parser by adiyan.cli)."""

from __future__ import annotations

import sys
from pathlib import Path

from ..config import load_settings, parse_set
from ..eval.evalset import EvalsetError
from ..retrieval.pipeline import UnsupportedSetting
from .corpus import list_documents
from .generate import generate, write_evalset
from .validate import CORPORA, PANELS, run_validation, summary_lines

# what generation reads: where the caches are, the parser, the chunker, the embedder (near-duplicates,
# reachability); any other --set would be reported as if it had shaped the set
GENERATE_SECTIONS = ("paths", "ingest", "chunking", "embedder", "llm")  # llm: the LLM kinds


def _settings(args, sections=None):
    overrides = parse_set(args.set or [])
    if sections is not None:
        for key in overrides:
            if key.split(".", 1)[0] not in sections and key != "seed":
                raise UnsupportedSetting(key, f"adiyan testset {args.tscmd}",
                                         f"generation reads only {', '.join(sections)} (and seed)")
    return load_settings(args.config, overrides, preset=args.preset)


def cmd_generate(args) -> int:

    s = _settings(args, GENERATE_SECTIONS)
    kinds = [k.strip() for item in args.kinds or [] for k in item.split(",") if k.strip()] or None
    seed = args.seed if args.seed is not None else s.seed
    try:
        docs = list_documents(args.docs, owner=args.owner, visibility=args.visibility, private=args.private,
                              exclude=args.exclude, skip_under=args.out)
        gen = generate(s, docs, n=args.n, kinds=kinds, seed=seed, dup_cosine=args.dup_cosine,
                       reach_check=not args.no_reach_check, progress=not args.quiet)
        out = write_evalset(gen, args.out, name=args.name, link=args.link, force=args.force)
    except EvalsetError as exc:
        print(f"adiyan: {exc}", file=sys.stderr)
        return 2
    r = gen.report
    print(f"wrote {out}: {r['n_questions']} question rows over {r['documents']} documents "
          f"({len(r['skipped_documents'])} skipped), seed {seed}")
    for kind, k in r["per_kind"].items():
        rej = ", ".join(f"{a} {b}" for a, b in k["rejected"].items()) or "none"
        print(f"  {kind:13} made {k['made']:4}  kept {k['kept']:4}  rejected: {rej}; unreachable gold flagged "
              f"{k['unreachable_gold_flagged']}")
    if r.get("llm"):
        calls = r["llm"]["calls"].values()
        print(f"  LLM {r['llm']['identity']['llm']} ({r['llm']['structured']}): {sum(c['calls'] for c in calls)} structured "
              f"calls, {sum(c['cached'] for c in calls)} cached, {sum(c['parse_failures'] for c in calls)} parse failures, "
              f"{sum(c['error'] for c in calls)} transport errors")
    print(f"  report: {Path(out) / 'report.md'}\n  evaluate: invoke eval --set eval.evalset={out}")
    return 0


def cmd_validate(args) -> int:

    s = _settings(args)
    corpora = [c.strip() for item in args.corpus or [] for c in item.split(",") if c.strip()] or list(CORPORA)
    bad = [c for c in corpora if c not in CORPORA]
    if bad:
        print(f"adiyan: --corpus {bad}: choose from {', '.join(CORPORA)}", file=sys.stderr)
        return 2
    if args.panel not in PANELS:
        print(f"adiyan: --panel {args.panel!r}: choose from {', '.join(PANELS)}", file=sys.stderr)
        return 2
    kinds = [k.strip() for item in args.kinds or [] for k in item.split(",") if k.strip()] or None
    out = Path(args.output or Path(s.paths.reports_dir) / "testset_validate")
    try:
        result = run_validation(s, corpora, out, n=args.n, seed=args.seed if args.seed is not None else s.seed,
                                n_boot=args.bootstrap, panel=args.panel, kinds=kinds, progress=not args.quiet)
    except EvalsetError as exc:
        print(f"adiyan: {exc}", file=sys.stderr)
        return 2
    print("\n".join(summary_lines(result)))
    print(f"  written: {out / 'validate.json'}, {out / 'validate.md'}")
    if args.json_out:
        Path(args.json_out).write_text((out / "validate.json").read_text(encoding="utf-8"), encoding="utf-8")
    return 0


def add_testset_parser(sub) -> None:
    pt = sub.add_parser("testset", help="generate an evalset from documents; validate generated sets against human ones")
    tsub = pt.add_subparsers(dest="tscmd", required=True)
    pg = tsub.add_parser("generate", help="generate an evalset folder (offline, seeded) from documents")
    pg.add_argument("docs", help="a folder of documents, one file, or an evalset folder (its manifest's owners)")
    pg.add_argument("--out", required=True, help="the evalset folder to write, e.g. evalsets/mine")
    pg.add_argument("--n", type=int, default=100, help="questions to generate (split over the kinds)")
    pg.add_argument("--kinds", action="append", help="comma-separated kinds (default: all that apply): "
                    "lookup, paraphrase, multi_hop, in_document, unanswerable, private; with a generative LLM "
                    "(llm.url, llm.name ollama/openai-compatible/smollm2) also llm_rewrite, ragas_single_hop, "
                    "ragas_multi_hop")
    pg.add_argument("--seed", type=int, default=None, help="generation seed (default: the config's seed)")
    pg.add_argument("--owner", default="adiyan-office", help="owner of the folder's documents")
    pg.add_argument("--visibility", choices=["private", "global"], default="global",
                    help="visibility of the folder's documents (default global)")
    pg.add_argument("--private", action="append", metavar="GLOB=OWNER",
                    help="documents matching GLOB are private to OWNER (repeatable): enables private probes")
    pg.add_argument("--exclude", action="append", metavar="GLOB", help="leave out files matching GLOB (repeatable)")
    pg.add_argument("--name", help="the evalset's name (default: the folder's name)")
    pg.add_argument("--link", action="store_true", help="symlink the documents into docs/ instead of copying them")
    pg.add_argument("--force", action="store_true", help="replace an existing folder that is not a generated set")
    pg.add_argument("--dup-cosine", type=float, default=0.95, help="near-duplicate threshold (query embeddings)")
    pg.add_argument("--no-reach-check", action="store_true", help="do not flag questions whose gold is unreachable")
    pg.add_argument("--quiet", action="store_true")
    pg.set_defaults(fn=cmd_generate)
    pv = tsub.add_parser("validate", help="do generated sets rank retrieval configurations as human questions do?")
    pv.add_argument("--corpus", action="append", help="xquad, clapnq, adiyan_full, scifact (default: all)")
    pv.add_argument("--n", type=int, default=300, help="generated questions per corpus")
    pv.add_argument("--seed", type=int, default=None)
    pv.add_argument("--bootstrap", type=int, default=1000, help="bootstrap resamples over questions")
    pv.add_argument("--panel", default="standard", help="configuration panel: " + " | ".join(PANELS)
                    + " (docs/testset.md)")
    pv.add_argument("--kinds", action="append", help="generated kinds, comma-separated (default lookup,paraphrase,"
                    "multi_hop; the LLM kinds need a generative LLM, e.g. --set llm.name=smollm2)")
    pv.add_argument("--json-out", help="also copy validate.json here (benchmarks/verify.py's {out})")
    pv.add_argument("--output", help="folder for validate.json / validate.md (default reports/testset_validate)")
    pv.add_argument("--quiet", action="store_true")
    pv.set_defaults(fn=cmd_validate)
