"""Ensembles: several served models answering as one name.

declaration   the `{name}/{version}/ensemble.json` format, parsed and checked
ensemble      one ensemble over resolved member versions (served like a model version)
catalog       every declared ensemble, rebuilt when a member's active version changes
"""
