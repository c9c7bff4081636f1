"""The generation report as Markdown (report.md beside report.json)."""

from __future__ import annotations


def _cell(text) -> str:
    return str(text if text is not None else "").replace("|", "\\|").replace("\n", " ")


def markdown_report(report: dict, name: str) -> str:
    lines = [f"# Generated evalset `{name}`", "",
             f"{report['generator']}, seed {report['seed']}: {report['n_questions']} question rows "
             f"(requested {report['n_requested']}) over {report['documents']} documents / {report['chunks']} chunks "
             f"(chunking {report['chunking'].get('strategy')} {report['chunking'].get('size')}/"
             f"{report['chunking'].get('overlap')}).", "", "## Filters", ""]
    lines += [f"- `{k}`: {v}" for k, v in report["filters"].items()]
    lines += ["", "## Per kind", "", "| kind | quota | made | kept | rejected | unreachable gold (flagged) | "
              "word overlap with gold chunk |", "|---|---|---|---|---|---|---|"]
    for kind, r in report["per_kind"].items():
        rej = ", ".join(f"{k} {v}" for k, v in r["rejected"].items()) or "0"
        lines.append(f"| {kind} | {r['quota']} | {r['made']} | {r['kept']} | {rej} | {r['unreachable_gold_flagged']} | "
                     f"{r['mean_word_overlap'] if r['mean_word_overlap'] is not None else 'n/a'} |")
    llm = report.get("llm")
    if llm:
        ident = llm["identity"]
        lines += ["", "## LLM", "", f"`{ident['llm']}` (llm.name {ident['name']}, url {ident['url'] or '-'}), structured "
                  f"calls by `{llm['structured']}`. Every call's reply is parsed and validated; failures are counted, "
                  "never repaired.", "", "| purpose | calls | cached | ok | invalid JSON | schema mismatch | "
                  "model refused | transport error | modes |", "|---|---|---|---|---|---|---|---|---|"]
        for purpose, c in llm["calls"].items():
            lines.append(f"| {purpose} | {c['calls']} | {c['cached']} | {c['ok']} | {c['invalid_json']} | "
                         f"{c['schema_mismatch']} | {c['model_invalid']} | {c['error']} | "
                         f"{', '.join(f'{k} {v}' for k, v in c['modes'].items())} |")
        rg = llm.get("ragas")
        if rg:
            lines += ["", f"ragas: {rg['graph_nodes']} of {rg['chunks_available']} chunks as graph nodes, "
                      f"{rg['nodes_after_transforms']} after its node filter, {rg['relationships']} relationships; "
                      f"personas {', '.join(rg['personas'])} ({rg['persona_source']}).", "",
                      "| ragas step | tasks | failed | nodes removed |", "|---|---|---|---|"]
            lines += [f"| {k} | {v['tasks']} | {v['failed']} | {v['nodes_removed']} |" for k, v in rg["transforms"].items()]
            lines += ["", "| synthesizer | kind | units (tried) | wanted | scenarios | scenario failures | units without a "
                      "scenario | sample failures | samples |", "|---|---|---|---|---|---|---|---|---|"]
            lines += [f"| {k} | {v['kind']} | {v['units']} ({v.get('units_tried', v['units'])}) | {v['wanted']} | "
                      f"{v['scenarios']} | {v['scenario_failures']} | "
                      f"{v['units_without_scenario']} | {v['sample_failures']} | {v['samples']} |"
                      for k, v in rg["synthesizers"].items()]
    if report["skipped_documents"]:
        lines += ["", "## Documents not used", ""]
        lines += [f"- `{s['file']}`: {s['reason']}" for s in report["skipped_documents"]]
    for kind, r in report["per_kind"].items():
        lines += ["", f"## {kind}: examples", "", "| question | answer | gold | requester | unreachable |",
                  "|---|---|---|---|---|"]
        lines += [f"| {_cell(e['question'])} | {_cell(e['answer'])} | {_cell(', '.join(e['gold']))} | "
                  f"{_cell(e['requester'])} | {_cell(e['unreachable_gold'])} |" for e in r["examples"]]
        if r["rejections"]:
            lines += ["", f"### {kind}: every rejection ({len(r['rejections'])})", "",
                      "| reason | question | answer |", "|---|---|---|"]
            lines += [f"| {x['reason']} | {_cell(x['question'])} | {_cell(x['answer'])} |" for x in r["rejections"]]
    return "\n".join(lines) + "\n"
