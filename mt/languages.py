"""Languages as mt names and recognises them: English names for ISO 639-1 codes, and detection of
the language a text is in, among candidates (a server's source "auto", a translation's confidence).

Detection is py3langid's (langid.py's model, restricted to the candidates): of the libraries
measured on short French and English validation texts (bench/detectors.py; docs/results.md) it was
the most accurate on one to three words and on whole sentences, at about 40 µs a text, and works
offline. Its model loads once, on first use (about a second).
"""

from __future__ import annotations

import functools
import threading

from mt.deadline import checkpoint

NAMES = {
    "ar": "Arabic", "bg": "Bulgarian", "ca": "Catalan", "cs": "Czech", "da": "Danish", "de": "German",
    "el": "Greek", "en": "English", "eo": "Esperanto", "es": "Spanish", "et": "Estonian", "eu": "Basque",
    "fa": "Persian", "fi": "Finnish", "fr": "French", "ga": "Irish", "gl": "Galician", "he": "Hebrew",
    "hi": "Hindi", "hr": "Croatian", "hu": "Hungarian", "id": "Indonesian", "it": "Italian", "ja": "Japanese",
    "ko": "Korean", "lt": "Lithuanian", "lv": "Latvian", "ms": "Malay", "nb": "Norwegian", "nl": "Dutch",
    "pl": "Polish", "pt": "Portuguese", "ro": "Romanian", "ru": "Russian", "sk": "Slovak", "sl": "Slovenian",
    "sq": "Albanian", "sr": "Serbian", "sv": "Swedish", "th": "Thai", "tr": "Turkish", "uk": "Ukrainian",
    "ur": "Urdu", "vi": "Vietnamese", "zh": "Chinese",
}  # fmt: skip
UNSURE = 0.5  # py3langid's probability for text with nothing to go on ("OK", "123")


def name_of(code: str) -> str:
    return NAMES.get(code.split("-")[0].lower(), code)


_lock = threading.Lock()


@functools.cache
def _identifier():
    from py3langid.langid import MODEL_FILE, LanguageIdentifier

    return LanguageIdentifier.from_model_file(MODEL_FILE, norm_probs=True)


def detect_ranked(texts: list[str], candidates: list[str]) -> list[list[tuple[str, float]]]:
    """Each text's candidate languages with the probability given to each (0 to 1), likeliest
    first. One candidate, or an empty text, gives the candidates in order with no confidence."""
    if len(candidates) == 1 or not any(t.strip() for t in texts):
        return [[(c, 1.0 if text.strip() and len(candidates) == 1 else 0.0) for c in candidates] for text in texts]
    identifier = _identifier()
    known = [c for c in candidates if c in identifier.nb_classes]
    if not known:
        return [[(c, 0.0) for c in candidates] for _ in texts]
    with _lock:  # the candidates are the identifier's state
        identifier.set_languages(known)
        ranked = []
        for text in texts:
            checkpoint()  # a server's request past its deadline stops here
            ranked.append(identifier.rank(text) if text.strip() else [(c, 0.0) for c in known])
    return [[(code, float(p)) for code, p in found] for found in ranked]
