"""Data: corpora by name (catalog), parallel and plain-text corpora on `datasets`, tokenizers and
their training, token-budget batches."""
