"""Speculative decoding (planner.estimate.speculative): known values, invariants, refused flags, the export.

Known values: E = (1 - a^(k+1)) / (1 - a) and its inverse. Invariants: acceptance 0 buys nothing and pays
the draft; acceptance near 1 approaches (k + 1)x at batch 1 and less at a large batch; the break-even batch
exists and does not fall as acceptance rises. A table of bad flags, each refused naming the flag. The vLLM
export carries --speculative-config, and vLLM's own parser accepts it when .venv-engines is there.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import yaml

from planner.cli import main
from planner.errors import ScenarioError
from planner.estimate.latency import StepTimeModel, estimate_latency
from planner.estimate.speculative import (
    SpeculativeStepModel,
    acceptance_rate_for_length,
    estimate_speculation,
    expected_tokens_per_step,
    speculative_step_model,
    vllm_speculative_config,
)
from planner.hardware import get_profile
from planner.model.families import build_spec
from planner.model.sources import load_config
from planner.scenario import Scenario, SpeculativeDecoding

LLAMA = "meta-llama/Llama-3.1-8B"
DRAFT = "meta-llama/Llama-3.2-1B"
H100 = get_profile("h100-sxm")


@pytest.fixture(scope="module")
def llama():
    return build_spec(load_config(LLAMA).config, LLAMA)


@pytest.fixture(scope="module")
def draft():
    return build_spec(load_config(DRAFT).config, DRAFT)


def spec_scenario(method: str, k: int, a: float, **fields) -> Scenario:
    head = {"draft": DRAFT, "eagle": "yuhuili/EAGLE-LLaMA3.1-Instruct-8B"}.get(method)
    return Scenario(
        speculative=SpeculativeDecoding(method=method, num_speculative_tokens=k, acceptance_rate=a, draft_model=head),
        **fields,
    )


# ------------------------------------------------------------------------------ known values


@pytest.mark.parametrize(("a", "k", "tokens"), [(0.0, 3, 1.0), (0.5, 1, 1.5), (0.7, 3, 2.533), (0.8, 4, 3.3616)])
def test_expected_tokens_per_step(a, k, tokens):
    assert expected_tokens_per_step(a, k) == pytest.approx(tokens, rel=1e-12)
    assert expected_tokens_per_step(a, k) == pytest.approx(sum(a**i for i in range(k + 1)), rel=1e-12)


@pytest.mark.parametrize(("length", "k"), [(2.79, 3), (3.53, 7), (1.0, 2), (2.1, 2)])
def test_acceptance_rate_inverts_the_mean_acceptance_length(length, k):
    a = acceptance_rate_for_length(length, k)
    assert 0 <= a < 1 and expected_tokens_per_step(a, k) == pytest.approx(length, rel=1e-9)


def test_an_impossible_acceptance_length_is_refused():
    with pytest.raises(ScenarioError, match=r"\[1, 4\)"):
        acceptance_rate_for_length(4.0, 3)


# ------------------------------------------------------------------------------- invariants


@pytest.mark.parametrize("method", ["ngram", "draft", "eagle", "eagle3", "mtp"])
def test_acceptance_zero_gives_no_speedup_and_costs_the_draft(llama, draft, method):
    est = estimate_speculation(llama, H100, spec_scenario(method, 3, 0.0), 1, 1024, draft_model=draft)
    assert est.tokens_per_step == 1.0
    assert est.tpot_seconds == pytest.approx(est.step_seconds)
    assert est.speedup <= 1.0 and est.break_even_batch == 1
    if method == "ngram":
        assert est.draft_seconds == 0.0 and est.draft_weight_bytes_per_gpu == 0
    else:
        assert est.draft_seconds > 0 and est.tpot_seconds > est.baseline_tpot_seconds + 0.9 * est.draft_seconds
        assert est.draft_weight_bytes_per_gpu > 0 and est.draft_kv_bytes_per_token > 0


def test_near_one_approaches_k_plus_one_at_batch_1_and_less_at_a_large_batch(llama):
    k = 4
    est = estimate_speculation(llama, H100, spec_scenario("ngram", k, 0.999), 1, 512)
    assert 0.9 * (k + 1) < est.speedup <= k + 1  # verifying 5 tokens costs about one at batch 1
    model = speculative_step_model(llama, H100, spec_scenario("ngram", k, 0.999))
    big = 256
    plain = model.target.decode_seconds(float(big), 512.0)
    assert plain / model.tpot_seconds(big, 512)[0] < 0.8 * est.speedup  # compute-bound verification
    with_head = estimate_speculation(llama, H100, spec_scenario("eagle3", k, 0.999), 1, 512)
    assert 1 < with_head.speedup < est.speedup  # the head's passes cost something


def test_verification_at_batch_1_costs_about_one_plain_step_and_grows_with_k(llama):
    model = speculative_step_model(llama, H100, spec_scenario("ngram", 1, 0.5))
    plain = model.target.decode_seconds(1.0, 1024.0)
    verify = [
        float(speculative_step_model(llama, H100, spec_scenario("ngram", k, 0.5)).verify_gpu_seconds(1, 1024)[0])
        for k in (1, 3, 7)
    ]
    assert plain * 0.95 < verify[0] < plain * 1.1
    assert verify == sorted(verify)


def test_break_even_exists_and_does_not_fall_as_acceptance_rises(llama):
    context = 256  # short contexts: the batch's GEMMs, not its KV reads, bind
    found = []
    for a in (0.2, 0.4, 0.6, 0.8):
        model = speculative_step_model(llama, H100, spec_scenario("eagle3", 3, a))
        found.append(model.break_even_batch(context, 1024))
    assert all(b is not None for b in found[:2]), found
    as_numbers = [math.inf if b is None else b for b in found]
    assert as_numbers == sorted(as_numbers) and as_numbers[0] < as_numbers[-1], found


def test_break_even_is_where_the_tpots_cross(llama):
    model = speculative_step_model(llama, H100, spec_scenario("eagle3", 3, 0.4))
    b = model.break_even_batch(256, 1024)
    assert b is not None and b > 1
    plain = lambda n: model.target.decode_seconds(float(n), 256.0)  # noqa: E731
    assert model.tpot_seconds(b, 256)[0] >= plain(b)
    assert model.tpot_seconds(b - 1, 256)[0] < plain(b - 1)


def test_draft_model_costs_its_own_decode_steps(llama, draft):
    sc = spec_scenario("draft", 4, 0.7)
    model = speculative_step_model(llama, H100, sc, draft_model=draft)
    alone = StepTimeModel(draft, H100, Scenario())
    # k passes of the draft's decode: at least k x its GPU step, and below k x its whole step with host work
    drafted = float(model.draft_gpu_seconds(8, 1024)[0])
    assert 0.5 * 4 * alone.decode_seconds(8.0, 1024.0) < drafted <= 4 * alone.decode_seconds(8.0, 1024.0) * 1.0001


def test_latency_follows_the_speculative_tpot_and_plain_output_is_unchanged(llama):
    plain = estimate_latency(llama, H100, Scenario())
    spec = estimate_latency(llama, H100, spec_scenario("eagle3", 3, 0.7))
    assert "speculative" not in plain.model_dump() and "speculative" not in json.loads(plain.model_dump_json())
    assert spec.tpot_seconds == spec.speculative.tpot_seconds < plain.tpot_seconds
    assert spec.ttft_seconds == plain.ttft_seconds
    assert spec.e2e_seconds == pytest.approx(spec.ttft_seconds + (spec.output_len - 1) * spec.tpot_seconds)
    assert spec.speculative.baseline_tpot_seconds == pytest.approx(plain.tpot_seconds, rel=1e-9)


def test_the_head_is_one_of_the_targets_layers(llama):
    model = speculative_step_model(llama, H100, spec_scenario("mtp", 1, 0.5))
    assert isinstance(model, SpeculativeStepModel)
    table = model.target.decode_table
    layers = {table.count[i] for i in model.head_layer_rows}
    assert layers == {llama.num_layers}  # one group's rows, divided by its count when costed
    assert [table.names[i] for i in model.head_model_rows] == ["embedding", "final_norm", "lm_head", "sampler"]


# ---------------------------------------------------------------------------- refused flags

BASE = ["latency", LLAMA, "--format", "json"]
BAD_FLAGS = [
    (["--acceptance-rate", "0.7"], "--acceptance-rate given without --speculative-method"),
    (["--speculative-method", "eagle3", "--acceptance-rate", "0.7"], "needs --num-speculative-tokens"),
    (["--speculative-method", "eagle3", "--num-speculative-tokens", "3"], "needs --acceptance-rate"),
    (
        ["--speculative-method", "eagle3", "--num-speculative-tokens", "3", "--acceptance-rate", "1"],
        "--acceptance-rate must be less than 1",
    ),
    (
        ["--speculative-method", "eagle3", "--num-speculative-tokens", "3", "--acceptance-rate", "-0.1"],
        "--acceptance-rate must be greater than or equal to 0",
    ),
    (
        ["--speculative-method", "eagle3", "--num-speculative-tokens", "0", "--acceptance-rate", "0.5"],
        "--num-speculative-tokens must be greater than or equal to 1",
    ),
    (
        ["--speculative-method", "eagle3", "--num-speculative-tokens", "33", "--acceptance-rate", "0.5"],
        "--num-speculative-tokens must be less than or equal to 32",
    ),
    (
        ["--speculative-method", "draft", "--num-speculative-tokens", "3", "--acceptance-rate", "0.5"],
        "--speculative-method draft needs --draft-model",
    ),
    (
        [
            "--speculative-method",
            "ngram",
            "--num-speculative-tokens",
            "3",
            "--acceptance-rate",
            "0.5",
            "--draft-model",
            DRAFT,
        ],
        "--draft-model names a drafter",
    ),
    (
        ["--speculative-method", "medusa", "--num-speculative-tokens", "3", "--acceptance-rate", "0.5"],
        "--speculative-method: invalid choice",
    ),
]


@pytest.mark.parametrize(("flags", "message"), BAD_FLAGS)
def test_bad_flags_are_refused_naming_the_flag(capsys, flags, message):
    code = main([*BASE, *flags])
    _, err = capsys.readouterr()
    assert code == 2 and message in err, err


def test_the_latency_command_reports_the_speculative_step(capsys):
    code = main(
        [
            *BASE,
            "--speculative-method",
            "draft",
            "--num-speculative-tokens",
            "4",
            "--acceptance-rate",
            "0.7",
            "--draft-model",
            DRAFT,
            "--batch",
            "8",
        ]
    )
    out, _ = capsys.readouterr()
    assert code == 0
    spec = json.loads(out)["speculative"]
    assert {"tokens_per_step", "draft_seconds", "verify_seconds", "break_even_batch", "kind"} <= set(spec)
    assert spec["method"] == "draft" and spec["tokens_per_step"] == pytest.approx(expected_tokens_per_step(0.7, 4))


# ------------------------------------------------------------------------------------ export


@pytest.mark.parametrize(
    ("method", "head", "want"),
    [
        ("ngram", None, {"method": "ngram", "num_speculative_tokens": 3}),
        ("mtp", None, {"method": "mtp", "num_speculative_tokens": 3}),
        (
            "eagle3",
            "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B",
            {"method": "eagle3", "num_speculative_tokens": 3, "model": "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B"},
        ),
        ("draft", DRAFT, {"method": "draft_model", "num_speculative_tokens": 3, "model": DRAFT}),
    ],
)
def test_vllm_speculative_config_spelling(method, head, want):
    cfg = SpeculativeDecoding(method=method, num_speculative_tokens=3, acceptance_rate=0.6, draft_model=head)
    assert vllm_speculative_config(cfg) == want


def test_an_eagle_export_without_its_head_is_refused_naming_the_flag(llama):
    from planner.deploy.export import export_bundle

    sc = Scenario(
        max_model_len=8192,
        speculative=SpeculativeDecoding(method="eagle3", num_speculative_tokens=3, acceptance_rate=0.6),
    )
    with pytest.raises(ScenarioError, match="--draft-model"):
        export_bundle(llama, H100, sc)


def export_speculative(name: str, method: str, k: int, folder: Path, *extra: str) -> int:
    """`export --target all --profile latency` of ``name`` with speculation (acceptance 0.7) into ``folder``."""
    return main(
        [
            "export",
            name,
            "--max-model-len",
            "8192",
            "--target",
            "all",
            "--profile",
            "latency",
            "--speculative-method",
            method,
            "--num-speculative-tokens",
            str(k),
            "--acceptance-rate",
            "0.7",
            *extra,
            "--output-dir",
            str(folder),
        ]
    )


def test_the_export_carries_the_flags(capsys, tmp_path):
    code = export_speculative(LLAMA, "ngram", 3, tmp_path)
    capsys.readouterr()
    assert code == 0
    config = yaml.safe_load((tmp_path / "vllm-latency.yaml").read_text())
    assert config["speculative-config"] == {"method": "ngram", "num_speculative_tokens": 3}
    command = (tmp_path / "vllm-latency.sh").read_text()
    assert """--speculative-config '{"method":"ngram","num_speculative_tokens":3}'""" in command
    assert "speculative decoding ngram, k=3" in command  # the expected metrics say what it buys


def test_vllms_parser_accepts_the_speculative_exports(tmp_path):
    from tests.test_export_engines import catalog_config, engines_available, run_checker

    engines_available()
    files = []
    cases = ((LLAMA, "ngram", 3, []), ("deepseek-ai/DeepSeek-V3", "mtp", 1, ["--tp", "8", "--gpu", "h200"]))
    for name, method, k, extra in cases:
        folder = tmp_path / method
        assert export_speculative(name, method, k, folder, *extra) == 0
        files += [folder / "vllm-latency.yaml", folder / "vllm-latency.sh"]
    assert all(catalog_config(r).exists() for r in (LLAMA, "deepseek-ai/DeepSeek-V3"))
    rows = run_checker((files, {LLAMA, "deepseek-ai/DeepSeek-V3"}))
    failed = [f"{r['file']}: {r['check']}: {r['error']}" for r in rows if not r["ok"]]
    assert not failed, "\n".join(failed)
    assert {r["check"] for r in rows} >= {"vllm serve --config (every key honoured)", "vllm create_engine_config"}


def test_speculation_costs_are_arrays_and_scalars_alike(llama):
    model = speculative_step_model(llama, H100, spec_scenario("eagle3", 3, 0.7))
    batches = np.array([1.0, 7.0, 64.0])
    vector = model.tpot_seconds(batches, 2048.0)
    one_by_one = [float(model.tpot_seconds(b, 2048.0)[0]) for b in batches]
    assert np.allclose(vector, one_by_one, rtol=1e-12)
