"""A deployment vLLM would not start is said as such, once, with the plan's reason (issue 10, point 5: numbers
that disagree): Llama-3.1-8B on one L4 at its maximum max_model_len (131,072 tokens) needs 16 GiB of KV cache for
one such request and has 3.9 GiB. The Latency page and the CLI had blamed the batch instead ("1 request of
1,024 + 256 tokens does not fit", "no batch size fits") while the same page's operating points used the 26
requests of 1,280 tokens that the 3.9 GiB hold."""

from __future__ import annotations

import json
from pathlib import Path

import streamlit as st
from streamlit.testing.v1 import AppTest

from planner.cli import main
from planner.estimate.latency import estimate_latency
from planner.hardware import get_profile
from planner.model.families import build_spec
from planner.model.sources import load_config
from planner.scenario import Scenario

APP = str(Path(__file__).resolve().parents[1] / "app.py")
MODEL = "meta-llama/Llama-3.1-8B"


def test_the_estimate_carries_the_plans_verdict_and_the_tokens_apart():
    model = build_spec(load_config(MODEL).config, MODEL)
    est = estimate_latency(model, get_profile("l4"), Scenario(gpu="l4"))
    assert est.does_not_start is not None and est.does_not_start.startswith("does not start")
    assert est.fits_in_kv_cache is True  # 1,280 tokens fit the 3.9 GiB pool; the 131,072-token max_model_len does not
    short = estimate_latency(model, get_profile("l4"), Scenario(gpu="l4", max_model_len=8192))
    assert short.does_not_start is None and "does_not_start" not in short.model_dump(exclude_none=False)


def test_the_cli_says_it_does_not_start(capsys):
    assert main(["latency", MODEL, "--gpu", "l4"]) == 0
    text = capsys.readouterr().out
    assert "warning: this deployment does not start" in text and "does not fit the planned KV cache" not in text
    assert main(["latency", MODEL, "--gpu", "l4", "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["does_not_start"].startswith("does not start")


def test_the_latency_page_gives_one_reason():
    st.cache_data.clear()
    at = AppTest.from_file(APP, default_timeout=60)
    at.query_params["model"] = MODEL
    at.query_params["gpu"] = "l4"
    at.switch_page("views/latency.py")
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    errors = [e.value for e in at.error]
    assert len(errors) == 1 and errors[0].startswith("This deployment does not start"), errors
    assert "At max_model_len" in errors[0]
    assert not any("do not fit the planned KV" in w.value for w in at.warning)
