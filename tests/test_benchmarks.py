"""The benchmarks' own rules, without running them: the latency benchmark never measures something
other than what it names (missing data raises), its filters let 50% and 5% through, its real-text
spans partition the text, and run_all marks a suite ok only when its target and checks pass."""

from __future__ import annotations

import sys

import pytest

from tests.conftest import ROOT

sys.path.insert(0, str(ROOT / "benchmarks"))
import ingest  # noqa: E402
import latency  # noqa: E402
import run_all  # noqa: E402
import sweep_cost  # noqa: E402


def test_latency_fails_instead_of_falling_back_to_random_vectors(tmp_path, monkeypatch):
    monkeypatch.setattr(latency, "SHARED", tmp_path)  # no corpora here
    with pytest.raises(latency.MissingData, match="SciFact is not loadable"):
        latency.scifact_vectors(10)
    with pytest.raises(latency.MissingData, match="shared corpora"):
        latency.real_text_units()
    (tmp_path / "scifact").mkdir()
    (tmp_path / "scifact" / "corpus.jsonl").write_text('{"_id": "1", "title": "A b c d.", "text": "E f g h."}\n')
    for name in ("clapnq_dev", "xquad_en"):
        (tmp_path / name / "beir").mkdir(parents=True)
        (tmp_path / name / "beir" / "corpus.jsonl").write_text('{"_id": "p", "text": "One two three four."}\n')
        (tmp_path / name / "qa.jsonl").write_text('{"question": "Why?"}\n')
    (tmp_path / "scifact" / "queries.jsonl").write_text('{"_id": "q", "text": "What?"}\n')
    with pytest.raises(latency.MissingData, match="only 3 distinct real text spans"):
        latency.real_text_units()  # too few spans is an error too, never a smaller set


def test_latency_filters_let_half_and_a_twentieth_through():
    rows, masks = latency.payloads(100_000, 0)
    assert masks["none"].all()
    assert masks["access_50"].mean() == pytest.approx(0.50, abs=0.005)
    assert masks["own_private_5"].mean() == pytest.approx(0.05, abs=0.002)
    # the masks are what the engine filters select, read from the payload itself
    for i in range(0, 100_000, 997):
        p = rows[i]
        assert masks["access_50"][i] == (p["visibility"] == "global" or p["owner_identity"] == "owner-1")
        assert masks["own_private_5"][i] == (p["visibility"] == "private" and p["owner_identity"] == "owner-0")


def test_real_text_spans_partition_the_text():
    text = ("Alterations of the architecture of cerebral white matter can affect development, and result in "
            "disabilities. A line scan was applied: to measure the coefficient, to calculate anisotropy, and to "
            "delineate fibres. Short one.")
    got = latency.spans(text)
    assert got == ["Alterations of the architecture of cerebral white matter can affect development,",
                   "and result in disabilities.", "A line scan was applied:",
                   "to measure the coefficient,", "to calculate anisotropy, and to delineate fibres. Short one."]
    assert " ".join(got).split() == text.split()  # every word once, in order


def test_run_all_marks_ok_only_when_target_and_checks_pass():
    grid = {"ratio_warm_to_cold": 0.12, "meets_target": True}
    good = {"checks": {"ef.recall_rises_with_ef": True}, "meets_target": True, "target_warm_to_cold": 0.5,
            "grids": {"ef": grid}}
    assert run_all.verdict("sweep_cost", good) == []
    slow = {**good, "meets_target": False, "grids": {"ef": {"ratio_warm_to_cold": 0.8, "meets_target": False}}}
    assert run_all.verdict("sweep_cost", slow) == ["target missed: ef: warm/cold 0.8 above 0.5"]
    idle = {**good, "checks": {"ef.recall_rises_with_ef": False}}
    assert run_all.verdict("sweep_cost", idle) == ["check failed: ef.recall_rises_with_ef"]
    assert run_all.verdict("ingest", {"meets_target": False, "ratio_ingest_to_embed": 1.6, "target_ratio": 1.3}) == \
        ["target missed: ratio 1.6 above 1.3"]
    assert run_all.verdict("latency", {"checks": {}, "meets_target": None}) == \
        ["target not measured: the real_text set was not run"]
    assert run_all.verdict("latency", {"checks": {}, "meets_target": None}, quick=True) == []
    scale = {"checks": {"no_hit_outside_the_access_filter": True},
             "target_results": {"size": 100_000, "dense_p95_ms": {"met": True},
                                "recall@10_int8_access_5": {"value": 0.91, "target": 0.95, "met": False}}}
    assert run_all.verdict("scale", scale) == [
        "target missed: recall@10_int8_access_5 {'value': 0.91, 'target': 0.95, 'met': False}"]


def test_sweep_cost_checks_that_points_do_real_work():
    ef = [{"metrics": {"indexed_share": 1.0, "recall@10": r}} for r in (0.93, 0.99, 1.0)]
    assert sweep_cost.checks_for("ef", ef) == {"hnsw_built_for_every_point": True, "recall_rises_with_ef": True}
    flat = [{"metrics": {"indexed_share": 0.0, "recall@10": 1.0}} for _ in range(3)]  # brute force: ef does nothing
    assert sweep_cost.checks_for("ef", flat) == {"hnsw_built_for_every_point": False, "recall_rises_with_ef": False}
    cached = [{"metrics": {"n_chunks": n, "index_embedded_texts": e}} for n, e in ((214, 214), (134, 0))]
    assert sweep_cost.checks_for("chunk_size", cached)["every_point_embedded_texts"] is False


