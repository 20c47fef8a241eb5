"""`dynstep report` on a flight recorder's dump, in headless Chromium: the lead-up section shows the K
steps before the trigger per module, the trigger's step marked in every chart, its module first and
highlighted, gradients beside values; the page makes no request and logs no error.

Skipped when Chromium is not installed (apt-get install -y chromium).
"""

from __future__ import annotations

import pytest

from dynstep.front.cli import main

from ..front import chromium
from .loops import tiny
from .test_models import K as GPT2_K
from .test_models import gpt2_training

pytestmark = pytest.mark.skipif(chromium.find() is None, reason="no chromium (apt-get install -y chromium)")


@pytest.fixture(scope="module")
def browser():
    with chromium.Chromium() as b:
        yield b


def page_of(dumps, out):
    (dump,) = [p for p in dumps.iterdir() if p.is_dir()]
    assert main(["report", str(dump), "-o", str(out)]) == 0
    return out


def lead_up(page):
    return page.evaluate("""(() => {
      const rows = [...document.querySelectorAll('#leadup .lrow')];
      return {title: document.querySelector('#leadup h2').textContent,
              trigger: document.getElementById('trigger').innerText,
              first: rows.filter(r => r.classList.contains('first')).map(r => r.dataset.module),
              modules: rows.map(r => r.dataset.module),
              charts: rows.map(r => r.querySelectorAll('svg.chart').length),
              marks: rows.map(r => [...r.querySelectorAll('line.trigger')].map(l => +l.dataset.step)),
              labels: [...rows[0].querySelectorAll('svg.chart text')].map(t => t.textContent),
              firstbad: [...rows[0].querySelectorAll('svg[data-chart$=v] line.firstbad')].map(l => +l.dataset.step),
              nav: [...document.querySelectorAll('nav a')].map(a => a.textContent)};
    })()""")


def test_the_tinygpt_dump_shows_the_lead_up_with_the_trigger_marked(browser, tmp_path):
    tiny(steps=9, nan_at=6, flight={"steps": 4, "path": str(tmp_path / "d")})
    html = page_of(tmp_path / "d", tmp_path / "tiny.html")
    page = browser.open(html)
    assert page.errors == [] and page.remote == []
    seen = lead_up(page)
    assert seen["title"] == "Lead-up: nonfinite at step 6" and seen["nav"][0] == "Lead-up"
    assert "value of node linear" in seen["trigger"] and "blocks.1.mlp.fc at model.py:44" in seen["trigger"]
    assert seen["first"] == ["blocks.1.mlp.fc"] and seen["modules"][0] == "blocks.1.mlp.fc"
    assert len(seen["modules"]) > 10 and all(n == 2 for n in seen["charts"])      # values and gradients per module
    assert all(marks == [6, 6] for marks in seen["marks"])                          # the trigger's step, both sides
    assert {"step 2", "step 6"} <= set(seen["labels"]) and seen["firstbad"] == [6]  # K = 4 steps before it
    banner = page.evaluate("document.getElementById('first-nonfinite').innerText")
    assert "blocks.1.mlp.fc" in banner and "masked_fill" not in banner             # the mask's -inf is by design
    page.close()


def test_the_gpt2_dump_shows_the_lead_up_of_its_blocks(browser, tmp_path):
    gpt2_training(tmp_path / "d", steps=7, nan_at=5)
    page = browser.open(page_of(tmp_path / "d", tmp_path / "gpt2.html"))
    assert page.errors == [] and page.remote == []
    seen = lead_up(page)
    assert seen["title"] == "Lead-up: nonfinite at step 5" and seen["first"] == ["transformer.h.1.mlp.c_fc"]
    assert "transformer.h.0.attn.c_attn" in seen["modules"] and "lm_head" in seen["modules"]
    assert all(marks and set(marks) == {5} for marks in seen["marks"])
    assert {f"step {5 - GPT2_K}", "step 5"} <= set(seen["labels"])
    watched = page.evaluate("[...document.querySelectorAll('#leadup .lcharts h4')].map(h => h.textContent)")
    assert watched[0].startswith("the trigger's node") and "watched: loss" in watched
    page.close()
