"""The Open Inference Protocol (V2): the data plane that Triton, KServe and MLServer speak.

    codec        V2 datatypes ↔ numpy arrays (JSON data, the binary form), checked
    dataplane    transport-free V2 handlers over the core (metadata, readiness, infer)
    rest         the `/v2/...` routes of the Starlette app (JSON and the binary-data extension)
    grpc_server  `inference.GRPCInferenceService` on grpc.aio, a background job of the core
    jobs         what adapters hand to `ServiceHolder(on_built=...)` (grpc imported only when used)

Every adapter calls the core (`ScoringService.infer`, `metadata`, `model_ready`), never
the registry: a V2 request shares the batchers and caches of `/api/score`.
"""