def test_scifact_tuning_runs_each_row_on_the_embedder_it_names():
    """A row tuned over another dense model carries that model into the settings it runs with, and
    the p-value baseline is always the product's MiniLM hybrid RRF (not the other model's)."""
    from benchmarks.scifact_tuning import BASELINE, name_of, overrides_of

    cfg = {"fusion": "convex", "alpha": 0.3, "norm": "z", "embedder": "nomic-embed-text"}
    assert name_of(cfg) == "nomic-embed-text:convex_z_a0.3"
    assert overrides_of(cfg) == {"retrieval.mode": "hybrid", "embedder.name": "nomic-embed-text",
                                 "retrieval.fusion": "convex", "retrieval.fusion_weight": 0.3,
                                 "retrieval.fusion_norm": "z"}
    assert name_of(BASELINE) == "rrf_k60" and overrides_of(BASELINE)["embedder.name"] == "minilm"


def test_scifact_signals_grid_covers_the_simplex_once():
    from benchmarks.scifact_signals import grid

    points = list(grid(3, 0.25))
    assert len(points) == 15 == len(set(points))  # C(4 + 2, 2) weightings of three signals in quarters
    assert all(abs(sum(p) - 1) < 1e-9 and min(p) >= 0 for p in points)
    assert (0.5, 0.25, 0.25) in points and (1.0, 0.0, 0.0) in points


def test_scifact_signals_numpy_grid_is_the_pipelines_weighted_fusion():
    """The vectorised grid (benchmarks/scifact_signals.py) scores every weighting as the product's own
    fusion.weighted + ir_metrics would: checked on random lists over 30 queries, several weightings,
    with ties (equal scores) and documents missing from some lists."""
    import numpy as np

    from benchmarks.scifact_signals import library_score, product_overrides, weight_grid

    rng = np.random.default_rng(3)
    signals = ["dense", "minilm", "bm25"]
    data, qrels, ids = {}, {}, {}
    for q in range(30):
        docs = [f"d{i:03d}" for i in rng.choice(200, 40, replace=False)]
        lists = {s: {f"o/{d}.md#0": float(round(rng.normal(), 1)) for d in rng.choice(docs, 25, replace=False)}
                 for s in signals}
        data[f"q{q}"] = {"lists": lists, "source": {f"o/{d}.md#0": f"o/{d}.md" for d in docs}}
        ids.update({f"o/{d}.md": d for d in docs})
        qrels[f"q{q}"] = {d: int(rng.integers(1, 3)) for d in rng.choice(docs, 3, replace=False)}
    grid = weight_grid(data, signals, qrels, ids, 0.25)
    assert len(grid) == 15
    for w in [(0.5, 0.25, 0.25), (1.0, 0.0, 0.0), (0.0, 0.25, 0.75), (0.25, 0.25, 0.5)]:
        lib = library_score(data, dict(zip(signals, w)), qrels, ids)
        assert abs(grid[w] - lib["ndcg@10"]) < 1e-4, (w, grid[w], lib)
    # a weighting as product settings: a signal weighted 0 is not built at all
    o = product_overrides("nomic-embed-text", {"dense": 0.5, "minilm": 0.0, "bm25": 0.3, "title": 0.2})
    assert o["embedder.extra"] == [] and o["store.title_field"] is True
    assert o["retrieval.fusion_weights"] == {"dense": 0.5, "bm25": 0.3, "title": 0.2}


def test_ingest_has_a_parser_bound_ratio_beside_the_markdown_one():
    """Markdown parsing is a no-op: the benchmark also ingests DOCX / PDF (Docling) and PPTX files."""
    from adiyan.ingest.parse import METHODS

    docs = ingest.office_documents(6, 400)
    by_format = {}
    for name, data in docs:
        by_format.setdefault(name.rsplit(".", 1)[-1], []).append(name)
        assert len(data) <= 400 * 1024
    assert sorted(by_format) == ["docx", "pdf", "pptx"] and all(len(v) == 6 for v in by_format.values())
    assert all(v == sorted(v) for v in by_format.values())  # a fixed selection: first by name
    assert METHODS["docx"] == METHODS["pdf"] == "docling" and METHODS["pptx"] == "python-pptx"
    r = {"ratio_ingest_to_embed": 1.1, "meets_target": True, "cache_speedup_reingest": 3.0,
         "documents": {"ratio_ingest_to_embed": 4.2, "ratio_parse_to_embed": 3.1}}
    head = run_all._headline("ingest", r)
    assert head["documents_ratio_ingest_to_embed"] == 4.2 and head["documents_ratio_parse_to_embed"] == 3.1


def test_the_tour_benchmark_times_the_readmes_own_commands(tmp_path):
    """benchmarks/tour.py reads steps 1-5 of README's tour, not a copy: the first command is the main
    job, the comparison's placeholders are there to be filled, step 6 (the user's own documents) is
    not part of the five minutes, and a README without the section is refused by name."""
    import tour

    cmds = tour.tour_commands()
    assert cmds[0] == (1, ".venv/bin/invoke eval")
    assert {s for s, _ in cmds} == {1, 3, 4, 5}  # step 2 (read the report) has no command
    assert any("RUN_A RUN_B" in c for _, c in cmds) and not any("testset generate" in c for _, c in cmds)
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    for _, c in cmds[1:]:
        assert c in readme
    bad = tmp_path / "README.md"
    bad.write_text("# nothing here\n## A five-minute tour\n\nno steps\n")
    with pytest.raises(SystemExit, match="no tour step 1"):
        tour.tour_commands(bad)
