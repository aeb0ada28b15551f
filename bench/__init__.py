"""`make bench`: the score path measured against its ceiling (bare ASGI) and floor (raw ONNX Runtime)."""
