"""The memory-safety section of a run's report.html (adiyan/eval/memory_safety.py): isolation leaks per
read path, each injected correction's ranks, and what of the deleted memories any path or copy still
holds. Tables only: every figure is a count that must be 0 or a rate with its n beside it.
"""

from __future__ import annotations

import json
from pathlib import Path

from jinja2 import Environment

from ..report import fmt

LABELS = {
    "search": "Memory.search as configured",
    "search_without_time": "Memory.search, recency off",
    "lexical_index": "the per-user BM25 index (hybrid search)",
    "list": "Memory.all (list every memory)",
    "three_part_context": "the three-part context (adiyan.context.assemble)",
    "agent_memory_tool": "the agent's search_memory tool",
    "ask_conversation": "adiyan ask --conversation (facts and the conversation's history)",
    "locomo_candidate_replay": "the LoCoMo candidate replay (CandidateMemory)",
    "raw_store": "the raw store: every point of the collection, past the memory's filters",
    "mem0_history": "mem0's history table (ADD / DELETE rows keep the text)",
    "mem0_messages": "mem0's recent messages per user (consolidation's context)",
    "embedding_cache": "the embedding cache (rows under the deleted texts' keys)",
    "lexical_index_rebuilt": "a BM25 index rebuilt from the store afterwards",
    "candidate_cache": "a LoCoMo candidate cache warmed before the deletion",
}

_SECTION = Environment(autoescape=True).from_string("""<h2 id="memory-safety">Memory safety under many users</h2>
<p>{{ iso.users }} users in one memory collection (each LoCoMo conversation of <code>{{ ds.source }}</code> one user, each
session one of its conversations). Isolation: every user asks every read path {{ fmt(iso.cross_user_questions) }} questions
in all of conversations it does not own (a seeded sample); a memory or transcript turn another user owns is a leak.
Updates: {{ upd.corrections }} corrections injected in the shape of incident 3. Deletion: {{ de.deleted.total }} memories deleted
({{ de.deleted.memories }} single memories of {{ de.deleted.memories_of|join(", ") }}; conversation {{ de.deleted.conversation_id }}, {{ de.deleted.conversation }} memories;
user {{ de.deleted.user_id }}, {{ de.deleted.user }} memories), then probed by their owners with their own words and their questions.</p>
<h3>Isolation: leaks per read path</h3>
<table><tr><th>read path</th><th>cross-user questions</th><th>memories returned</th><th>leaks</th></tr>
{% for p, n in iso.leaks.items() %}<tr><td>{{ labels.get(p, p) }}</td><td class="num">{{ iso.list_calls if p == "list" else iso.asked_per_path }}{% if p == "list" %} (once per user){% endif %}</td>
<td class="num">{{ iso.returned[p] }}</td><td class="num"><b>{{ n }}</b></td></tr>{% endfor %}
</table>
{% if iso_examples %}<p>First leaks:</p><ul>{% for e in iso_examples %}<li>{{ e.path }}: {{ e.asker }} asked "{{ e.question }}" and got {{ e.owner }}'s "{{ e.text }}"</li>{% endfor %}</ul>{% endif %}
<h3>Updates: does the correction outrank what it corrects?</h3>
<p>Stale above its correction: <b>{{ upd.stale_above_correction }} of {{ upd.corrections }}</b>; correction in the top
{{ upd.k }} (memory.top_k): <b>{{ upd.correction_found_at_k }} of {{ upd.corrections }}</b>; in the top 10: {{ upd.correction_found_at_10 }}.
Asked at the conversation's end with the configured memory search, among that user's LoCoMo memories.</p>
<table><tr><th>correction</th><th>user</th><th>question</th><th>stale rank</th><th>correction rank</th></tr>
{% for r in rows %}<tr><td>{{ r.id }}</td><td>{{ r.user }}</td><td>{{ r.question }}</td><td class="num">{{ r.stale_rank or "-" }}</td>
<td class="num">{{ r.correction_rank or "-" }}</td></tr>{% endfor %}</table>
<h3>Deletion: what still holds a deleted memory</h3>
<p>{{ de.probes }} probes (a deleted memory's own text, and the first question it is evidence of), each on every read path as
its owner. Before the deletion the configured search found the deleted memory in the top 10 for {{ de.found_before }} of them,
so finding none afterwards is a test. Another user's attempts to delete them: {{ de.cross_user_delete_refused }} of
{{ de.cross_user_delete_attempts }} refused.</p>
<table><tr><th>read path or copy</th><th>deleted memories still returned or held</th></tr>
{% for p, n in de.recalled_after.items() %}<tr><td>{{ labels.get(p, p) }}</td><td class="num"><b>{{ n }}</b></td></tr>{% endfor %}
{% for p, n in de.stores.items() %}<tr><td>{{ labels.get(p, p) }}</td><td class="num"><b>{{ n }}</b></td></tr>{% endfor %}
</table>
<p>Other users: {{ de.users_changed_beyond_deletion }} of {{ de.users_checked }} lost or changed anything beyond what was
deleted; the bystanders ({{ de.bystanders|join(", ") }}) ran {{ de.bystander_searches }} of their own searches before and after:
{{ de.bystander_searches_moved }} moved.</p>
{% if de_examples %}<p>First deleted memories still found:</p><ul>{% for e in de_examples %}<li>{{ e.path }} ({{ e.deleted_as }} deletion): "{{ e.text }}"</li>{% endfor %}</ul>{% endif %}
""")


