"""The transport-free core (`service`) and the one place it is built, once per process (`wiring`)."""
