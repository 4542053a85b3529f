"""Inference: the Translator, search (greedy, sampling, beam, forced scoring), LM generation,
decoding options, int8, CTranslate2, attention maps, metrics."""
