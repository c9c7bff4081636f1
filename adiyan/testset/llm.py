"""The LLM-driven kinds of ``adiyan testset generate``, when a generative LLM is configured.

- ``llm_rewrite``: an offline lookup question (its span, its gold chunk) rewritten by the LLM into
  the question a person would ask; the gold stays the offline one, and the rewrite goes through
  the same filters (answer not in the question, duplicates, reach), so only the wording changes.
- ``ragas_single_hop`` / ``ragas_multi_hop``: ragas 0.4's knowledge graph and query synthesizers
  (``SingleHopSpecificQuerySynthesizer``; ``MultiHopAbstractQuerySynthesizer`` and
  ``MultiHopSpecificQuerySynthesizer``) over the *same* parsed chunks the offline kinds use (one
  ``NodeType.CHUNK`` node per stored chunk, so every reference context maps back to a chunk and
  its document) and the configured embedder (:class:`adiyan.eval.ragas_metrics.AdiyanRagasEmbeddings`),
  with ragas' transforms for pre-chunked text (``default_transforms_for_prechunked``: summary,
  node filter, summary embedding, themes, entities, cosine and overlap relationships).

Every LLM call is a structured call through :func:`adiyan.models.structured.chat_json` (llama.cpp
grammar, ``response_format``, Ollama ``format``): ragas' prompts reach it through
:class:`StructuredRagasLLM`, ragas' ``InstructorBaseRagasLLM`` contract (``generate(prompt,
response_model)``), so the response model's JSON schema constrains the reply. Replies are cached by
content hash (``calls.sqlite``, namespace ``testset``) and counted per purpose: ok, invalid JSON,
schema mismatch, a valid object the response model still refused, transport errors.

Why adiyan drives ragas' steps instead of calling ``TestsetGenerator.generate``: in ragas 0.4.3 one
failed task aborts the whole run (``apply_transforms`` re-raises the first failed coroutine;
``generate`` turns a failed scenario into NaN, which ``TestsetSample`` then refuses), and a small or
remote model fails some calls. So each transform's coroutines, each node's single-hop scenarios and
each relationship's multi-hop scenarios run one at a time, and a failure is counted and skipped.
The components (graph, transforms, personas, synthesizers, prompts) are ragas' own.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import random
import uuid
import warnings
from collections import Counter
from dataclasses import dataclass, field

import numpy as np

from ..cache import CallCache, call_cache
from ..eval import ragas_metrics as RM
from ..eval.evalset import EvalsetError
from ..factory import open_llm
from ..models.structured import chat_json, structured_mode
from . import rules as R

LLM_KINDS = ("llm_rewrite", "ragas_single_hop", "ragas_multi_hop")
RAGAS_KINDS = ("ragas_single_hop", "ragas_multi_hop")
REWRITE_SCHEMA = {"type": "object", "properties": {"question": {"type": "string", "minLength": 1}},
                  "required": ["question"], "additionalProperties": False}
REWRITE_SYSTEM = ("You rewrite quiz questions into the question a person would naturally ask. Keep the meaning and "
                  "every name, number and date of the question; never add the answer. Reply with JSON "
                  '{"question": "..."}.')
FALLBACK_PERSONA = ("Reader", "Someone who reads these documents and asks about the facts they state.")
MAX_UNITS_PER_SAMPLE = 4
NODE_NS = uuid.UUID("2b7c6f0e-6a51-4d8e-9d43-1f0c2a9e7b64")
CALL_STATUSES = ("ok", "invalid_json", "schema_mismatch", "model_invalid", "error")


class StructuredCallFailed(RuntimeError):
    """A structured call whose reply was not a valid object (counted before this is raised)."""


def generative(settings) -> bool:
    """Is a generative LLM configured? ``llm.name=extractive`` quotes sentences and cannot write
    questions, unless ``llm.url`` points at a server (which then replaces it, adiyan.models.registry)."""
    return settings.llm.name != "extractive" or bool(settings.llm.url)


def open_generation_llm(settings):
    """The configured generative LLM, or EvalsetError naming the setting when there is none."""
    if not generative(settings):
        raise EvalsetError("the LLM kinds (" + ", ".join(LLM_KINDS) + ") need a generative LLM: set llm.url "
                           "(an OpenAI-compatible or Ollama server), or llm.name=ollama:NAME | "
                           "openai-compatible:URL | smollm2 (the embedded tiny model: wiring only); "
                           "llm.name=extractive cannot write questions")
    return open_llm(settings)


@dataclass
class CallStats:
    calls: int = 0
    cached: int = 0
    statuses: Counter = field(default_factory=Counter)
    modes: Counter = field(default_factory=Counter)
    errors: list = field(default_factory=list)  # the first few error texts, for the report

    def as_dict(self) -> dict:
        return {"calls": self.calls, "cached": self.cached, **{s: self.statuses.get(s, 0) for s in CALL_STATUSES},
                "parse_failures": self.statuses.get("invalid_json", 0) + self.statuses.get("schema_mismatch", 0)
                + self.statuses.get("model_invalid", 0), "modes": dict(self.modes), "errors": self.errors[:5]}


class StructuredCaller:
    """chat_json with a content-addressed cache and counters per purpose (what the report shows)."""

    def __init__(self, llm, settings, cache: CallCache | None):
        self.llm = llm
        self.cache = cache
        lc = settings.llm.model_dump(mode="json")
        # the cache key: the model and every setting that shapes a reply; not the structured mode, which an
        # OpenAI-compatible client settles on its first call (json_schema refused -> json_object)
        self.identity = {"llm": getattr(llm, "id", type(llm).__name__),
                         **{k: lc[k] for k in ("name", "url", "model", "temperature", "max_tokens", "seed",
                                               "context_size", "structured")}}
        self.stats: dict[str, CallStats] = {}

    def ask(self, purpose: str, messages: list[dict], schema: dict, name: str) -> dict | None:
        """The schema-valid object, or None (the failure counted under ``purpose``)."""
        st = self.stats.setdefault(purpose, CallStats())
        st.calls += 1
        key = self.cache.key({**self.identity, "messages": messages, "schema": schema, "name": name}) \
            if self.cache is not None else None
        rec = self.cache.get(key) if key is not None else None
        if rec is not None:
            st.cached += 1
        else:
            try:
                reply = chat_json(self.llm, messages, schema, name=name)
                rec = {"value": reply.value, "status": reply.status, "mode": reply.mode, "error": reply.error}
            except Exception as exc:  # noqa: BLE001 - a transport failure is counted, never cached
                rec = {"value": None, "status": "error", "mode": structured_mode(self.llm),
                       "error": f"{type(exc).__name__}: {exc}"[:300]}
            if key is not None and rec["status"] != "error":
                self.cache.put(key, rec)
        st.statuses[rec["status"]] += 1
        st.modes[rec["mode"]] += 1
        if rec["status"] != "ok" and len(st.errors) < 5:
            st.errors.append(rec["error"][:300])
        return rec["value"] if rec["status"] == "ok" else None

    def model_invalid(self, purpose: str, error: str) -> None:
        """A schema-valid object the response model refused: moved from ok to model_invalid."""
        st = self.stats[purpose]
        st.statuses["ok"] -= 1
        st.statuses["model_invalid"] += 1
        if len(st.errors) < 5:
            st.errors.append(error[:300])

    def report(self) -> dict:
        return {p: s.as_dict() for p, s in sorted(self.stats.items())}


def caller_for(settings) -> StructuredCaller:
    """The configured generative LLM behind the ``testset`` namespace of the call cache."""
    return StructuredCaller(open_generation_llm(settings), settings,
                            call_cache(settings, "testset"))


# ---------------------------------------------------------------- the rewrite of offline questions


def rewrite(caller: StructuredCaller, question: str) -> str | None:
    """The LLM's natural-language version of an offline question, or None when the call failed."""
    value = caller.ask("llm_rewrite", [{"role": "system", "content": REWRITE_SYSTEM},
                                       {"role": "user", "content": f"Question: {question}"}],
                       REWRITE_SCHEMA, "rewritten_question")
    if value is None:
        return None
    q = " ".join(str(value["question"]).split())
    return q if q.endswith("?") else q.rstrip(".!") + "?"


