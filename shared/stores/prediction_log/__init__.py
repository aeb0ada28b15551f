"""The prediction log: every sampled decision, written off the response path.

log.py       PredictionLog: the bounded buffer `add` fills, the writer `run` drains, the accounting
sinks.py     where the lines go: a local directory or append blobs, one object per replica per hour
reader.py    a time range read back (partition pruning by the path), its summary, a DataFrame
__main__.py  `python -m shared.stores.prediction_log --dir .run/predictions --since 2026-12-01T10`
"""
