"""Across replicas and versions: pins and model records, shadows and canaries (the control store), drift."""
