"""The demo in a real browser: `vanilla-transformer demo` serves the model that the README's first command trains,
and headless Chromium (the distribution's: apt-get install chromium chromium-driver) drives the page with selenium as
a learner would.

With DEMO_SCREENSHOTS=FOLDER set, the screenshots are also written there (docs/inside.md's come from this test).

Without Chromium and its driver the test is skipped, with that reason, unless VANILLA_TRANSFORMER_BROWSER_TEST is
`required`: `.ci/run` installs both and sets it, so that CI always runs the test and fails where it cannot.
"""

import os
import shutil
import time

import pytest
from selenium import webdriver
from selenium.webdriver.chrome.options import Options
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.support import expected_conditions as EC
from selenium.webdriver.support.ui import WebDriverWait

from tests.apps import serving
from tests.documents import CLI
from vanilla_transformer.demo.app import EMPTY_INPUT

MISSING_BROWSER = "the browser test needs Chromium and its driver: apt-get install chromium chromium-driver"
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMEDRIVER = shutil.which("chromedriver")
REQUIRED = os.environ.get("VANILLA_TRANSFORMER_BROWSER_TEST") == "required"

pytestmark = pytest.mark.skipif(
    not (CHROMIUM and CHROMEDRIVER) and not REQUIRED, reason=f"{MISSING_BROWSER} (.ci/run installs them)"
)


@pytest.fixture(scope="module")
def app_url(first_run):
    with serving(CLI + ["demo", "--model", "runs/numbers-en-de", "--port", "{port}"], cwd=first_run) as url:
        yield url


@pytest.fixture(scope="module")
def browser():
    if not (CHROMIUM and CHROMEDRIVER):  # only where the test is required
        pytest.fail(MISSING_BROWSER)
    options = Options()
    options.binary_location = CHROMIUM
    for flag in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1280,1600"):
        options.add_argument(flag)
    session = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    yield session
    session.quit()


def screenshot(browser, tmp_path, name: str) -> None:
    """A full-page screenshot: in tmp_path, and in DEMO_SCREENSHOTS when set."""
    height = 0
    while height != browser.execute_script("return document.body.scrollHeight"):  # until the page has settled
        height = browser.execute_script("return document.body.scrollHeight")
        frame = browser.execute_script("return window.outerHeight - window.innerHeight")
        browser.set_window_size(1280, min(max(height, 900), 4000) + frame)
        time.sleep(0.5)
    path = tmp_path / name
    assert browser.save_screenshot(str(path))
    if os.environ.get("DEMO_SCREENSHOTS"):
        shutil.copy(path, os.path.join(os.environ["DEMO_SCREENSHOTS"], name))
    browser.set_window_size(1280, 1600)


def shown_image(browser, element_id: str, timeout: float = 60):
    """The element's <img>, once the browser has loaded and decoded a picture into it."""
    wait = WebDriverWait(browser, timeout)
    image = wait.until(EC.presence_of_element_located((By.CSS_SELECTOR, f"#{element_id} img")))
    wait.until(lambda _: browser.execute_script("return arguments[0].complete && arguments[0].naturalWidth", image))
    return image


def type_and_translate(browser, sentence: str):
    """Replace the source text as a person does (select all, type; the page sees each key) and press Translate."""
    box = WebDriverWait(browser, 120).until(EC.element_to_be_clickable((By.CSS_SELECTOR, "#source textarea")))
    box.send_keys(Keys.CONTROL, "a")
    box.send_keys(Keys.BACKSPACE)
    if sentence:
        box.send_keys(sentence)
    browser.find_element(By.ID, "translate").click()


def translation(browser) -> str:
    return browser.find_element(By.CSS_SELECTOR, "#translation textarea").get_attribute("value")


def translated(browser, expected_change_from: str = "") -> str:
    WebDriverWait(browser, 120).until(lambda _: translation(browser) not in ("", expected_change_from))
    return translation(browser)


def test_a_learner_translates_and_follows_the_sentence_through_attention_and_the_layers(app_url, browser, tmp_path):
    browser.get(app_url)
    type_and_translate(browser, "forty-two")
    assert translated(browser) == "zweiundvierzig"  # the README's first translate example
    assert "zweiundvierzig" in browser.find_element(By.ID, "nbest").text
    assert browser.find_element(By.ID, "timing").text.startswith("Translated in ")
    type_and_translate(browser, "forty-two thousand six hundred nineteen")  # the attention example of docs/inside.md
    assert translated(browser, "zweiundvierzig") == "zweiundvierzigtausendsechshundertneunzehn"
    shown_image(browser, "alignment")
    shown_image(browser, "attention")
    screenshot(browser, tmp_path, "demo.png")
    next(tab for tab in browser.find_elements(By.CSS_SELECTOR, "button[role=tab]") if "layers" in tab.text).click()
    for element_id in ("embeddings", "sublayer", "add-norm", "ffn"):
        shown_image(browser, element_id)
    softmax = browser.find_element(By.ID, "softmax").text
    assert "</s>" in softmax and "token produced" in softmax
    screenshot(browser, tmp_path, "demo_layers.png")


def test_an_empty_input_gets_a_message_not_a_stack_trace(app_url, browser):
    browser.get(app_url)
    type_and_translate(browser, "forty-two")
    assert translated(browser) == "zweiundvierzig"
    type_and_translate(browser, "")
    WebDriverWait(browser, 60).until(lambda _: EMPTY_INPUT in browser.find_element(By.TAG_NAME, "body").text)
    page = browser.find_element(By.TAG_NAME, "body").text
    assert "Traceback" not in page and "gradio.exceptions" not in page
    assert translation(browser) == "zweiundvierzig"  # the last translation stays
