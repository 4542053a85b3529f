"""mt: a compact Transformer toolkit for machine translation and character-level language modelling."""

__version__ = "0.1.0"
