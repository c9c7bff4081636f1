"""Evaluation data as Hugging Face ``datasets`` (Arrow): cached by content hash, memory-mapped.

Why: a ``datasets.Dataset`` is what RAGAS, notebooks and most evaluation tools take; Arrow on
disk is memory-mapped, so a large set (a BEIR corpus) costs no RAM to reopen, and keying the
cache by the content hash of the source files means an edited file can never be served stale.

- :func:`cached_dataset`: build rows once per (kind, content hash) into
  ``<cache>/<name>-<hash[:16]>/`` with ``save_to_disk``; every call returns ``load_from_disk``
  of that folder (memory-mapped); its ``_fingerprint`` is derived from the content hash only
  (saved as the hash, re-derived by datasets' format step on load) and ``info.description``
  names the full hash;
- :func:`per_question_table` / :func:`write_per_question`: the per-question results of a run as
  flat columns in ``per_question.parquet`` (pandas and ``datasets`` both read it).

The cache folder is ``$ADIYAN_DATASET_CACHE`` or ``~/.cache/adiyan/datasets`` unless a caller
passes one; it may be deleted at any time.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterable, Mapping

if TYPE_CHECKING:  # annotations only: datasets (~1-7 s) and pyarrow load on first use
    import datasets
    import pyarrow as pa


def dataset_cache_root(cache_dir: str | os.PathLike | None = None) -> Path:
    return Path(cache_dir or os.environ.get("ADIYAN_DATASET_CACHE") or Path.home() / ".cache" / "adiyan" / "datasets")


TYPES = ("string", "int64", "float64", "bool", "list<string>")


def _arrow_type(pa, name: str):
    if name not in TYPES:
        raise ValueError(f"column type {name!r}: one of {', '.join(TYPES)}")
    return pa.list_(pa.string()) if name == "list<string>" else getattr(pa, {"bool": "bool_"}.get(name, name))()


def cached_dataset(name: str, content_hash: str, build_rows: Callable[[], list[dict]], *,
                   columns: Mapping[str, str] | None = None,
                   cache_dir: str | os.PathLike | None = None) -> "datasets.Dataset":
    """``build_rows()`` as a Dataset saved under ``<cache>/<name>-<hash[:16]>``, built only when that
    folder is missing or incomplete (written to a temporary folder and renamed, so a crash leaves no half copy).
    ``columns`` ({name: type}, types in :data:`TYPES`) fixes the schema, so a column that is
    empty in every row still has its type."""
    import datasets  # heavy: datasets (~1-7 s to import), only when a Dataset is asked for
    import pyarrow as pa  # heavy: with datasets

    datasets.disable_progress_bars()  # small sets: a bar per save / load is noise in a run's log
    out = dataset_cache_root(cache_dir) / f"{name}-{content_hash[:16]}"
    if not (out / "state.json").is_file():
        out.parent.mkdir(parents=True, exist_ok=True)
        rows = build_rows()
        schema = pa.schema([(c, _arrow_type(pa, t)) for c, t in columns.items()]) if columns else None
        table = pa.Table.from_pylist(rows, schema=schema)
        info = datasets.DatasetInfo(description=f"{name}: content sha256 {content_hash}")
        ds = datasets.Dataset(table, info=info, fingerprint=content_hash[:16])
        tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}-", dir=out.parent))
        try:
            ds.save_to_disk(str(tmp))
            if (out / "state.json").is_file():  # another process finished first: keep theirs
                shutil.rmtree(tmp, ignore_errors=True)
            else:
                shutil.rmtree(out, ignore_errors=True)
                tmp.replace(out)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
    return datasets.load_from_disk(str(out))


def in_memory_dataset(rows: list[dict], columns: Mapping[str, str]) -> "datasets.Dataset":
    """Rows as an uncached Dataset with a fixed schema (``columns`` as in :func:`cached_dataset`)."""
    import datasets  # heavy: datasets (~1-7 s to import), only when a Dataset is asked for
    import pyarrow as pa  # heavy: with datasets

    schema = pa.schema([(c, _arrow_type(pa, t)) for c, t in columns.items()])
    return datasets.Dataset(pa.Table.from_pylist(rows, schema=schema))


# ---------------------------------------------------------------- per-question results

SCALARS = ("id", "question", "kind", "requester", "gold_answer", "hit", "reciprocal_rank", "probe_private",
           "probe_leaked", "transform_failed", "context_tokens", "retrieve_s", "answer", "keyword_hit", "abstained")
LISTS = ("gold_sources", "answer_keywords", "ranked_sources")


def per_question_table(rows: Iterable[Mapping]) -> "pa.Table":
    """Flat, typed columns of the per-question rows of a run: the scalar fields, the list fields,
    ``retrieved_sources`` / ``retrieved_scores`` (the top k), ``leaked_private`` (count) and one
    ``ragas.<metric>`` column per non-LLM RAGAS value, one ``claims.<metric>`` per claim-checker value.
    Absent values are nulls."""
    import pyarrow as pa  # heavy: pyarrow (~1 s), only when a run writes its parquet
    rows = list(rows)
    ragas_names = sorted({n for r in rows for n in (r.get("ragas") or {})})
    claim_names = sorted({n for r in rows for n in (r.get("claims") or {})})
    out = []
    for r in rows:
        rec = {k: r.get(k) for k in SCALARS}
        rec.update({k: list(r.get(k) or []) for k in LISTS})
        rec["retrieved_sources"] = [c.get("source") for c in r.get("retrieved") or []]
        rec["retrieved_scores"] = [c.get("score") for c in r.get("retrieved") or []]
        rec["leaked_private"] = len(r.get("leaked_private") or [])
        rec.update({f"ragas.{n}": (r.get("ragas") or {}).get(n) for n in ragas_names})
        rec.update({f"claims.{n}": (r.get("claims") or {}).get(n) for n in claim_names})
        out.append(rec)
    schema = pa.schema(
        [("id", pa.string()), ("question", pa.string()), ("kind", pa.string()), ("requester", pa.string()),
         ("gold_answer", pa.string()), ("hit", pa.bool_()), ("reciprocal_rank", pa.float64()),
         ("probe_private", pa.string()), ("probe_leaked", pa.bool_()), ("transform_failed", pa.bool_()),
         ("context_tokens", pa.int64()), ("retrieve_s", pa.float64()), ("answer", pa.string()),
         ("keyword_hit", pa.bool_()), ("abstained", pa.bool_())]
        + [(k, pa.list_(pa.string())) for k in LISTS]
        + [("retrieved_sources", pa.list_(pa.string())), ("retrieved_scores", pa.list_(pa.float64())),
           ("leaked_private", pa.int64())]
        + [(f"ragas.{n}", pa.float64()) for n in ragas_names]
        + [(f"claims.{n}", pa.float64()) for n in claim_names])
    return pa.Table.from_pylist(out, schema=schema)


def write_per_question(rows: Iterable[Mapping], path: str | os.PathLike) -> Path:
    """``per_question.parquet`` of a run (see :func:`per_question_table`); written atomically."""
    import pyarrow.parquet as pq  # heavy: pyarrow (~1 s), only when a run writes its parquet

    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    pq.write_table(per_question_table(rows), tmp)
    tmp.replace(path)
    return path


def json_column(value) -> str:
    """A free-form dict as a JSON string column (Arrow structs need one shape for every row)."""
    return json.dumps(value, sort_keys=True, ensure_ascii=False)
