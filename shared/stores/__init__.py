"""What is kept outside the process: the tiered cache (L1 + Redis), the control store, the prediction log."""
