"""`vanilla-transformer serve`: the real server in a subprocess, real clients over loopback, for both engines; its
answers are the offline `translate` command's."""

import httpx
import pytest
from deep_translator import LibreTranslator
from libretranslatepy import LibreTranslateAPI
from vanilla_transformer.training.tasks.numbers import english

from .conftest import burst, error_of, offline, serving

SENTENCES = [english(n) for n in range(500, 532)]  # 32 sentences the model did not see in training
BEAMS = ("--num-beams", "2")


# the CTranslate2 engine's server (exported on the fly) runs in the slow tier: the fast tier keeps one server
@pytest.fixture(scope="module", params=["torch", pytest.param("ctranslate2", marks=pytest.mark.slow)])
def server(request, trained_folder, exported_folder, tmp_path_factory):
    """The server on the trained model folder: through generate(), or exported to CTranslate2 on the fly."""
    log_dir = tmp_path_factory.mktemp(f"serve-{request.param}")
    flags = ("--engine", request.param, *BEAMS, "--max-chars", "300", "--max-sentence-tokens", "24")
    with serving(trained_folder, *flags, tmp_path=log_dir) as running:
        running.offline_model = trained_folder if request.param == "torch" else exported_folder
        running.engine = request.param
        yield running


def test_the_operators_endpoints_answer(server):
    assert httpx.get(server.url + "/health").json() == {"status": "ok"}
    assert httpx.get(server.url + "/ready").json()["status"] == "ready"
    assert "vanilla_transformer_queue_tokens" in httpx.get(server.url + "/metrics").text


def test_libretranslate_clients_translate_unchanged(server):
    expected = offline(server.offline_model, SENTENCES[:2], *BEAMS)
    client = LibreTranslateAPI(server.url)
    assert client.translate(SENTENCES[0], "en", "de") == expected[0]
    assert client.languages() == [
        {"code": "en", "name": "English", "targets": ["de"]},
        {"code": "de", "name": "German", "targets": []},
    ]
    other = LibreTranslator(source="en", target="de", api_key="unused", custom_url=server.url + "/")
    assert other.translate(SENTENCES[1]) == expected[1]
    assert client.detect(SENTENCES[0]) == [{"confidence": 100.0, "language": "en"}]  # the model's one language
    both = httpx.post(server.url + "/translate", json={"q": SENTENCES[:2], "source": "auto", "target": "de"}).json()
    assert both == {
        "translatedText": expected,
        "detectedLanguage": [{"confidence": 100.0, "language": "en"}] * 2,
    }


def test_32_requests_at_once_are_batched_and_answered_as_offline(server):
    expected = offline(server.offline_model, SENTENCES, *BEAMS)
    batches_before = server.metric("vanilla_transformer_batch_sentences_count")
    answers = burst(server.url, [{"q": s, "source": "en", "target": "de"} for s in SENTENCES])
    assert [a.status_code for a in answers] == [200] * 32
    assert [a.json()["translatedText"] for a in answers] == expected
    assert server.metric("vanilla_transformer_batch_sentences_count") - batches_before < 32  # sentences shared batches


def test_a_document_is_split_into_sentences_and_keeps_its_layout(server):
    sentences = offline(server.offline_model, SENTENCES[:3], *BEAMS)
    text = f"{SENTENCES[0]}. {SENTENCES[1]}!\n\n  {SENTENCES[2]}\n"
    answer = server.post(q=[text, SENTENCES[0]], source="en", target="de").json()
    # the sentences' own punctuation belongs to them: the model translates "x." as it sees fit
    first, second = offline(server.offline_model, [SENTENCES[0] + ".", SENTENCES[1] + "!"], *BEAMS)
    assert answer["translatedText"] == [f"{first} {second}\n\n  {sentences[2]}\n", sentences[0]]


def test_alternatives_are_distinct_and_other_than_the_translation(server):
    answer = server.post(q=SENTENCES[0], source="auto", target="de", alternatives=1).json()
    assert answer["translatedText"] == offline(server.offline_model, SENTENCES[:1], *BEAMS)[0]
    assert answer["detectedLanguage"] == {"confidence": 100.0, "language": "en"}
    assert len(answer["alternatives"]) <= 1 and answer["translatedText"] not in answer["alternatives"]


BAD_REQUESTS = [
    ({"source": "en", "target": "de"}, 400, "missing q parameter"),
    ({"q": "one", "target": "de"}, 400, "missing source parameter"),
    ({"q": "one", "source": "en", "target": "fr"}, 400, 'target "fr": this server translates en -> de only'),
    ({"q": "one", "source": "en", "target": "de", "format": "html"}, 400, 'format "html"'),
    ({"q": "one", "source": "en", "target": "de", "alternatives": 9}, 400, "alternatives 9: expected 0 to 4"),
    ({"q": 7, "source": "en", "target": "de"}, 422, "q: expected a string or a list of strings, got a number"),
    ({"q": "one", "source": "en", "target": "de", "alternatives": "2x"}, 422, "alternatives: expected a whole number"),
    ({"q": "one " * 100, "source": "en", "target": "de"}, 413, "q has 400 characters; this server takes at most 300"),
    ({"q": "one " * 30, "source": "en", "target": "de"}, 413, "the model reads at most 24 tokens a sentence"),
]


@pytest.mark.parametrize("body, status, message", BAD_REQUESTS, ids=[m for _, _, m in BAD_REQUESTS])
def test_bad_input_gets_its_status_and_an_error_naming_the_field(server, body, status, message):
    response = server.post(**body)
    assert response.status_code == status and message in error_of(response)
    assert server.post(q="one", source="en", target="de").status_code == 200  # and the server goes on


