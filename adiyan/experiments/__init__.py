"""Experiments: one module per notebook, each built on the evaluation harness and the pipeline.

==============  =====================================================  =====================
module          what it measures                                       notebook (sweeps)
==============  =====================================================  =====================
retrieval       top-k, modes, RRF, re-rank, query transformation       retrieval (topk, retrieval)
chunking        cold cost of a chunking configuration, chunks per doc  chunking (chunking, chunking_qa)
hnsw            HNSW recall against exact search, latency, filter      hnsw (hnsw)
memory          recency half-life on the memory evalset                memory (recency)
dims            embedding width (Matryoshka) and int8 storage          dims (dims)
context         the context budget of grounded generation              context (context)
agent           the ReAct agent vs single-shot (run_eval, agent mode)  agent (agent)
incidents       the five incident replays                              incidents
scoring         a point scored like a run: RAGAS, judge, regression    retrieval, chunking, dims,
                cases (score=True in the experiments above)            context, memory
common          PointResult, record(output_dir, result), project_root  every notebook
==============  =====================================================  =====================

A notebook imports what it needs (``from adiyan.experiments import retrieval``) and ends with
``common.record(output_dir, result)``; the sweep runner (:mod:`adiyan.sweeps`, a layer above)
executes notebooks and never the other way round. Nothing is imported here, so a notebook
loads only its own experiment.
"""
