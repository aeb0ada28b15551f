"""Ensembles: several served models answering as one name.

declaration   the `{name}/{version}/ensemble.json` format, parsed and checked
ensemble      one ensemble over resolved member versions (served like a model version)
catalog       every declared ensemble, rebuilt when a member's active version changes
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from shared.exports import lazy_exports

if TYPE_CHECKING:
    from shared.ensembles.catalog import Ensembles
    from shared.ensembles.declaration import Declaration, Member, parse_declaration
    from shared.ensembles.ensemble import Ensemble

__all__ = ["Declaration", "Ensemble", "Ensembles", "Member", "parse_declaration"]

_HOMES = {
    "Declaration": "declaration",
    "Member": "declaration",
    "parse_declaration": "declaration",
    "Ensemble": "ensemble",
    "Ensembles": "catalog",
}

__getattr__ = lazy_exports(__name__, _HOMES)
