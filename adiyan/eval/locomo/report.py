"""The LoCoMo section of a run's report.html: recall per category for every path side by side,
recall against k, answers when there are any, and one row per question with its evidence turns
(and their text) and what each path retrieved. Inline SVG (matplotlib, as adiyan.report), no
scripts or network assets.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
from jinja2 import Environment
from markupsafe import Markup

from ...report import _RC, _figure, _svg, fmt
from . import paths as P
from .data import CATEGORIES, load_locomo

CATS = ["all"] + [CATEGORIES[c] for c in sorted(CATEGORIES)]
LABELS = {"reference_bm25": "reference: BM25 over turns", "reference_dense": "reference: exact dense over turns",
          "memory_similarity": "product: memory (mem0) without time",
          "memory_recency": "product: memory (mem0) as configured", "context": "product: three-part context",
          "kb": "product: knowledge base, a turn per chunk"}
SHOWN = ("reference_bm25", "reference_dense", "memory_recency", "context", "kb")  # per-question columns


def plot_recall_vs_k(tables: dict) -> Markup:
    """Overall evidence recall at k = 5, 10, 25, one line per path."""
    with plt.rc_context(_RC):
        fig, ax = _figure(6.5, 3.4)
        for p in P.PATHS:
            if p not in tables:
                continue
            ys = [tables[p][f"recall@{k}"]["all"] for k in P.KS]
            ax.plot(list(P.KS), ys, marker="o", linestyle="--" if p.startswith("reference") else "-",
                    label=LABELS.get(p, p))
        ax.set_xticks(list(P.KS), [str(k) for k in P.KS])
        ax.set_xlabel("k (turns retrieved; context: memory.top_k)")
        ax.set_ylabel("evidence recall")
        ax.set_ylim(0, 1.0)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, loc="upper left")
        return _svg(fig)


_SECTION = Environment(autoescape=True).from_string("""<h2 id="locomo">LoCoMo: evidence recall per category</h2>
<p>{{ ds.n_conversations }} conversations, {{ ds.n_questions }} questions, {{ ds.n_turns }} turns. Evidence recall as LoCoMo
defines it (share of a question's evidence dialog ids in the retrieved context; a question without evidence counts 1),
nDCG@10 over the evidence turns. Reference paths search the raw turns of the question's conversation; product paths go
through the memory engine (mem0, turns stored verbatim, asked at the conversation's end) and the knowledge base.
Questions per category: {% for c in cats %}{{ c }} {{ t.questions[c] }}{% if not loop.last %}, {% endif %}{% endfor %}.
{% if ds.evidence_unmatched %}{{ ds.evidence_unmatched|length }} evidence id(s) match no turn (as spelled in the file) and are never found, as in LoCoMo.{% endif %}</p>
<table><tr><th>path</th><th>metric</th>{% for c in cats %}<th>{{ c }}</th>{% endfor %}</tr>
{% for p in paths if p in t %}{% for key, vals in t[p].items() %}<tr><td>{{ labels.get(p, p) }}</td><td>{{ key }}</td>
{% for c in cats %}<td class="num">{{ fmt(vals[c]) }}</td>{% endfor %}</tr>
{% endfor %}{% endfor %}{% if t.context_configured %}<tr><td>three-part context as configured (memory.top_k={{ cfg.memory.top_k }}, history window {{ cfg.conversation.history_window }})</td><td>recall</td>
{% for c in cats %}<td class="num">{{ fmt(t.context_configured.recall[c]) }}</td>{% endfor %}</tr>{% endif %}
</table>
<h3>Evidence recall against k</h3>
{{ plot }}
{% if t.answer_f1 %}<h3>Answers: LoCoMo F1 per category{% if wiring %} <span class="badge">wiring: embedded model</span>{% endif %}</h3>
<p>{{ answered }} questions answered (eval.locomo_answer_per_category per category, seeded) from the three-part context and the
knowledge base's top turns. F1 with LoCoMo's normalisation; multi-hop split on commas; adversarial scored 1 when the answer
says "no information available" or "not mentioned".{% if wiring %} The embedded smollm2 answered: these figures prove the path runs, they measure nothing.{% endif %}</p>
<table><tr>{% for c in cats %}<th>{{ c }}</th>{% endfor %}</tr><tr>{% for c in cats %}<td class="num">{{ fmt(t.answer_f1[c]) }}</td>{% endfor %}</tr></table>
{% endif %}
<h2 id="locomo-questions">LoCoMo questions ({{ rows|length }})</h2>
<p>Per question: the evidence turns (hover or open for their text), then each path's top 10 dialog ids
(<span class="hit">evidence</span>) and its recall@10{% if rows and rows[0].context_ids is defined %}; the context column is the configured three-part context{% endif %}.</p>
<table><tr><th>id</th><th>category</th><th>question</th><th>answer</th><th>evidence</th>{% for p in shown %}<th>{{ p }}</th>{% endfor %}{% if any_answer %}<th>generated</th><th>F1</th>{% endif %}</tr>
{% for r in rows %}<tr id="q-{{ r.id }}"><td>{{ r.id }}</td><td>{{ r.category_name }}</td><td>{{ r.question }}</td><td>{{ r.gold_answer or ("(adversarial: " ~ (r.adversarial_answer or "") ~ ")") }}</td>
<td>{% for e in r.evidence %}<details><summary>{{ e }}</summary>{{ texts.get(r.conversation ~ "|" ~ e, "(no such turn)") }}</details>{% endfor %}</td>
{% for p in shown %}<td>{% if p == "context" and r.context_ids is defined %}{% set ids = r.context_ids %}{% set rec = r.context_recall %}{% else %}{% set ids = (r.retrieved_ids.get(p) or [])[:10] %}{% set rec = r.recall.get(p, {}).get("10") %}{% endif %}
<b>{{ fmt(rec) }}</b> {% for i in ids %}<span class="{{ 'hit' if i in r.evidence else '' }}">{{ i }}</span> {% endfor %}</td>{% endfor %}
{% if any_answer %}<td>{{ r.answer or "" }}</td><td class="num">{{ fmt(r.locomo_f1) }}</td>{% endif %}</tr>
{% endfor %}</table>
""")


def add_section(run_dir: Path, m: dict, rows: list[dict]) -> None:
    """Insert the LoCoMo section into run_dir/report.html (before "Timings and cache")."""
    path = Path(run_dir) / "report.html"
    ls = load_locomo(m["dataset"]["path"])
    texts = {f"{c.id}|{t.dia_id}": t.text for c in ls.conversations for t in c.turns}
    t = m["locomo"]
    ans = m["metrics"].get("locomo_answer") or {}
    section = _SECTION.render(ds=m["dataset"], t=t, cats=CATS, paths=P.PATHS, labels=LABELS, fmt=fmt,
                              plot=plot_recall_vs_k(t), rows=rows, shown=[p for p in SHOWN if p in t],
                              texts=texts, cfg=m["config"], wiring=bool(ans.get("wiring")),
                              answered=ans.get("answered", 0), any_answer=any("answer" in r for r in rows))
    html = path.read_text(encoding="utf-8")
    marker = "<h2>Timings and cache</h2>"
    html = html.replace(marker, section + marker, 1) if marker in html else html.replace("</body>", section + "</body>")
    path.write_text(html, encoding="utf-8")
