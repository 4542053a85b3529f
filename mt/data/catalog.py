"""Named corpora resolved to local files under `data/<name>/`.

On first use each file is downloaded from its canonical address (or, when the environment
variable MT_DATA_MIRROR names a folder, copied from `$MT_DATA_MIRROR/<name>/<file>`), its sha256
checked, and only then renamed into place (`mt.files.atomic_write`), so an interrupted or corrupt
fetch never leaves a partial file behind. MT_DATA_DIR moves the data folder (default: `data` in the working directory).
"""

from __future__ import annotations

import difflib
import fnmatch
import lzma
import os
import re
import shutil
import tarfile
import urllib.error
import urllib.request
import zipfile
from dataclasses import dataclass
from pathlib import Path

from mt.errors import UserError
from mt.files import atomic_write, sha256_of


@dataclass(frozen=True)
class RemoteFile:
    name: str  # file name under data/<corpus>/
    url: str
    sha256: str | None  # None where upstream publishes no stable file (tatoeba is re-exported often)
    member: str | None = None  # the file to take out of a zip or tar archive at `url`; a glob joins its matches
    sgml: bool = False  # the member is WMT's SGML (one <seg> a sentence): keep the segments' text, one a line


_MULTI30K = "https://github.com/multi30k/dataset/raw/master/data/task1/raw/"
_MULTI30K_SHA256 = {
    "train.fr.gz": "622e75069e9f4c577425c4f277116ce66e63a2401c0a2312d90073cb12379a3c",
    "train.en.gz": "d79cfa999dd4c51d2cb42499b6796d5a882c3a8a961923c25a898c90f8bbd56f",
    "val.fr.gz": "ca3106f1a72390591d25f6c45cb4cd39dec4cd3f123e099748a3ce5256c160e9",
    "val.en.gz": "14f7d25ddd868909a9213e361768460edcacdd6ab9d1e77b92560dc10c10dc28",
    "test_2016_flickr.fr.gz": "6d326e188d259fb1d04ac19eae3af956559b3a0b93d7635e56c90987c40c8b90",
    "test_2016_flickr.en.gz": "611d361c6334bc7246101d48097c13cf5c4413c5befc793cc629934359d532d9",
    "test_2017_flickr.fr.gz": "3ba671ceb2299f3304ffafefea7a833d08632fbaf0ba18546f8a2ec2391af496",
    "test_2017_flickr.en.gz": "76a444ee25172e72695cddb13ae4a3bda59430617be88e0bb46b60504f054074",
}

# WMT news test sets, French-English, as plain text inside the WMT14 development tarball. The
# mirror's files were not compared with the tarball's members here, so no checksum is pinned.
_WMT14_DEV = "https://www.statmt.org/wmt14/dev.tgz"
NEWSTEST_SETS = (
    "news-test2008",
    "newssyscomb2009",
    "newstest2009",
    "newstest2010",
    "newstest2011",
    "newstest2012",
    "newstest2013",
)

# WMT15's test set of reader comments on news sites (French-English, the fr-en direction), in SGML.
_WMT15_TEST = "https://www.statmt.org/wmt15/test.tgz"
NEWSTEST_TEST_SETS = ("newsdiscusstest2015",)
_NEWSDISCUSS = {"fr": "test/newsdiscusstest2015-fren-src.fr.sgm", "en": "test/newsdiscusstest2015-fren-ref.en.sgm"}

# The Aligned Hansards of the 36th Parliament of Canada (USC/ISI release 2001-1a): one tar archive a
# part, holding one gzip file a session and language (*.e.gz, *.f.gz), joined here in name order.
# The archives' member names follow the release's documentation; they were not opened here (no web).
_HANSARD = "https://www.isi.edu/natural-language/download/hansard/hansard.36.r2001-1a.{}.debates.{}.tar"
HANSARD_PARTS = ("house.training", "senate.training", "house.testing", "senate.testing")

# Europarl v7, French-English (2M pairs of European Parliament proceedings): the release's two text
# members, kept here xz-compressed (a third of the size; read as a stream all the same).
_EUROPARL = "https://www.statmt.org/europarl/v7/fr-en.tgz"

# Technical text translated by people (mt/data/technical.py reads each form). The mirror's copies of
# the two repositories keep only what the readers take; their checksums are of those copies.
_PYDOCS = "python-docs-fr-b279d876e2a3381605d38ea62b863f60abadc92c"
_DJANGODOCS = "django-docs-translations-b599584e1790241518b95844be27460fa85960a7"
_CHEATSHEETS = "cheatsheet-translation-99f45b6d65b8e60f637d8ac0db15f76327197c23"
_LO_HELP = "libreoffice-help-{}_7.4.7-1+deb12u14_all.deb"
_LO_HELP_SHA256 = {
    "en-us": "8faa840285734d6cfe1ed25537b48f07e74bd6412e3917bf8e5f8a653f7b3712",
    "fr": "c796530d3e95af1ea4d054076682efc8aad2b569ae9513f3d4a776b2df3fd206",
}
DEBIAN_POOL = "debian:pool/main/libr/libreoffice/"  # fetched from the Debian mirror apt is set to use

