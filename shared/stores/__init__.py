"""What is kept outside the process: the tiered cache (L1 + Redis) and the control store."""
