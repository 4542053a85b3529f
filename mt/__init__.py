"""mt: a compact Transformer toolkit for machine translation and character-level language modelling."""

__version__ = "0.1.0"

from mt.cpu import allocator

# A command (`python -m mt.NAME`, `mt-NAME`) runs itself again on tcmalloc where it is installed,
# before PyTorch loads (mt/cpu/allocator.py); importing mt into a program of one's own changes nothing.
allocator.use_tcmalloc()
