"""The page is light by construction, and serves the page docs/page.md describes before any model loads.

docs/page.md promises that the page serves before the models load; that holds only while every module app.py
imports stays free of torch and transformers. A fresh interpreter imports the app, serves it on a free port,
and reports what the page holds and which heavy modules were loaded by then.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.browser import free_port

ROOT = Path(__file__).resolve().parent.parent
HEAVY = ("torch", "transformers")
SERVE = """
import json, sys, urllib.request
import app
imported = [name for name in {heavy!r} if name in sys.modules]
app.demo.launch(server_name="127.0.0.1", server_port={port}, prevent_thread_lock=True, quiet=True)
config = json.load(urllib.request.urlopen("http://127.0.0.1:{port}/config", timeout=60))
served = [name for name in {heavy!r} if name in sys.modules]
app.demo.close()
from specviz.ui.charts import LIVE_CHARTS
live = [chart.key for chart in LIVE_CHARTS]
components = {{c["props"]["elem_id"]: {{"type": c["type"], **c["props"]}} for c in config["components"] if c["props"].get("elem_id")}}
print(json.dumps({{"imported": imported, "served": served, "live": live, "components": components}}))
"""


@pytest.fixture(scope="module")
def served() -> dict:
    code = SERVE.format(heavy=HEAVY, port=free_port())
    env = {**os.environ, "GRADIO_ANALYTICS_ENABLED": "False"}
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300, env=env)
    assert result.returncode == 0, f"importing and serving the app failed:\n{result.stderr[-2000:]}"
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_importing_and_serving_the_app_loads_neither_torch_nor_transformers(served):
    for when in ("imported", "served"):
        assert not served[when], (
            f"the app loaded {', '.join(served[when])} before the page was {when}: the page must serve before the models "
            "load, so every module app.py imports must stay light (find the culprit with `python -X importtime -c 'import app'`)"
        )


def test_the_served_page_holds_the_controls_and_every_live_chart(served):
    components = served["components"]
    for elem_id in ("prompt", "run", "step", "stop", "stream", "status", "run-numbers-box", "playback", "race-chart"):
        assert elem_id in components, f"#{elem_id} is part of the page contract (docs/page.md)"
    assert served["live"], "charts.live_chart registered no chart"
    for key in served["live"]:
        assert components.get(key, {}).get("type") == "plot", f"the live chart {key!r} is registered but not laid out as a plot"


def test_the_gamma_slider_offers_every_gamma_the_engine_accepts(served):
    from specviz.engine.settings import MAX_GAMMA

    gamma = served["components"]["gamma"]
    assert (gamma["minimum"], gamma["maximum"]) == (1, MAX_GAMMA), f"γ slider spans {gamma['minimum']}..{gamma['maximum']}"
