"""The web page in a real headless browser (Debian's Chromium, driven by Selenium through Debian's
chromedriver): type a sentence, press Translate, read the translation off the page, screenshot it;
then choose a web page file and get it back translated."""

import shutil

import pytest

pytest.importorskip("fastapi", reason="the serve extra is not installed (pip install 'mt[serve]'); .ci/run installs it")
webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is not installed (pip install -e '.[dev]')")
from test_serve import start_server, stop  # noqa: E402

CHROMIUM, CHROMEDRIVER = shutil.which("chromium"), shutil.which("chromedriver")
if not (CHROMIUM and CHROMEDRIVER):
    pytest.skip(
        "Chromium is not installed: apt-get install chromium chromium-driver (.ci/run does this)",
        allow_module_level=True,
    )


def browser(tmp_path):
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        f"--user-data-dir={tmp_path / 'profile'}",
        "--window-size=900,700",
    ):
        options.add_argument(flag)
    return webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)


def test_translate_from_the_page(run_dir, tmp_path):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    proc, url = start_server(run_dir)
    driver = browser(tmp_path)
    try:
        driver.get(url + "/")
        wait = WebDriverWait(driver, 60)  # Chromium and a decode on a loaded CI machine
        wait.until(lambda d: "fr → en" in d.find_element(By.ID, "about").text)
        source = driver.find_element(By.ID, "source")
        source.clear()
        source.send_keys("le chat noir\nle chien blanc")
        driver.find_element(By.CSS_SELECTOR, "input[value=greedy]").click()
        driver.find_element(By.ID, "translate").click()
        wait.until(lambda d: d.find_element(By.ID, "output").text.strip())
        lines = driver.find_elements(By.CSS_SELECTOR, "#output > div")  # each: its confidence, then its words
        assert [line.text.split(None, 1)[1] for line in lines] == ["the black cat", "the white dog"]
        assert all(0.0 <= float(line.find_element(By.CLASS_NAME, "sure").text) <= 1.0 for line in lines)
        words = lines[0].find_elements(By.CSS_SELECTOR, "span[title], mark[title]")
        assert [w.text for w in words] == ["the", "black", "cat"]
        assert all(w.get_attribute("title").startswith("confidence ") for w in words)
        assert driver.find_element(By.ID, "legend").is_displayed()
        assert driver.find_element(By.ID, "timing").text.startswith("greedy: decoded in")
        assert driver.find_element(By.ID, "error").text == ""
        shot = tmp_path / "page.png"
        driver.save_screenshot(str(shot))
        assert shot.read_bytes()[:4] == b"\x89PNG" and shot.stat().st_size > 10_000
        translate_a_file(driver, wait, tmp_path)
    finally:
        driver.quit()
        stop(proc)


def translate_a_file(driver, wait, tmp_path):
    """Choose a file, press Translate file, and read the file the download link holds."""
    from selenium.webdriver.common.by import By

    page = tmp_path / "chat.html"
    page.write_text("<p>le <b>chat</b> noir</p>")
    driver.find_element(By.ID, "file").send_keys(str(page))
    driver.find_element(By.ID, "translate-file").click()
    wait.until(lambda d: d.find_element(By.ID, "download").is_displayed())
    link = driver.find_element(By.ID, "download")
    assert link.get_attribute("download") == "chat.en.html" and driver.find_element(
        By.ID, "file-status"
    ).text.startswith("translated in")
    fetched = driver.execute_async_script(
        "fetch(arguments[0]).then(r => r.text()).then(arguments[1])", link.get_attribute("href")
    )
    assert fetched == "<p>the black <b>cat</b></p>"
