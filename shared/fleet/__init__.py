"""Every replica serving the same versions: pins and model records through the control store."""