def test_a_malformed_body_and_an_unknown_path_get_json_errors(server):
    broken = httpx.post(
        server.url + "/translate", content=b'{"q": "one",', headers={"content-type": "application/json"}
    )
    assert broken.status_code == 400 and "the body is not valid JSON" in error_of(broken)
    assert httpx.get(server.url + "/nowhere").status_code == 404
    form = httpx.post(server.url + "/translate", data={"q": SENTENCES[0], "source": "en", "target": "de"})
    assert form.json()["translatedText"] == offline(server.offline_model, SENTENCES[:1], *BEAMS)[0]


def offline_scores(model, sources: list[str], targets: list[str]) -> list[dict]:
    from vanilla_transformer.inference.translators import load_translator

    return [pair.as_dict() for pair in load_translator(str(model)).score(sources, targets)]


def test_scores_are_the_offline_scores_pair_for_pair(server):
    sources, targets = SENTENCES[:3], offline(server.offline_model, SENTENCES[:3], *BEAMS)
    targets[2] = targets[0]  # a wrong translation is scored too
    expected = offline_scores(server.offline_model, sources, targets)
    found = httpx.post(server.url + "/score", json={"q": sources, "translation": targets}).json()["scores"]
    for answer, offline_answer in zip(found, expected):
        assert answer["tokens"] == offline_answer["tokens"]
        assert answer["token_log_probs"] == pytest.approx(offline_answer["token_log_probs"], abs=1e-5)
    one = httpx.post(server.url + "/score", json={"q": sources[0], "translation": targets[0]}).json()["scores"]
    assert one["log_prob"] == pytest.approx(expected[0]["log_prob"], abs=1e-4)
    assert server.metric('vanilla_transformer_requests_total{endpoint="/score",status="200"}') >= 2


BAD_SCORE_REQUESTS = [
    ({"q": "one"}, 400, "missing translation parameter"),
    ({"q": ["one", "two"], "translation": ["eins"]}, 422, "two lists of one length"),
    ({"q": "one", "translation": 5}, 422, "translation: expected a string or a list of strings"),
    ({"q": "one " * 60, "translation": "eins " * 60}, 413, "at most 300"),
    ({"q": "one", "translation": "eins " * 30}, 413, "translation: item 1 has"),
]


@pytest.mark.parametrize("body, status, message", BAD_SCORE_REQUESTS, ids=[m for _, _, m in BAD_SCORE_REQUESTS])
def test_a_bad_score_request_gets_its_status_and_an_error_naming_the_field(server, body, status, message):
    response = httpx.post(server.url + "/score", json=body)
    assert response.status_code == status and message in error_of(response)


def offline_with_terms(model, sentences: list[str], terms: list[list[str]], tmp_path) -> list[str]:
    (tmp_path / "terms.txt").write_text("".join("\t".join(row) + "\n" for row in terms), encoding="utf-8")
    return offline(model, sentences, *BEAMS, "--constraints-file", str(tmp_path / "terms.txt"), per_line=True)


def test_terms_are_in_the_translations_as_offline(server, tmp_path):
    terms = [["sieben"], ["acht", "neun"], []]
    if server.engine == "ctranslate2":
        answer = server.post(q=SENTENCES[0], source="en", target="de", terms=["sieben"])
        assert answer.status_code == 400 and "no lexically constrained search" in error_of(answer)
        return
    expected = offline_with_terms(server.offline_model, SENTENCES[:3], terms, tmp_path)
    answer = server.post(q=SENTENCES[:3], source="en", target="de", terms=terms).json()
    assert answer["translatedText"] == expected
    assert "sieben" in expected[0] and "acht" in expected[1] and "neun" in expected[1]
    one = server.post(q=SENTENCES[0], source="en", target="de", terms=["sieben"]).json()
    assert one["translatedText"] == expected[0]


BAD_TERMS = [
    ({"terms": 7}, 422, "terms: expected a list of strings"),
    ({"terms": [["sieben"]]}, 422, "terms: expected a list of strings"),
    ({"terms": ["€€"]}, 422, "terms: sentence 1: the term '€€' has a token the target vocabulary lacks"),
    # a special token's text is text (characters this vocabulary lacks), not the token, which no search writes
    ({"terms": ["<pad>"]}, 422, "terms: sentence 1: the term '<pad>' has a token the target vocabulary lacks (<unk>)"),
    ({"terms": ["acht</s>"]}, 422, "terms: sentence 1: the term 'acht</s>' has a token the target vocabulary lacks"),
    ({"terms": ["sieben"] * 60}, 413, "q and terms have "),  # terms count in --max-chars
]


@pytest.mark.parametrize("fields, status, message", BAD_TERMS, ids=[m for _, _, m in BAD_TERMS])
def test_bad_terms_get_their_status_and_an_error_naming_them(server, fields, status, message):
    if server.engine == "ctranslate2" and status == 422 and message.startswith("terms: sentence"):
        status, message = 400, "no lexically constrained search"  # well-formed terms: the engine refuses them all
    response = server.post(q=SENTENCES[0], source="en", target="de", **fields)
    assert response.status_code == status and message in error_of(response)


def test_an_address_the_server_cannot_listen_on_is_named_before_the_model_loads(capsys):
    import socket

    from tests.documents import EXAMPLE_MODEL
    from vanilla_transformer.cli import main

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert main(["serve", str(EXAMPLE_MODEL), "--port", str(port)]) == 2
        error = capsys.readouterr().err
        assert error == f"error: --host 127.0.0.1 --port {port}: cannot listen there: Address already in use\n"
    assert main(["serve", str(EXAMPLE_MODEL), "--host", "no-such-host.invalid"]) == 2
    error = capsys.readouterr().err
    assert error.startswith("error: --host no-such-host.invalid: ") and len(error.splitlines()) == 1
