"""LibreTranslate's API on mt.serve, driven by a real client (libretranslatepy) and by plain HTTP
as LibreTranslate's own server answers: two language pairs on one server, detection, keys, rates,
form data, CORS and files."""

import shutil
import urllib.error

import pytest
from test_serve import start_server, stop

httpx = pytest.importorskip("httpx", reason="the dev extra is not installed (pip install -e '.[dev]')")
pytest.importorskip("fastapi", reason="the serve extra is not installed (pip install 'mt[serve]'); .ci/run installs it")
libretranslatepy = pytest.importorskip(
    "libretranslatepy", reason="the dev extra is not installed (pip install -e '.[dev]')"
)

KEYS = ["good-key", "burst-key", "texts-key"]
RATE = 40  # requests a minute a client; the burst test goes past it with a key of its own


def relabelled(run_dir, folder, source, target):
    """A copy of a run that says it translates `source` to `target`: a second pair for the server."""
    from mt.checkpoint import load_checkpoint, save_checkpoint

    shutil.copytree(run_dir, folder, ignore=shutil.ignore_patterns("last.pt"))
    ckpt = load_checkpoint(folder / "best.pt")
    ckpt["config"]["data"] |= {"src_lang": source, "tgt_lang": target}
    save_checkpoint(folder / "best.pt", ckpt)
    return folder