# ---------------------------------------------------------------- ragas: graph, transforms, synthesizers


def _ragas_llm_class():
    from ragas.llms.base import InstructorBaseRagasLLM  # heavy: ragas, only for the LLM kinds

    class StructuredRagasLLM(InstructorBaseRagasLLM):
        """ragas' ``InstructorBaseRagasLLM`` contract over :class:`StructuredCaller`: the response
        model's JSON schema is the structured call's schema; a failed call raises (ragas' step fails)."""

        is_async = False  # PydanticPrompt calls generate() directly

        def __init__(self, caller: StructuredCaller):
            self.caller = caller
            self.model = caller.identity["llm"]

        def generate(self, prompt: str, response_model):
            purpose = f"ragas:{response_model.__name__}"
            value = self.caller.ask(purpose, [{"role": "user", "content": prompt}],
                                    response_model.model_json_schema(), response_model.__name__)
            if value is None:
                raise StructuredCallFailed(f"{purpose}: no valid reply")
            try:
                return response_model.model_validate(value)
            except Exception as exc:  # noqa: BLE001 - pydantic refused a schema-valid object
                self.caller.model_invalid(purpose, str(exc))
                raise StructuredCallFailed(f"{purpose}: {exc}") from exc

        async def agenerate(self, prompt: str, response_model):
            return self.generate(prompt, response_model)

    return StructuredRagasLLM


