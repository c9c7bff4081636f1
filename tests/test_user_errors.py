"""A user error is one line naming what and why, exit 2, and no run folder left behind (issue 41.2):
a missing evalset path, a file or a folder that is not an evalset, a malformed manifest, a bad
setting value, a misspelt setting (with the closest name)."""

from __future__ import annotations

import pytest

from adiyan.cli import main


def _run(capsys, *argv):
    code = main(list(argv))
    err = capsys.readouterr().err.strip()
    return code, err


@pytest.fixture
def base(tmp_path):
    return ["--set", f"paths.reports_dir={tmp_path / 'reports'}", "--set", f"paths.data_dir={tmp_path / 'data'}",
            "--set", f"paths.cache_dir={tmp_path / 'cache'}", "--set", "eval.incidents=false"]


def _bad_manifest(tmp_path):
    d = tmp_path / "badset"
    d.mkdir()
    (d / "manifest.yaml").write_text("documents:\n  - file: missing.md\n    owner: alice\n")
    return d, "documents[0] file 'missing.md' does not exist"


@pytest.mark.parametrize("case", ["missing", "a file", "documents folder", "bad manifest"])
def test_an_evalset_that_cannot_be_one_is_one_line_exit_2_and_no_run_folder(tmp_path, capsys, base, case):
    if case == "missing":
        path, why = tmp_path / "nope", "not found"
    elif case == "a file":
        path = tmp_path / "notes.txt"
        path.write_text("hello")
        why = "a file, not an evalset"
    elif case == "documents folder":
        path = tmp_path / "docs"
        path.mkdir()
        (path / "a.md").write_text("# A\n")
        why = "not an evalset folder: no manifest.yaml"
    else:
        path, why = _bad_manifest(tmp_path)
    code, err = _run(capsys, *base, "--set", f"eval.evalset={path}", "eval", "--quiet")
    assert code == 2
    assert len(err.splitlines()) == 1 and why in err and str(path) in err and "Traceback" not in err
    reports = tmp_path / "reports"
    assert not reports.exists() or not [p for p in reports.iterdir() if p.is_dir()]  # no stray run folder


def test_a_misspelt_setting_names_the_closest_one(capsys):
    code, err = _run(capsys, "--set", "retrieval.mod=hybrid", "config")
    assert code == 2 and "did you mean `retrieval.mode`?" in err and len(err.splitlines()) == 1
    code, err = _run(capsys, "--set", "retreival.mode=hybrid", "config")
    assert code == 2 and "did you mean `retrieval`?" in err


def test_a_bad_setting_value_is_one_line(capsys):
    code, err = _run(capsys, "--set", "retrieval.kb_top_k=abc", "config")
    assert code == 2 and "retrieval.kb_top_k" in err and len(err.splitlines()) == 1


def test_asking_an_empty_knowledge_base_says_so_and_names_the_command(tmp_path, capsys, base):
    """Issue 40.4: not "I don't know" from nothing, but what is missing and how to fill it; the same for
    a requester who may see none of what is there (alice's private note, asked by bob)."""
    from adiyan.config import load_settings
    from adiyan.factory import open_kb

    base = base[:-2]  # eval.* is refused by adiyan ask
    code, err = _run(capsys, *base, "ask", "How long is the refund window?", "--as", "bob")
    assert code == 2 and "holds no document bob may see" in err and "adiyan ingest PATH --owner" in err
    settings = load_settings(None, dict(a.split("=", 1) for a in base[1::2]), environ={})
    kb = open_kb(settings, progress=False)
    try:
        kb.ingest_text("Refunds within 30 days.", "note.md", "alice", "private")
    finally:
        kb.close()
    code, err = _run(capsys, *base, "ask", "How long is the refund window?", "--as", "bob")
    assert code == 2 and "holds no document bob may see" in err
    code, err = _run(capsys, *base, "ask", "How long is the refund window?", "--as", "alice")
    assert code == 0, err  # alice sees her note: the question is answered


def test_ingest_from_a_manifest_keeps_each_documents_owner_and_visibility(tmp_path, capsys, base):
    """``adiyan ingest --manifest EVALSET`` (the README tour fills the knowledge base this way):
    every document of the manifest, keyed and protected as the manifest says."""
    from adiyan.config import load_settings
    from adiyan.eval.evalset import load_evalset
    from adiyan.factory import open_kb
    from tests.conftest import ROOT

    base = base[:-2]  # eval.* is refused by adiyan ingest
    code, _ = _run(capsys, *base, "ingest", "--manifest", str(ROOT / "evalsets" / "adiyan_full"), "--quiet")
    assert code == 0
    es = load_evalset(ROOT / "evalsets" / "adiyan_full")
    assert {d.visibility for d in es.documents} == {"global", "private"}  # both kinds are checked
    settings = load_settings(None, dict(a.split("=", 1) for a in base[1::2]), environ={})
    kb = open_kb(settings, progress=False)
    try:
        seen_by_stranger = {d["source"] for d in kb.list_documents("a-stranger")}
        for d in es.documents:
            assert (d.source_key in seen_by_stranger) is (d.visibility == "global"), d.source_key
            assert d.source_key in {x["source"] for x in kb.list_documents(d.owner)}
    finally:
        kb.close()
    code, err = _run(capsys, *base, "ingest", "--quiet")
    assert code == 2 and "--manifest" in err
