"""What a payment and an answer are: schemas, the model's metadata contract, decisions. No I/O."""