@pytest.fixture(scope="module")
def server(run_dir, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("libretranslate")
    (tmp / "keys").write_text("# one key a line\n" + "\n".join(KEYS) + "\n")
    (tmp / "terms.tsv").write_text("homme\tboss\n")  # the server's glossary: no other test translates "homme"
    en_de = relabelled(run_dir, tmp / "en_de", "en", "de")
    proc, url = start_server(
        run_dir, "--pair", str(en_de), "--api-keys", str(tmp / "keys"), "--rate-limit", str(RATE),
        "--glossary", str(tmp / "terms.tsv"),
    )  # fmt: skip
    yield url
    stop(proc)


def client(url, key="good-key"):
    return libretranslatepy.LibreTranslateAPI(url + "/", api_key=key)


def test_a_libretranslate_client_translates_detects_and_lists_the_pairs(server):
    lt = client(server)
    assert lt.translate("le chat noir", "fr", "en") == "the black cat"
    assert lt.translate("le chien blanc", "auto", "en") == "the white dog"
    assert lt.detect("Le chat est noir et le chien est blanc.")[0] == {"confidence": 100.0, "language": "fr"}
    languages = {item["code"]: item for item in lt.languages()}
    assert languages["fr"] == {"code": "fr", "name": "French", "targets": ["en", "fr"]}
    assert languages["en"]["targets"] == ["de", "en"] and languages["de"]["name"] == "German"


def test_each_translation_says_its_confidence_in_a_field_clients_pass_over(server):
    sent = post(server, json={"q": ["le chat noir", "le chien blanc"], "source": "fr", "target": "en",
                              "api_key": "good-key"})  # fmt: skip
    answer = sent.json()
    assert answer["translatedText"] == ["the black cat", "the white dog"]
    assert len(answer["confidence"]) == 2 and all(0.0 <= c <= 1.0 for c in answer["confidence"])
    one = post(server, json={"q": "le chat noir", "source": "fr", "target": "en", "api_key": "good-key"}).json()
    assert one["confidence"] == answer["confidence"][0]


def test_a_wrong_key_a_missing_key_and_an_unknown_pair_are_refused(server):
    with pytest.raises(urllib.error.HTTPError) as wrong:
        client(server, "bad-key").translate("le chat noir", "fr", "en")
    assert wrong.value.code == 403
    with pytest.raises(urllib.error.HTTPError) as missing:
        client(server, None).translate("le chat noir", "fr", "en")
    assert missing.value.code == 400
    with pytest.raises(urllib.error.HTTPError) as unknown:
        client(server).translate("le chat noir", "fr", "de")
    assert unknown.value.code == 400
    body = httpx.post(f"{server}/translate", json={"q": "x", "source": "fr", "target": "de", "api_key": "good-key"})
    assert body.status_code == 400 and "this server translates fr->en, en->de" in body.json()["error"]


def post(url, path="/translate", **kw):
    return httpx.post(url + path, timeout=30, **kw)


def test_a_list_is_translated_and_detected_item_by_item(server):
    answer = post(server, json={"q": ["le chat noir", "The dog.", "le chien blanc"], "source": "auto", "target": "en",
                                "api_key": "good-key", "alternatives": 2})  # fmt: skip
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert body["translatedText"][0] == "the black cat" and body["translatedText"][1] == "The dog."  # en -> en
    assert [d["language"] for d in body["detectedLanguage"]] == ["fr", "en", "fr"]
    assert all(0 <= d["confidence"] <= 100 for d in body["detectedLanguage"])
    assert len(body["alternatives"]) == 3 and body["alternatives"][0]  # the first text has some
    assert all(a and a != "the black cat" for a in body["alternatives"][0])


def test_detecting_a_list_answers_one_list_for_the_batch_as_libretranslate_does(server):
    texts = ["Le chat est noir et le chien est blanc.", "La femme mange une pomme rouge.", "The dog."]
    detected = post(server, "/detect", json={"q": texts, "api_key": "good-key"})
    assert detected.status_code == 200, detected.text
    found = detected.json()
    assert all(set(d) == {"confidence", "language"} for d in found)  # candidates, not a list per text
    assert [d["language"] for d in found] == ["fr", "en"] and found[0]["confidence"] > found[1]["confidence"]
    single = post(server, "/detect", json={"q": texts[0], "api_key": "good-key"}).json()
    assert single[0] == {"confidence": 100.0, "language": "fr"}


def test_json_form_data_and_the_query_string_are_all_read_and_cors_is_open(server):
    fields = {"q": "le chat noir", "source": "fr", "target": "en", "api_key": "good-key"}
    for sent in (post(server, json=fields), post(server, data=fields), post(server, files={"x": ("", "")}, data=fields),
                 post(server, params=fields)):  # fmt: skip
        assert sent.status_code == 200 and sent.json()["translatedText"] == "the black cat", sent.text
        assert set(sent.json()) == {"translatedText", "confidence"}
        assert sent.headers["access-control-allow-origin"] == "*"
    refused = post(server, json={"source": "fr", "target": "en", "api_key": "good-key"})
    assert refused.status_code == 400 and refused.json() == {"error": "Invalid request: missing q parameter"}
    assert refused.headers["access-control-allow-methods"] == "GET, POST"
    preflight = httpx.options(f"{server}/translate", headers={"Origin": "https://example.org"})
    assert (
        preflight.status_code == 200
        and preflight.headers["access-control-allow-headers"] == "Authorization, Content-Type"
    )


@pytest.mark.parametrize(
    "fields, status, message",
    [
        ({"source": "fr", "target": "en"}, 400, "Invalid request: missing q parameter"),
        ({"q": "x", "target": "en"}, 400, "Invalid request: missing source parameter"),
        ({"q": "x", "source": "fr"}, 400, "Invalid request: missing target parameter"),
        ({"q": "x", "source": "xx", "target": "en"}, 400, "xx is not supported"),
        ({"q": "x", "source": "fr", "target": "zz"}, 400, "zz is not supported"),
        ({"q": "x", "source": "fr", "target": "en", "format": "xml"}, 400, "xml format is not supported"),
        (
            {"q": "x", "source": "fr", "target": "en", "alternatives": "many"},
            400,
            "alternatives parameter is not a number",
        ),
        ({"q": "x" * 3000, "source": "fr", "target": "en"}, 400, "the limit is 2000 (--max-chars)"),
        ({"q": [1, 2], "source": "fr", "target": "en"}, 400, "must be strings"),
    ],
)
def test_errors_are_said_as_libretranslate_says_them(server, fields, status, message):
    answer = post(server, json=fields | {"api_key": "good-key"})
    assert answer.status_code == status and message in answer.json()["error"], answer.text


def test_settings_files_and_the_mt_api_on_the_same_server(server):
    settings = httpx.get(f"{server}/frontend/settings").json()
    assert settings["apiKeys"] and settings["keyRequired"] and ".docx" in settings["supportedFilesFormat"]
    sent = post(server, "/translate_file", files={"file": ("page.html", "<p>le chat noir</p>")},
                data={"source": "fr", "target": "en", "api_key": "good-key"})  # fmt: skip
    assert sent.status_code == 200, sent.text
    fetched = httpx.get(sent.json()["translatedFileUrl"])
    assert (
        fetched.text == "<p>the black cat</p>" and 'filename="page_en.html"' in fetched.headers["content-disposition"]
    )
    odd = post(
        server,
        "/translate_file",
        files={"file": ("data.xyz", "x")},
        data={"source": "fr", "target": "en", "api_key": "good-key"},
    )
    assert odd.status_code == 400 and odd.json()["error"] == "Invalid request: file format not supported"
    assert httpx.get(f"{server}/download_file/0123456789abcdef0123456789abcdef.nothing.html").status_code == 400
    mt = post(server, json={"text": ["le chat noir"], "beam": 1, "api_key": "good-key"})
    assert mt.status_code == 200 and mt.json()["translations"] == ["the black cat"]
    assert post(server, json={"text": ["le chat noir"]}).status_code == 400  # keys hold for mt's own API too
    info = httpx.get(f"{server}/info").json()
    assert info["api_key_required"]  # the page then asks for one
    assert [(p["source_language"], p["target_language"]) for p in info["pairs"]] == [("fr", "en"), ("en", "de")]


def test_a_client_past_the_rate_limit_is_told_to_slow_down(server):
    answers = [
        post(server, "/detect", json={"q": "le chat", "api_key": "burst-key"}).status_code for _ in range(RATE + 2)
    ]
    assert answers[:RATE] == [200] * RATE and answers[RATE:] == [429, 429]
    assert (
        post(server, "/detect", json={"q": "le chat", "api_key": "burst-key"}).json()["error"]
        == f"Slowdown: {RATE} per 1 minute"
    )


def test_both_apis_take_a_glossary_over_the_servers_own(server):
    """The server's glossary ("homme" -> "boss") holds for every request; a request's own terms add to it."""
    key = {"api_key": "good-key"}
    own = post(server, json={"text": ["le homme rouge", "le chat noir"], "glossary": [["chat", "dog"]]} | key)
    assert own.status_code == 200, own.text
    first, second = (set(t.split()) for t in own.json()["translations"])
    assert "boss" in first and "dog" in second and own.json()["options"]["glossary"] == {"terms": 2}
    lt = post(server, data={"q": "le chat noir", "source": "fr", "target": "en", "glossary": '[["chat", "dog"]]'} | key)
    assert lt.status_code == 200 and "dog" in lt.json()["translatedText"].split(), lt.text
    bad = post(server, json={"text": "x", "glossary": [["chat"]]} | key)
    assert bad.status_code == 422 and "glossary entry 1" in bad.json()["error"]
    refused = post(server, json={"q": "x", "source": "fr", "target": "en", "glossary": "[[1, 2]]"} | key)
    assert refused.status_code == 400 and "glossary" in refused.json()["error"]


def test_both_apis_charge_the_rate_limit_a_text_at_a_time(server):
    """40 texts a minute for this key: 30 in one request of mt's API, then 11 more in LibreTranslate's
    are over it, and 10 are not."""
    key = {"api_key": "texts-key"}
    mt = post(server, json={"text": ["le chat noir"] * 30, "beam": 1} | key)
    assert mt.status_code == 200, mt.text
    over = post(server, json={"q": ["le chat noir"] * 11, "source": "fr", "target": "en"} | key)
    assert over.status_code == 429 and over.json()["error"] == f"Slowdown: {RATE} per 1 minute"
    within = post(server, json={"q": ["le chat noir"] * 10, "source": "fr", "target": "en"} | key)
    assert within.status_code == 200 and within.json()["translatedText"] == ["the black cat"] * 10
    assert post(server, json={"text": "le chat noir"} | key).status_code == 429


def test_a_download_name_or_a_link_that_leaves_the_folder_is_refused(tmp_path):
    from types import SimpleNamespace

    from mt.serving.libretranslate import download
    from mt.serving.requests import Limits, Refused
    from mt.serving.service import Service

    service = Service([], SimpleNamespace(), Limits())
    (tmp_path / "secret.txt").write_text("not for download")
    served = "0123456789abcdef0123456789abcdef.page_en.html"
    (service.downloads() / served).write_text("<p>the black cat</p>")
    link = "fedcba9876543210fedcba9876543210.secret.txt"  # a well-formed name, pointing out of the folder
    (service.downloads() / link).symlink_to(tmp_path / "secret.txt")
    assert download(service, served).path.name == served  # the name alone passes
    for name in ("../../etc/passwd", "..", "0123456789abcdef0123456789abcdef.x/../../y", "/etc/passwd", link):
        with pytest.raises(Refused) as refused:
            download(service, name)
        assert refused.value.status == 400


def test_the_operators_max_depth_holds_on_libretranslates_api_too():
    """A body nested 20 deep is LibreTranslate's on a server with --max-depth 40 (the class default is 16)."""
    from types import SimpleNamespace

    from mt.serving.libretranslate import _glossary, speaks_libretranslate
    from mt.serving.requests import Limits, Refused

    deep = '{"q": "x", "source": "fr", "target": "en", "x": ' + "[" * 19 + "]" * 19 + "}"
    request = SimpleNamespace(headers={"content-type": "application/json"}, query_params={})
    assert speaks_libretranslate(request, deep.encode(), Limits(max_depth=40))
    assert not speaks_libretranslate(request, deep.encode(), Limits(max_depth=16))
    nested = "[" * 20 + "]" * 20
    with pytest.raises(Refused, match="nested too deeply"):
        _glossary(None, nested, Limits(max_depth=16))
    with pytest.raises(Refused, match="glossary entry 1"):
        _glossary(None, nested, Limits(max_depth=40))  # read, then refused for what it is


def test_a_form_that_repeats_q_gets_every_text_translated(server):
    """A form (as a browser or curl -d sends it) with q twice: a list back, as for a JSON list; any
    other field given twice is refused, never one of its values dropped."""
    from urllib.parse import urlencode

    def form(pairs):
        return post(server, content=urlencode(pairs), headers={"content-type": "application/x-www-form-urlencoded"})

    fields = [
        ("q", "le chat noir"),
        ("q", "le chien blanc"),
        ("source", "fr"),
        ("target", "en"),
        ("api_key", "good-key"),
    ]
    sent = form(fields)
    assert sent.status_code == 200 and sent.json()["translatedText"] == ["the black cat", "the white dog"], sent.text
    twice = form([*fields, ("target", "de")])
    assert twice.status_code == 400 and "target is given 2 times" in twice.json()["error"], twice.text


def test_texts_are_sized_before_any_is_detected_or_tokenized(monkeypatch):
    """Too many texts, or too many characters, are refused before detection or the tokenizing for
    alternatives touch them; /detect is sized the same way."""
    import asyncio
    import json

    from starlette.requests import Request
    from test_serve import stub_service

    from mt.serving import libretranslate
    from mt.serving.requests import Limits, Refused

    def untouched(*args, **kwargs):
        raise AssertionError("detected before the texts were sized")

    monkeypatch.setattr(libretranslate, "detect_ranked", untouched)
    monkeypatch.setattr(libretranslate, "_detected", untouched)
    limits = Limits(max_sentences=4, max_chars=50)
    service = stub_service(limits)
    service.pairs[("fr", "en")].translator.tokenizer.encode_batch = untouched
    scope = {"type": "http", "method": "POST", "path": "/translate", "query_string": b"", "client": ("10.0.0.1", 1),
             "headers": [(b"content-type", b"application/json")]}  # fmt: skip
    bodies = [
        {"q": ["un"] * 5, "source": "auto", "target": "en", "alternatives": 1},
        {"q": ["x" * 300, "y"], "source": "auto", "target": "en", "alternatives": 1},
    ]
    for body in bodies:
        for route in (libretranslate.translate, libretranslate.detect):
            with pytest.raises(Refused, match="--max-") as refused:
                asyncio.run(route(service, Request(scope), json.dumps(body).encode(), limits))
            assert refused.value.status == 413
