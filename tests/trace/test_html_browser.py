"""The HTML view in a real headless Chromium (selenium + Debian's chromium / chromium-driver): the
page renders offline, every highlight links to an entry on the page, and that entry lists the
documents holding the span's tokens at the offsets it names, their excerpts marking its text.

Skipped where Chromium, its driver or selenium is missing (`apt-get install chromium
chromium-driver`, about 440 MB; .ci/run installs them when it runs as root with apt)."""
from __future__ import annotations

import os
import shutil
from urllib.parse import urldefrag

import pytest

from infinigram_hf import trace

from hf_tiny import TEXTS, tiny_index, tiny_tok  # noqa: F401

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
DRIVER = shutil.which("chromedriver")
pytestmark = pytest.mark.skipif(not (CHROMIUM and DRIVER),
                                reason="no chromium / chromedriver (apt-get install chromium chromium-driver)")
# No background traffic: no DNS look-ups, component updates or sync (docs: /work/notes/infra §4).
QUIET = ("--disable-background-networking", "--disable-component-update", "--disable-sync", "--disable-default-apps",
         "--no-first-run", "--no-pings", "--disable-domain-reliability",
         "--host-resolver-rules=MAP * ~NOTFOUND , EXCLUDE localhost")


@pytest.fixture(scope="module")
def browser():
    webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is not installed (pip install selenium)")
    from selenium.webdriver.chrome.service import Service

    os.environ.setdefault("SE_OFFLINE", "true")  # Selenium Manager must never download anything
    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for a in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--window-size=1000,800",
              *QUIET):
        opts.add_argument(a)
    # the browser is no part of the package: not under the sanitized suite's ASan preload
    env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
    d = webdriver.Chrome(service=Service(DRIVER, env=env), options=opts)
    d.set_page_load_timeout(30)
    yield d
    d.quit()


def test_page_renders_and_links_resolve_to_the_documents(browser, tiny_tok, tiny_index, tmp_path):
    from selenium.webdriver.common.by import By

    text = (" zebra quux plugh " + TEXTS[0][300:420] + " xyzzy frobnicate " + TEXTS[2][100:180]
            + " <b>not markup</b> " + TEXTS[1][50:90])
    ids = tiny_tok.encode(text)
    t = trace(ids, tiny_index, tiny_tok, min_len=4, stop_at_eos=False)
    assert len(t.spans) >= 3
    page = tmp_path / "trace.html"
    t.to_html(page)
    browser.get(page.as_uri())
    assert browser.title == "Tracing outputs to the corpus"
    assert browser.find_elements(By.TAG_NAME, "b") == []  # "<b>" of the text stayed text
    links = browser.find_elements(By.CSS_SELECTOR, "div.text a.span")
    assert len(links) >= 3 and {int(a.get_attribute("data-rank")) for a in links} <= set(range(len(t.spans)))
    ranked = t.attribution.ranked()
    for a in links:
        url, frag = urldefrag(a.get_attribute("href"))
        assert url == page.as_uri()
        entry = browser.find_element(By.ID, frag)  # raises when the link dangles
        span = ranked[int(a.get_attribute("data-rank"))]
        assert (int(entry.get_attribute("data-start")), int(entry.get_attribute("data-end"))) == (span.start, span.end)
        docs = entry.find_elements(By.CSS_SELECTOR, "li.doc")
        assert len(docs) == min(span.count, 5)
        want = ids[span.start:span.end]
        for d in docs:
            doc_id, off = int(d.get_attribute("data-doc-id")), int(d.get_attribute("data-offset"))
            assert tiny_index.get_doc(doc_id).token_ids[off:off + len(want)].tolist() == want
            mark = d.find_element(By.TAG_NAME, "mark").get_attribute("textContent")
            assert mark == tiny_tok.decode(want)
    links[0].click()
    target = browser.execute_script("return document.querySelector(':target').id")
    assert target == urldefrag(links[0].get_attribute("href"))[1]
    assert browser.find_element(By.ID, target).is_displayed()
    png = tmp_path / "shot.png"
    assert browser.save_screenshot(str(png)) and png.stat().st_size > 1000
