"""Across replicas and versions: the fleet's records in the control store, and what each version did.

    keys        every record of the fleet in the control store beside its key (one place for their shape)
    versions    Rollout: every replica on the same versions (newest-version records, polling, pins, quarantine)
    traffic     Traffic: a model's shadow and canary split, fleet-wide (what the core holds), over:
    routes        Routes: where each event goes on this replica; the automatic abort's counting (no I/O)
    canary        the canary judge: an arm's rolling window, the bound and z verdict, the abort record
    commands      Commands: the operator's shadow, canary, abort, promote (record first, then audit)
    sync          Sync: the background loop: records applied every WATCH_S, lost ones written back, aborts kept
    shadow      ShadowScorer: shadow scoring after the answer is sent
    drift       DriftMonitor: each version's latest records against its first ones (PSI)
    references  one drift reference per fleet: first writer wins

A record is written first, then applied here; every replica reads them back every WATCH_S.
"""
