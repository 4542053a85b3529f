"""CPU-only tuning: the allocator, the heap, cheap dropout masks, oneDNN caches, and threads that
work side by side. Resolved once by mt.runtime; a reader of the model and the loop can skip it."""
