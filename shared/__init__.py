"""The fraud-scoring core: one service behind the HTTP, Service Bus and Blob triggers.

Layers (folders; imports run one way, down this list; tests/test_layers.py fails on an upward one):

    settings, policies, setting, errors  configuration: every setting, the tunables, one setting's declaration · the error tree
    domain                           the payment event · the model's metadata contract · tensors · decisions · answers
    telemetry                        metrics, traces, logs (reading the core's answers as their types)
    runtime, stores                  admission · micro-batching · deadlines · jobs  |  tiered cache · control store · prediction log
    features                         event + user context → the model's row · the online feature stores
    models                           ONNX Runtime · the model repository · a served version · the registry · ensembles
    fleet, review                    every replica on the same versions · shadow, canary, drift · the LLM review of the uncertain tail
    core                             the transport-free service · its wiring, once per process
    adapters, __main__               HTTP (Starlette, local servers, OpenAPI) · V2 REST and gRPC · the queue · Functions

The public surface, each name from its defining module (nothing is re-exported; importing
`shared` loads nothing): `shared.settings.Settings` (and its policies), `shared.errors.ScoringError`,
`shared.core.service.ScoringService`, `shared.core.holder.ServiceHolder`, `shared.core.wiring.build_service`,
`shared.adapters.http.app.create_app`, `shared.adapters.functions.handlers`.
"""
