"""benchmarks/scale.py and its corpus (benchmarks/_scale_corpus.py): the windows, the owners, the cut
to an exact chunk count, and the whole benchmark through the server engine's code path at a small
size (qdrant-client's local mode standing in for a server, as in the store contract tests)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import _scale_corpus as corpus  # noqa: E402

SHARED = ROOT.parent / "shared" / "datasets"
TEXT = "Alpha beta gamma delta. Epsilon zeta eta theta, iota kappa lambda mu. Xi omicron pi rho sigma!"


def test_sentence_and_clause_windows_are_runs_of_the_source_characters():
    assert corpus.windows_of(TEXT, 1, 800, "sentence") == [
        "Alpha beta gamma delta.", "Epsilon zeta eta theta, iota kappa lambda mu.", "Xi omicron pi rho sigma!"]
    assert corpus.windows_of(TEXT, 2, 800, "sentence") == [
        "Alpha beta gamma delta. Epsilon zeta eta theta, iota kappa lambda mu.",
        "Epsilon zeta eta theta, iota kappa lambda mu. Xi omicron pi rho sigma!"]
    assert corpus.windows_of(TEXT, 3, 800, "sentence") == [TEXT]
    assert corpus.windows_of(TEXT, 3, len(TEXT) - 1, "sentence") == []  # longer than the chunk size
    # clauses: the second sentence splits at its comma; windows run across sentence ends
    assert corpus.windows_of(TEXT, 1, 800, "clause") == [
        "Alpha beta gamma delta.", "Epsilon zeta eta theta,", "iota kappa lambda mu.", "Xi omicron pi rho sigma!"]
    assert corpus.windows_of(TEXT, 2, 800, "clause")[1] == "Epsilon zeta eta theta, iota kappa lambda mu."
    # fewer than MIN_WORDS words, table rows and image markers never make a window
    assert corpus.windows_of("Too short. | a | b | c | d |\n<!-- image -->", 1, 800, "sentence") == []


def test_owners_and_visibilities_pass_the_access_filter_50_and_5_percent():
    names = [f"windows/doc{i}/s1-{i}.txt" for i in range(40_000)]
    got = [corpus.assign(n) for n in names]
    assert got == [corpus.assign(n) for n in names]  # a hash of the name: the same every run
    share = {k: sum(1 for o, v in got if (v == "global") == (k == "global") and (k == "global" or o == k)) / len(got)
             for k in ("global", "alice", "bob")}
    assert share["global"] == pytest.approx(0.02, abs=0.003)
    assert share["global"] + share["alice"] == pytest.approx(0.50, abs=0.01)  # what alice's access filter passes
    assert share["global"] + share["bob"] == pytest.approx(0.05, abs=0.004)  # bob's
    assert all(v == "private" or o not in ("alice", "bob") for o, v in got)  # global documents are others'
    assert len({o for o, _ in got}) == 2 + corpus.OTHER_OWNERS


def test_take_cuts_exactly_n_chunks_skipping_a_document_that_would_overshoot():
    three = corpus.Doc("d.txt", "x", "scifact", "document", ("a", "b", "c"))
    one = [corpus.Doc(f"w{i}.txt", "y", "scifact", "sentence_window", (f"w{i}",)) for i in range(5)]
    pool = [one[0], three, one[1], three, one[2], one[3], one[4]]
    assert corpus.take_indices(pool, 5) == [0, 1, 2]
    assert corpus.take_indices(pool, 8) == [0, 1, 2, 3]
    assert corpus.take_indices(pool, 7) == [0, 1, 2, 4, 5]  # the second 3-chunk document would overshoot
    with pytest.raises(ValueError, match="cannot cut exactly 12"):
        corpus.take_indices(pool, 12)


@pytest.mark.skipif(not (SHARED / "scifact").is_dir(), reason="needs ../shared/datasets")
def test_a_small_pool_is_source_documents_and_no_question_is_a_chunk():
    pool, held, comp = corpus.build_pool(SHARED, 500)
    assert comp["chunks_by_kind"] == {"document": comp["chunks"]} and comp["chunks"] >= 500
    assert set(comp["per_source"]) == set(corpus.SOURCES)
    chunks = {c for d in pool for c in d.chunks}
    assert held and not any(q in chunks for _, q in held)
    assert sum(len(d.chunks) for d in corpus.take(pool, 500)) == 500


@pytest.mark.slow
@pytest.mark.skipif(not (SHARED / "scifact").is_dir(), reason="needs ../shared/datasets")
def test_the_benchmark_runs_through_the_server_engine_path(tmp_path):
    """store.engine=local (qdrant-client's local mode, the server's stand-in): the same write path,
    Retriever and measurements as a server by URL. Local mode is brute force, so every recall
    against exact search is 1 and no hit may pass the access filter wrongly; the binary collection
    records its quantization (local mode itself ignores it). ~2 min: five child processes each load
    the model."""
    import scale

    res = scale.run([300], ["none", "binary"], 12, engine="local", work=tmp_path, out=tmp_path / "scale.json",
                    cold_smallest=False, warmup=1, pool_size=300, numpy_checks=5)
    assert res["checks"] == {"every_chunk_stored": True, "hnsw_built_for_every_vector": True,
                             "no_hit_outside_the_access_filter": True, "engine_exact_equals_numpy": True,
                             "filters_pass_50_and_5_percent": res["checks"]["filters_pass_50_and_5_percent"],
                             "quantization_recorded": True}
    assert [p["quantization"] for p in res["points"]] == ["none", "binary"]
    for p in res["points"]:
        assert p["engine"] == "local" and p["chunks"] == 300 and p["build"]["note"].startswith("local mode")
        assert p["collection_meta"]["extra"]["engine"] == "local"
        for row in p["rows"]:
            assert row["violations"] == 0 and row["recall@10_vs_exact"] == 1.0, row
    assert {r["query_setting"] for r in res["points"][1]["rows"]} == {"default", "oversampling_4"}
    assert (tmp_path / "scale.json").is_file()
