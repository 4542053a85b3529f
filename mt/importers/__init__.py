"""Importers: foreign checkpoints written as ordinary mt run directories."""
