"""Event + user context → the model's row: the mapping, and the online feature stores."""
