"""Evaluation: evalsets, IR metrics, RAGAS with an accountable judge, incidents, regression cases, the eval job."""
