"""Training: the trainer and its run directory, the tasks it trains, stopping, optimizer and
schedule, torchrun, averaging, the report."""
