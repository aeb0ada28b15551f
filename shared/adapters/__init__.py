"""Transports over the core: HTTP (Starlette and the local servers), V2 (REST, gRPC), the queue, Functions."""
