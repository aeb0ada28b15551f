"""The HTTP adapter: the ASGI app, its route table, its OpenAPI document, and the local servers."""
