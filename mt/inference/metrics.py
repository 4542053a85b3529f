"""Corpus-level BLEU and chrF with sacreBLEU, detokenized, against raw references."""

from __future__ import annotations

import sacrebleu


def corpus_scores(hypotheses: list[str], references: list[str]) -> dict:
    """{'bleu', 'chrf', 'signature': {'bleu', 'chrf'}} for one reference per hypothesis."""
    bleu, chrf = sacrebleu.metrics.BLEU(), sacrebleu.metrics.CHRF()
    bleu_score, chrf_score = bleu.corpus_score(hypotheses, [references]), chrf.corpus_score(hypotheses, [references])
    return {
        "bleu": round(bleu_score.score, 2),
        "chrf": round(chrf_score.score, 2),
        "signature": {"bleu": str(bleu.get_signature()), "chrf": str(chrf.get_signature())},
        "bleu_text": str(bleu_score),
        "chrf_text": str(chrf_score),
    }