CORPORA: dict[str, list[RemoteFile]] = {
    "tinyshakespeare": [
        RemoteFile(
            "input.txt",
            "https://raw.githubusercontent.com/karpathy/char-rnn/master/data/tinyshakespeare/input.txt",
            "86c4e6aa9db7c042ec79f339dcb96d42b0075e16b8fc2e86bf0ca57e2dc565ed",
        )
    ],
    "multi30k": [RemoteFile(name, _MULTI30K + name, sha) for name, sha in _MULTI30K_SHA256.items()],
    "tatoeba": [RemoteFile("eng-fra.tsv", "https://www.manythings.org/anki/fra-eng.zip", None, member="fra.txt")],
    "newstest": [
        RemoteFile(f"{name}.{lang}", _WMT14_DEV, None, member=f"dev/{name}.{lang}")
        for name in NEWSTEST_SETS
        for lang in ("fr", "en")
    ]
    + [
        RemoteFile(f"newsdiscusstest2015.{lang}", _WMT15_TEST, None, _NEWSDISCUSS[lang], sgml=True)
        for lang in "fr en".split()
    ],
    "hansard": [
        RemoteFile(f"{part}.{lang}.gz", _HANSARD.format(*part.split(".")), None, member=f"*.{lang[0]}.gz")
        for part in HANSARD_PARTS
        for lang in ("fr", "en")
    ],
    "europarl": [
        RemoteFile(f"europarl-v7.fr-en.{lang}.xz", _EUROPARL, None, member=f"europarl-v7.fr-en.{lang}")
        for lang in ("fr", "en")
    ],
    "pydocs_fr": [
        RemoteFile(
            f"{_PYDOCS}.tar.gz",
            f"https://github.com/python/python-docs-fr/archive/{_PYDOCS.rsplit('-', 1)[1]}.tar.gz",
            "42baeceb3b0c06c9942307ec9150d3b2799151ca81bc61ec1d64eee2cec2dd79",
        )
    ],
    "djangodocs_fr": [
        RemoteFile(
            f"{_DJANGODOCS}.tar.gz",
            f"https://github.com/django/django-docs-translations/archive/{_DJANGODOCS.rsplit('-', 1)[1]}.tar.gz",
            "37e27b3491e82137e41eba11a804d9f1fb210e9f764be434be9d9fa7fd36ad50",
        )
    ],
    "libreoffice_help": [
        RemoteFile(_LO_HELP.format(lang), DEBIAN_POOL + _LO_HELP.format(lang), sha)
        for lang, sha in _LO_HELP_SHA256.items()
    ],
    "ml_cheatsheets": [
        RemoteFile(
            f"{_CHEATSHEETS}.tar.gz",
            f"https://github.com/shervinea/cheatsheet-translation/archive/{_CHEATSHEETS.rsplit('-', 1)[1]}.tar.gz",
            "cd68ce31c1a09172aa9ed382d3464fe1884c4c86b4ce7fcea491e1510f4d5888",
        )
    ],
}


def data_dir() -> Path:
    return Path(os.environ.get("MT_DATA_DIR", "data"))


def corpus_file(corpus: str, name: str) -> Path:
    """Path of one file of a catalog corpus, fetched on first use."""
    remote = files(corpus)
    for rf in remote:
        if rf.name == name:
            return _ensure(corpus, rf)
    raise UserError(f"corpus '{corpus}' has no file '{name}' (it has: {', '.join(f.name for f in remote)})")


def fetch(corpus: str) -> Path:
    """Make every file of `corpus` present under data/<corpus>/ and return that folder."""
    for rf in files(corpus):
        _ensure(corpus, rf)
    return data_dir() / corpus


def files(corpus: str) -> list[RemoteFile]:
    if corpus not in CORPORA:
        close = difflib.get_close_matches(corpus, CORPORA, n=1)
        hint = f"did you mean '{close[0]}'?" if close else f"known: {', '.join(CORPORA)}"
        raise UserError(f"unknown corpus '{corpus}' ({hint})")
    return CORPORA[corpus]


def _ensure(corpus: str, rf: RemoteFile) -> Path:
    target = data_dir() / corpus / rf.name
    if target.is_file() and target.stat().st_size > 0:
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(target, lambda tmp: _fetch_verified(corpus, rf, Path(tmp), target))
    return target


