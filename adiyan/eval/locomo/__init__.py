"""LoCoMo (snap-research, ACL 2024) for the memory engine: ``invoke eval --set eval.evalset=...locomo8.json``.

- :mod:`.data`: the loader (conversations, dated sessions, questions with evidence dialog ids);
- :mod:`.scoring`: LoCoMo's evidence recall, nDCG over evidence turns, answer F1 and abstention;
- :mod:`.paths`: the retrieval paths, reference (BM25, exact dense over the raw turns) and
  product (mem0 memory with and without recency, the three-part context, the knowledge base);
- :mod:`.run`: the run (metrics.json, questions.jsonl, report.html, the runs index) and the sweep point;
- :mod:`.report`: the LoCoMo section of the run report.

See docs/locomo.md.
"""

from .data import CATEGORIES, LocomoError, LocomoSet, is_locomo_file, load_locomo  # noqa: F401