def add_section(run_dir: Path, m: dict) -> None:
    """Insert the memory-safety section into run_dir/report.html (before "Timings and cache")."""
    path = Path(run_dir) / "report.html"
    d = m["memory_safety"]
    rows = [r for r in d.get("updates_rows", [])]
    section = _SECTION.render(ds=m["dataset"], iso=d["isolation"], iso_examples=d["isolation_examples"],
                              upd=d["updates"], rows=rows, de=d["deletion"], de_examples=d["deletion_examples"],
                              labels=LABELS, fmt=fmt)
    html = path.read_text(encoding="utf-8")
    marker = "<h2>Timings and cache</h2>"
    html = html.replace(marker, section + marker, 1) if marker in html else html.replace("</body>", section + "</body>")
    path.write_text(html, encoding="utf-8")


def summary_lines(run_dir: Path) -> list[str]:
    """What ``invoke eval`` prints for a memory-safety run."""
    m = json.loads((Path(run_dir) / "metrics.json").read_text(encoding="utf-8"))
    g, d = m["metrics"]["memory_safety"], m["memory_safety"]
    iso, upd, de = d["isolation"], d["updates"], d["deletion"]
    worst = ", ".join(f"{p} {n}" for p, n in iso["leaks"].items() if n) or "none on any path"
    lines = [f"run {m['run_id']}  config {m['config_hash'][:12]}  dataset {m['dataset']['name']} (memory safety: "
             f"{iso['users']} users in one memory, from {Path(m['dataset']['source']).name})",
             f"  isolation: {iso['cross_user_questions']:,} cross-user questions on {len(iso['leaks'])} read paths: "
             f"{iso['leaks_total']} leaks ({worst})",
             f"  updates: stale above its correction {upd['stale_above_correction']} of {upd['corrections']}; "
             f"correction in the top {upd['k']} {upd['correction_found_at_k']} of {upd['corrections']}",
             f"  deletion: {de['deleted']['total']} memories deleted (found before by {de['found_before']} of "
             f"{de['probes']} probes): still returned {de['recalled_after_total']}, copies left {de['stores_total']} "
             f"({', '.join(f'{k} {v}' for k, v in de['stores'].items())}); another user's deletes refused "
             f"{de['cross_user_delete_refused']} of {de['cross_user_delete_attempts']}; other users changed "
             f"{g['other_users_changed']}"]
    for r in m.get("regression", []):
        if r["status"] == "fail":
            lines.append(f"  REGRESSION {r['id']}: {r['reason']}")
    t = m["timings"]
    lines.append(f"  time total {t['total_s']:.1f}s (store {t.get('build_s', 0):.1f}s, isolation "
                 f"{t.get('isolation_s', 0):.1f}s, updates {t.get('updates_s', 0):.1f}s, deletion "
                 f"{t.get('deletion_s', 0):.1f}s)")
    lines.append(f"  report: {Path(run_dir) / 'report.html'}")
    return lines
