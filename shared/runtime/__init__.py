"""Process mechanics with no domain in them: admission, micro-batching, deadlines, background jobs."""