def _fetch_verified(corpus: str, rf: RemoteFile, tmp: Path, target: Path) -> None:
    """Copy `rf` from the mirror (MT_DATA_MIRROR) or download it into `tmp`, then check it."""
    mirror = os.environ.get("MT_DATA_MIRROR")
    if mirror:
        source = Path(mirror) / corpus / rf.name
        if not source.is_file():
            raise UserError(
                f"MT_DATA_MIRROR is set but {source} does not exist; fix the mirror or unset MT_DATA_MIRROR to download"
            )
        shutil.copyfile(source, tmp)
    else:
        source = rf.url
        _download(rf, tmp, target)
    if tmp.stat().st_size == 0:
        raise UserError(f"{source} is empty; fetch '{corpus}' again or replace the file")
    if rf.sha256:
        got = sha256_of(tmp)
        if got != rf.sha256:
            raise UserError(
                f"{source}: sha256 {got} does not match the expected {rf.sha256}; "
                "the file is corrupt or not the published one, replace it"
            )


def _download(rf: RemoteFile, tmp: Path, target: Path) -> None:
    """Fetch `rf` into `tmp`. An archive is kept beside the corpus (hidden, complete or absent),
    so a corpus of several members downloads it once."""
    if rf.member:
        archive = target.parent / f".{rf.url.rsplit('/', 1)[-1]}"
        if not archive.is_file():
            _fetch_url(rf.url, tmp, target)
            os.replace(tmp, archive)
        opener = lzma.open if rf.name.endswith(".xz") else open  # a name in .xz is kept compressed
        with opener(tmp, "wb") as out:
            out.write(_archive_member(rf, archive))
    else:
        _fetch_url(rf.url, tmp, target)


def _fetch_url(url: str, tmp: Path, target: Path) -> None:
    if url.startswith("debian:"):
        url = debian_mirror() + url.removeprefix("debian:")
    print(f"downloading {url}", flush=True)
    try:
        with urllib.request.urlopen(url, timeout=60) as response, open(tmp, "wb") as out:
            shutil.copyfileobj(response, out, 1 << 20)
    except (urllib.error.URLError, OSError) as e:
        reason = getattr(e, "reason", e)
        raise UserError(
            f"cannot download {url} ({reason}); offline, set MT_DATA_MIRROR to a folder holding "
            f"<corpus>/{target.name} or place the file at {target}"
        ) from None


def debian_mirror() -> str:
    """The Debian archive this machine's apt fetches from (its first URI of Debian's main archive),
    ending in '/'. Its mirrors keep a package's current version only: once the help packages are
    superseded, the mirror folder (MT_DATA_MIRROR) is where they come from."""
    found = []
    for path in sorted(Path("/etc/apt").glob("sources.list.d/*.sources")) + [Path("/etc/apt/sources.list")]:
        text = path.read_text(errors="replace") if path.is_file() else ""
        found += re.findall(r"^URIs:\s*(\S+)", text, re.M) + re.findall(r"^deb\s+(?:\[[^]]*\]\s+)?(\S+)", text, re.M)
    archives = [uri for uri in found if uri.rstrip("/").endswith("/debian")]  # not security, not a third party's
    if not archives:
        raise UserError("no Debian archive is set for apt here; set MT_DATA_MIRROR to a folder holding the packages")
    return archives[0].rstrip("/") + "/"


def _archive_member(rf: RemoteFile, archive: Path) -> bytes:
    """The bytes of `rf.member` inside the downloaded zip or tar archive (of every member matching
    it, in name order, for a glob), as plain lines for SGML."""
    try:
        if zipfile.is_zipfile(archive):
            with zipfile.ZipFile(archive) as z:
                data = b"".join(z.read(name) for name in _matching(z.namelist(), rf.member))
        else:
            with tarfile.open(archive) as t:
                files = [m.name for m in t.getmembers() if m.isfile()]
                data = b"".join(t.extractfile(name).read() for name in _matching(files, rf.member))
    except (zipfile.BadZipFile, tarfile.TarError, KeyError) as e:
        raise UserError(f"{rf.url}: not an archive holding {rf.member} ({e})") from None
    return _sgml_segments(data) if rf.sgml else data


def _matching(names: list[str], member: str) -> list[str]:
    found = sorted(fnmatch.filter(names, member)) if any(c in member for c in "*?[") else [member] * (member in names)
    if not found:
        raise KeyError(member)
    return found


def _sgml_segments(data: bytes) -> bytes:
    """The text of each <seg ...>...</seg> of a WMT SGML file, one a line."""
    segments = re.findall(rb"<seg[^>]*>(.*?)</seg>", data)
    return b"".join(s.strip() + b"\n" for s in segments)