def _offline_tokenizer():
    """A ragas ``BaseTokenizer`` that needs no download: UTF-8 bytes as tokens (exact round trip).

    ragas' LLM extractors count tokens only to split a text longer than ``max_token_limit``
    (32,000); its default tokenizer is tiktoken's o200k_base, whose encoding file is downloaded
    on first use and cannot be offline. Bytes over-count (about 4 a word), so a split happens
    earlier than with a BPE count, never later; stored chunks (at most 12,000 characters here) are
    never split."""
    from ragas.tokenizers import BaseTokenizer  # heavy: ragas, only for the LLM kinds

    class ByteTokenizer(BaseTokenizer):
        def encode(self, text: str) -> list[int]:
            return list(text.encode("utf-8"))

        def decode(self, tokens: list[int]) -> str:
            return bytes(tokens).decode("utf-8", errors="ignore")

    return ByteTokenizer()


@contextlib.contextmanager
def _seeded(seed: int):
    """ragas draws from the global ``random`` / numpy generators: seed them, restore them after."""
    state, np_state = random.getstate(), np.random.get_state()
    random.seed(seed)
    np.random.seed(seed % 2**32)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        random.setstate(state)
        np.random.set_state(np_state)


def _run(loop, coro):
    return loop.run_until_complete(coro)


@dataclass
class RagasSamples:
    """What one ragas pass produced: samples per kind and the counts the report shows."""

    samples: dict = field(default_factory=lambda: {k: [] for k in RAGAS_KINDS})  # kind -> [(question, reference, contexts, synthesizer)]
    failures: dict = field(default_factory=lambda: {k: [] for k in RAGAS_KINDS})  # kind -> [{"step", "error"}]
    report: dict = field(default_factory=dict)


