"""Adapters that score other frameworks' RAG apps with our evalsets, metrics and reports."""
