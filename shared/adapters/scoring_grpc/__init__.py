"""Payment events over gRPC (`fraud.scoring.v1.Scoring`): `POST /api/score` as a unary call and a stream.

    service      the methods: `Score` (one event) and `ScoreStream` (events as they come), over the
                 core's one single-event entry (`ScoringService.score_json`), as the HTTP route
    stream       one `ScoreStream` call: reads while it has room, scores each event as it arrives,
                 writes answers as they are ready (several to a message, out of order)
    scoring_pb2  the messages, generated from proto/fraud/scoring/v1/scoring.proto

Registered on the V2 lane's grpc.aio server (shared/adapters/oip/grpc_server.py): the same port,
keys (`x-api-key`, GRPC_KEYS), call cap and admission.
"""