def ragas_samples(caller: StructuredCaller, embedder, chunks: list, want: dict[str, int], *, seed: int,
                  max_chunks: int, progress: bool = False) -> RagasSamples:
    """Run ragas' knowledge graph and synthesizers over ``chunks`` ([(doc, chunk)], public ones) for
    ``want`` samples per ragas kind; ``max_chunks`` of them (a seeded sample) become graph nodes."""
    from ragas.testset.graph import KnowledgeGraph, Node, NodeType  # heavy: ragas, only for the LLM kinds
    from ragas.testset.persona import Persona, generate_personas_from_kg  # heavy: ragas, only for the LLM kinds
    from ragas.testset.synthesizers.multi_hop import (  # heavy: ragas, only for the LLM kinds
        MultiHopAbstractQuerySynthesizer,
        MultiHopSpecificQuerySynthesizer,
    )
    from ragas.testset.synthesizers.single_hop.specific import (  # heavy: ragas, only for the LLM kinds
        SingleHopSpecificQuerySynthesizer,
    )
    from ragas.testset.transforms import Parallel, default_transforms_for_prechunked  # heavy: ragas, LLM kinds only
    from ragas.testset.transforms.extractors import EmbeddingExtractor  # heavy: ragas, only for the LLM kinds
    from ragas.testset.transforms.relationship_builders import (  # heavy: ragas, only for the LLM kinds
        CosineSimilarityBuilder,
        OverlapScoreBuilder,
    )

    out = RagasSamples()
    rng = random.Random(f"{seed}:ragas")
    pool = list(chunks)
    rng.shuffle(pool)
    pool = pool[:max_chunks]
    llm = _ragas_llm_class()(caller)
    emb = RM.AdiyanRagasEmbeddings(embedder, kind="document")  # imports ragas on first access
    # node ids from the chunk's key, not uuid4: ragas iterates sets of nodes, so random ids would
    # change the prompts' order from run to run and miss the call cache
    kg = KnowledgeGraph(nodes=[Node(id=uuid.uuid5(NODE_NS, f"{d.file}#{c.index}"), type=NodeType.CHUNK, properties={
        "page_content": c.text, "document_metadata": {"file": d.file, "chunk": c.index}}) for d, c in pool])
    steps: dict[str, dict] = {}
    logging.getLogger("ragas").setLevel(logging.CRITICAL)  # failures are counted here, not logged per task
    loop = asyncio.new_event_loop()
    try:
        with _seeded(seed):
            flat = []
            for tr in default_transforms_for_prechunked(llm=llm, embedding_model=emb):
                flat.extend(tr.transformations if isinstance(tr, Parallel) else [tr])
            tokenizer = _offline_tokenizer()
            for tr in flat:
                if hasattr(tr, "tokenizer"):  # ragas' default (tiktoken o200k_base) downloads its encoding
                    tr.tokenizer = tokenizer
                name = type(tr).__name__ + (f"({tr.property_name})" if hasattr(tr, "property_name") else "")
                need = {EmbeddingExtractor: "embed_property_name", CosineSimilarityBuilder: "property_name",
                        OverlapScoreBuilder: "property_name"}.get(type(tr))
                before = len(kg.nodes)
                if need is not None:  # a node whose earlier LLM step failed lacks the property: skip it, counted
                    prop, base = getattr(tr, need), tr.filter_nodes
                    tr.filter_nodes = lambda node, prop=prop, base=base: base(node) and node.get_property(prop) is not None
                coros = tr.generate_execution_plan(kg)
                failed = []
                for coro in coros:
                    try:
                        _run(loop, coro)
                    except Exception as exc:  # noqa: BLE001 - one node's step failed: counted, the rest go on
                        failed.append(f"{type(exc).__name__}: {exc}"[:200])
                steps[name] = {"tasks": len(coros), "failed": len(failed), "errors": failed[:3],
                               "nodes_removed": before - len(kg.nodes)}
            try:
                # one per name (the synthesizers key personas by name), sorted: ragas generates them
                # concurrently and returns them in completion order, which would reorder later prompts
                personas = sorted({p.name: p for p in generate_personas_from_kg(kg=kg, llm=llm, num_personas=3)}.values(),
                                  key=lambda p: (p.name, p.role_description))
                persona_source = "generated"
            except Exception as exc:  # noqa: BLE001 - no summaries or a failed call: one generic persona
                personas = [Persona(name=FALLBACK_PERSONA[0], role_description=FALLBACK_PERSONA[1])]
                persona_source = f"fallback ({type(exc).__name__}: {str(exc)[:120]})"
            synth = {"ragas_single_hop": [SingleHopSpecificQuerySynthesizer(llm=llm)],
                     "ragas_multi_hop": [MultiHopAbstractQuerySynthesizer(llm=llm),
                                         MultiHopSpecificQuerySynthesizer(llm=llm)]}
            per_synth = {}
            for kind, synths in synth.items():
                n_kind = want.get(kind, 0)
                if n_kind <= 0:
                    continue
                for i, sy in enumerate(synths):
                    n_sy = n_kind // len(synths) + (1 if i < n_kind % len(synths) else 0)
                    per_synth[sy.name] = _synthesize(sy, kind, n_sy, kg, KnowledgeGraph, personas, loop, rng, out)
    finally:
        loop.close()
    out.report = {"chunks_available": len(chunks), "graph_nodes": len(pool), "nodes_after_transforms": len(kg.nodes),
                  "relationships": len(kg.relationships), "transforms": steps, "personas": [p.name for p in personas],
                  "persona_source": persona_source, "synthesizers": per_synth}
    return out


