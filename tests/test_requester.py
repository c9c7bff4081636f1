"""Who a read is for: one Requester value (adiyan/types.py) instead of (requester_id, is_owner)."""

from __future__ import annotations

import inspect

import pytest

from adiyan.agent import Requester as AgentRequester
from adiyan.agent import get_tier
from adiyan.ingest.rawstore import RawStore
from adiyan.kb import KnowledgeBase
from adiyan.kb.pages import BookPages
from adiyan.kb.policy import access_filter, visible_to
from adiyan.retrieval import Retriever
from adiyan.store.base import Cond
from adiyan.types import OWNER, Requester


def test_a_bare_identity_never_grants_the_owner_role():
    assert Requester.of("bob") == Requester("bob", False)
    assert Requester.of(None) == Requester(None, False)
    assert Requester.of(OWNER) is OWNER and OWNER.is_owner and OWNER.id is None
    assert Requester.of(AgentRequester("carol", get_tier("owner"))) == Requester("carol", True)  # the tier decides
    assert Requester.of(AgentRequester("dave", get_tier("member"))) == Requester("dave", False)
    for bad in (True, ("bob", True), {"id": "bob", "is_owner": True}):
        with pytest.raises(TypeError, match="a requester is"):
            Requester.of(bad)


def test_the_access_filter_reads_one_value():
    assert access_filter(OWNER) is None  # the owner role: no restriction
    bob = access_filter(Requester("bob"))
    assert bob == access_filter("bob") and set(bob.should) == {Cond("visibility", "global"), Cond("owner_identity", "bob")}
    assert access_filter(None).should == (Cond("visibility", "global"),)  # anonymous: global only
    private = {"visibility": "private", "owner_identity": "alice"}
    assert not visible_to(private, "bob") and visible_to(private, "alice") and visible_to(private, OWNER)
    assert not visible_to(private, Requester("bob")) and not visible_to(private, None)


@pytest.mark.parametrize("cls", [KnowledgeBase, Retriever, RawStore, BookPages])
def test_no_read_path_takes_the_pair_any_more(cls):
    """Every read path of the knowledge base, the pipeline, the raw store and the book pages takes
    ``requester`` (a Requester or an identity): none takes ``requester_id`` / ``is_owner``."""
    readers = [name for name, fn in inspect.getmembers(cls, inspect.isfunction) if not name.startswith("__")
               and "requester" in inspect.signature(fn).parameters]
    assert readers, cls
    for name, fn in inspect.getmembers(cls, inspect.isfunction):
        params = inspect.signature(fn).parameters
        assert "is_owner" not in params and "requester_id" not in params, f"{cls.__name__}.{name}"
