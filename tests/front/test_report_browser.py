"""`dynstep report`'s page in headless Chromium: no console error, no request but its own file,
the plots of a recorded two-step GPT training run, the first NaN of a planted-NaN run, a
10,000-hit recording that pages, sorts and filters, and no script from user strings ever running.
How fast the big page is ready is measured by bench/report_open.py, not asserted here.

One browser for the module; skipped when Chromium is not installed (apt-get install -y chromium).
"""

from __future__ import annotations


import pytest
import torch

import dynstep
from dynstep.front.cli import main
from dynstep.front.demo.model import make

from . import chromium, synthetic
from .test_report_cli import EVIL_LINE, EVIL_MODULE, evil_recording

pytestmark = pytest.mark.skipif(chromium.find() is None, reason="no chromium (apt-get install -y chromium)")
PROBES = ["module:blocks.*.attn", "module:blocks.*.mlp"]


@pytest.fixture(scope="module")
def browser():
    with chromium.Chromium() as b:
        yield b


def train(path, steps=2, nan_at=None, actions="summary"):
    """A TinyGPT training run recorded through superstep (aot_eager), gradients included."""
    torch._dynamo.reset()   # fresh sites: this recording's calls count from 0
    model, idx = make(seed=0, layers=2)
    opt = torch.optim.SGD(model.parameters(), lr=1e-2)
    compiled = torch.compile(model, backend="superstep", options={"inner": "aot_eager", "probe": PROBES, "grads": True,
                                                                 "actions": actions})
    with dynstep.session(path=path):
        for step in range(steps):
            if step == nan_at:
                with torch.no_grad():
                    model.blocks[1].mlp.fc.weight[0, 0] = float("nan")
            loss = compiled(idx).logsumexp(-1).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
    return path


def page_of(recording, out):
    assert main(["report", str(recording), "-o", str(out)]) == 0
    return out


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("runs")
    return {"train": page_of(train(tmp / "train.dynstep"), tmp / "train.html"),
            "nan": page_of(train(tmp / "nan.dynstep", steps=3, nan_at=1, actions="record"), tmp / "nan.html")}


def assert_offline_and_clean(page, path):
    assert page.errors == []
    assert page.remote == [] and page.requests == [path.resolve().as_uri()]


def test_the_training_runs_page_shows_values_and_gradients_per_module(browser, runs):
    page = browser.open(runs["train"])
    assert_offline_and_clean(page, runs["train"])
    assert page.ready["panels"] == 4 and page.ready["rows"] == 16           # 4 modules x (value, grad) x 2 steps
    panels = page.evaluate("[...document.querySelectorAll('.panel')].map(p => [p.querySelector('h3').textContent, "
                           "p.querySelectorAll('svg.chart').length, p.querySelectorAll('svg polyline').length])")
    assert [p[0].split(" \u00b7 ")[0] for p in panels] == ["blocks.0.attn", "blocks.0.mlp", "blocks.1.attn",
                                                          "blocks.1.mlp"]
    assert all(charts == 2 and lines == 8 for _, charts, lines in panels)   # min, max, mean, absmax per side
    assert page.evaluate("document.querySelectorAll('svg.hist').length") == 0   # summary probes keep no tensor
    assert "model.py:45" in panels[1][0] and "return self.proj(h)" in panels[1][0]
    text = page.evaluate("document.body.innerText")
    assert "No NaN or Inf in 16 recorded hit(s)." in text and "calls (steps)\t2" in text
    assert page.evaluate("document.querySelectorAll('#graphs .badge.b-grad').length") == 4
    page.close()


def test_the_planted_nan_is_named_highlighted_and_found_in_the_table(browser, runs):
    page = browser.open(runs["nan"])
    assert_offline_and_clean(page, runs["nan"])
    banner = page.evaluate("document.getElementById('first-nonfinite').innerText")
    assert "value of node linear_7 (torch.nn.functional.linear) in blocks.1.mlp at model.py:45" in banner
    assert "return self.proj(h)" in banner and "call 1" in banner
    assert page.evaluate("document.querySelector('.panel.first h3').textContent").startswith("blocks.1.mlp")
    assert page.evaluate("document.querySelectorAll('.panel.first svg[data-chart$=v] line.firstbad').length") == 1
    hist = page.evaluate("[...document.querySelectorAll('.panel.first svg.hist')].map(h => h.textContent)")
    assert len(hist) == 2 and hist[0].startswith("distribution at call 1: ") and "NaN" in hist[0]   # recorded tensors
    row = page.evaluate("(document.getElementById('goto-first').click(), "
                        "[...document.querySelectorAll('tr.first td')].map(td => td.textContent))")
    assert row[2:7] == ["value", "forward[0/0]", "linear_7", "linear", "blocks.1.mlp"] and int(row[-2]) > 0
    page.close()


def big_recording(path):
    return synthetic.recording(path, calls=100, sites=50, nan=(17, 61))


def test_a_10000_hit_recording_opens_and_pages_sorts_filters(browser, tmp_path):
    html = page_of(big_recording(tmp_path / "big.dynstep"), tmp_path / "big.html")
    page = browser.open(html)
    assert_offline_and_clean(page, html)
    assert page.ready["rows"] == 10_000 and page.ready["panels"] == 48
    assert page.evaluate("document.querySelectorAll('#hits-table tbody tr').length") == 100
    assert page.evaluate("document.getElementById('hit-page').textContent") == "page 1 of 100 \u00b7 10000 of 10000 hits"
    first = page.evaluate("(() => { const f = document.getElementById('hit-filter'); f.value = 'layers.17';"
                          "f.dispatchEvent(new Event('input')); document.getElementById('hit-bad').click();"
                          "return [document.getElementById('hit-page').textContent,"
                          " document.querySelector('#hits-table tbody tr').id]; })()")
    assert first == ["page 1 of 1 \u00b7 39 of 10000 hits", f"hit-{61 * 100 + 18}"]
    order = page.evaluate("(() => { const th = [...document.querySelectorAll('#hits-table th')]"
                          ".find(t => t.textContent === 'call'); th.click(); th.click();"
                          "return document.querySelector('#hits-table tbody tr td:nth-child(2)').textContent; })()")
    assert order == "99"                                                     # sorted by call, descending
    page.close()


def test_no_string_from_user_code_runs_as_script(browser, tmp_path):
    html = page_of(evil_recording(tmp_path / "evil.dynstep"), tmp_path / "evil.html")
    page = browser.open(html)
    assert_offline_and_clean(page, html)
    assert page.evaluate("window.__pwned === undefined")
    text = page.evaluate("document.body.innerText")
    assert EVIL_MODULE in text and EVIL_LINE in text
    page.close()


def test_the_checks_catch_errors_and_requests(browser, tmp_path):
    bad = tmp_path / "bad.html"
    bad.write_text('<img src="http://example.invalid/a.png"><script>window.__dynstepReady = 1;'
                   'console.error("boom"); nope();</script>')
    page = browser.open(bad)
    assert page.remote == ["http://example.invalid/a.png"]
    assert any("boom" in e for e in page.errors) and any("nope" in e for e in page.errors)
    page.close()