def _partitions(sy, kg, KnowledgeGraph) -> list:
    """The synthesizer's units of work as one-unit graphs: a node (single hop) or a relationship with
    its two nodes (multi hop), so a failure loses one unit, not the synthesizer's whole run."""
    if sy.name == "single_hop_specific_query_synthesizer" or type(sy).__name__.startswith("SingleHop"):
        return [KnowledgeGraph(nodes=[n]) for n in sy.get_node_clusters(kg)]
    if type(sy).__name__ == "MultiHopSpecificQuerySynthesizer":
        rels = [r for r in kg.relationships if r.type == sy.relation_type]
    else:
        rels = [r for r in kg.relationships if r.get_property(sy.relation_property)]
    return [KnowledgeGraph(nodes=[r.source, r.target], relationships=[r]) for r in rels]


def _synthesize(sy, kind, n, kg, KnowledgeGraph, personas, loop, rng, out: RagasSamples) -> dict:
    parts = _partitions(sy, kg, KnowledgeGraph)
    rng.shuffle(parts)
    made = failed_scen = failed_samp = empty = tried = 0
    scenarios_total = 0
    for part in parts:
        # enough samples, or MAX_UNITS_PER_SAMPLE units per sample wanted tried: a model that never yields a
        # scenario (SmolLM2 on XQuAD: 0 of 2,410 relationships) must not cost an LLM call per unit of a large graph
        if made >= n or tried >= MAX_UNITS_PER_SAMPLE * max(n, 1):
            break
        tried += 1
        try:
            scenarios = _run(loop, sy.generate_scenarios(n=1, knowledge_graph=part, persona_list=personas))
        except Exception as exc:  # noqa: BLE001 - counted; the next unit is tried
            failed_scen += 1
            out.failures[kind].append({"step": f"{type(sy).__name__}.generate_scenarios",
                                       "error": f"{type(exc).__name__}: {exc}"[:200]})
            continue
        scenarios_total += len(scenarios)
        empty += not scenarios  # e.g. no persona the model named matched a theme: nothing to ask
        for sc in scenarios[:1]:
            try:
                sample = _run(loop, sy.generate_sample(scenario=sc))
            except Exception as exc:  # noqa: BLE001
                failed_samp += 1
                out.failures[kind].append({"step": f"{type(sy).__name__}.generate_sample",
                                           "error": f"{type(exc).__name__}: {exc}"[:200]})
                continue
            out.samples[kind].append((sample.user_input or "", sample.reference or "",
                                      list(sample.reference_contexts or []), type(sy).__name__))
            made += 1
    return {"kind": kind, "units": len(parts), "units_tried": tried, "wanted": n, "scenarios": scenarios_total,
            "scenario_failures": failed_scen, "units_without_scenario": empty, "sample_failures": failed_samp,
            "samples": made}


def ragas_margin(want: int) -> int:
    """Samples asked of the LLM beyond the quota, for the filters to drop."""
    return want + max(2, math.ceil(want / 4))
