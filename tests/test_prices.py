"""Prices: every card has a cited, dated $/GPU-hour or says why not; the user's price wins; cost ranks.

Three layers, all offline:

- the data: every built-in profile's ``price_per_hour_usd`` is either a number with a source that
  names the provider, the region (or that none is stated), a date and a URL, or null with the
  searches that found nothing;
- the override: ``check_price`` / ``resolve_prices`` / ``with_price`` / ``priced`` in the core, and
  ``--price-per-gpu-hour`` on the command line, with a table of bad values and the expected error;
- the ranking: ``plan_slo`` ranks by $/hour whenever a candidate has a price, puts an unpriced card
  after the priced ones and names it with how to price it, and a user's price changes the answer.
"""

from __future__ import annotations

import json
import math
import re

import pytest

from planner.cli import main
from planner.errors import HardwareProfileError
from planner.hardware import (
    CALIBRATED_SUFFIX,
    PRICE_SET_BY_USER,
    check_price,
    get_profile,
    load_profiles,
    priced,
    resolve_prices,
    with_price,
)
from planner.model.families import build_spec
from planner.model.sources import load_config
from planner.scenario import Scenario
from planner.serve.slo import SLO, CandidateSpace, SearchSettings, plan_slo
from planner.serve.workload import FixedLength, PoissonArrivals, Workload

FLAG = "--price-per-gpu-hour"
DATE = re.compile(r"\b20\d\d-\d\d-\d\d\b")
FAST = SearchSettings(requests_per_probe=200)
BASE = Scenario(max_model_len=4096)
MODEL = "llama3.1-8b"


@pytest.fixture(scope="module")
def llama8b():
    loaded = load_config("meta-llama/Llama-3.1-8B", prefer="catalog")
    return build_spec(loaded.config, loaded.name)


def poisson(rate: float) -> Workload:
    return Workload(
        arrivals=PoissonArrivals(request_rate_per_s=rate),
        input_tokens=FixedLength(tokens=1024),
        output_tokens=FixedLength(tokens=128),
    )


def builtins():
    return [p for p in load_profiles().values() if not p.id.endswith(CALIBRATED_SUFFIX)]


# --------------------------------------------------------------------------------------------
# The data.
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("profile", builtins(), ids=lambda p: p.id)
def test_every_profile_has_a_cited_dated_price_or_says_why_not(profile):
    source = profile.sources.get("price_per_hour_usd")
    assert source, f"{profile.id}: sources.price_per_hour_usd must cite the price or say why there is none"
    assert DATE.search(source), f"{profile.id}: the price source needs a date (YYYY-MM-DD)"
    if profile.price_per_hour_usd is None:
        assert source.startswith(("no public", "none:")), source
        assert FLAG in source and "price_per_hour_usd is null" in (profile.notes or "")
    else:
        assert 0.05 < profile.price_per_hour_usd < 100, "a GPU-hour, not a node-hour or a month"
        assert "https://" in source and "region" in source.lower(), source  # the region, or that none is stated
        assert "looked up" in source


def test_the_cards_the_issue_named_now_have_prices():
    for card in ("h200", "b200", "mi300x", "a10g", "gh200", "rtx-4090", "l40s"):
        assert get_profile(card).price_per_hour_usd is not None, card
    unpriced = sorted(p.id for p in builtins() if p.price_per_hour_usd is None)
    assert unpriced == ["a100-pcie-80gb", "cpu", "gaudi3", "h20"]  # each says what was searched (test above)


def test_a_price_matches_the_figure_its_source_quotes():
    """The number in the YAML is the one the citation quotes (per GPU), so a typo shows."""
    for p in builtins():
        if p.price_per_hour_usd is None:
            continue
        quoted = {float(m) for m in re.findall(r"\$(\d+(?:\.\d+)?)", p.sources["price_per_hour_usd"])}
        assert p.price_per_hour_usd in quoted, f"{p.id}: {p.price_per_hour_usd} not among {sorted(quoted)}"


# --------------------------------------------------------------------------------------------
# The override in the core.
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "ok"),
    [
        (3.5, True),
        (1, True),
        (1e-3, True),
        (0, False),
        (-1.0, False),
        (math.nan, False),
        (math.inf, False),
        (-math.inf, False),
        (True, False),
        ("3.5", False),
        (None, False),
    ],
)
def test_check_price_accepts_only_positive_finite_numbers(value, ok):
    if ok:
        assert check_price(value, "h200", FLAG) == float(value)
    else:
        with pytest.raises(HardwareProfileError) as err:
            check_price(value, "h200", FLAG)
        assert str(err.value).startswith(FLAG) and "h200" in str(err.value) and "> 0" in str(err.value)


def test_resolve_prices_takes_ids_aliases_and_device_names():
    prices = resolve_prices({"H200": 3.5, "h100": 2, "NVIDIA L4": 0.5}, FLAG)
    assert prices == {"h200": 3.5, "h100-sxm": 2.0, "l4": 0.5}
    assert resolve_prices(None) == {} and resolve_prices({}) == {}


@pytest.mark.parametrize(
    ("prices", "fragment"),
    [
        ({"tpu-v5": 1.0}, "unknown GPU 'tpu-v5'; known ids: a100-40gb"),
        ({"h100": 2.0, "h100-sxm": 3.0}, "h100-sxm is priced twice"),
        ({"h200": -2.0}, "must be a finite number > 0"),
        ({"h200": math.nan}, "got nan"),
    ],
)
def test_resolve_prices_refuses_with_the_flag_named(prices, fragment):
    with pytest.raises(HardwareProfileError) as err:
        resolve_prices(prices, FLAG)
    assert str(err.value).startswith(FLAG + ":") and fragment in str(err.value)


def test_with_price_copies_and_says_where_the_price_came_from():
    h200 = get_profile("h200")
    mine = with_price(h200, 3.25)
    assert mine.price_per_hour_usd == 3.25 and mine.sources["price_per_hour_usd"] == PRICE_SET_BY_USER
    assert get_profile("h200").price_per_hour_usd == h200.price_per_hour_usd != 3.25  # the registry is untouched
    assert mine.sources["memory_bytes"] == h200.sources["memory_bytes"]
    with pytest.raises(HardwareProfileError):
        with_price(h200, 0.0)


def test_priced_applies_a_cards_price_and_leaves_the_others():
    gaudi, h200 = get_profile("gaudi3"), get_profile("h200")
    prices = {"gaudi3": 2.0}
    assert priced(gaudi, prices).price_per_hour_usd == 2.0
    assert priced(h200, prices) is h200 and priced(h200, None) is h200
    calibrated = gaudi.model_copy(update={"id": "gaudi3" + CALIBRATED_SUFFIX})
    assert priced(calibrated, prices).price_per_hour_usd == 2.0  # a calibrated card has its base card's price


# --------------------------------------------------------------------------------------------
# Ranking by cost.
# --------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def mixed(llama8b):
    """gaudi3 (no price) and l4 (priced): one replica of gaudi3 carries 5 req/s, l4 needs several."""
    space = CandidateSpace(gpus=("gaudi3", "l4"), tp=(1,), base=BASE)
    return plan_slo(llama8b, SLO.of(p99_ttft=1.0), poisson(5.0), space, FAST)


def test_a_mix_ranks_by_cost_and_names_the_unpriced_card(mixed):
    assert mixed.ranked_by == "usd_per_hour"
    note = next(n for n in mixed.notes if "no price for gaudi3" in n)
    assert f"{FLAG} gaudi3=USD" in note and "l4" not in note.split("no price for")[1].split(":")[0]
    meets = [c for c in mixed.candidates if c.status == "meets"]
    assert [c.gpu for c in meets] == ["l4", "gaudi3"]  # priced first, by $/hour; the unpriced after
    assert mixed.recommendation.gpu == "l4" and meets[1].usd_per_hour is None
    assert meets[1].total_gpus < meets[0].total_gpus  # fewer GPUs did not win: cost ranks, not GPU count


def test_the_users_price_changes_the_answer(llama8b, mixed):
    space = CandidateSpace(gpus=("gaudi3", "l4"), tp=(1,), base=BASE)
    plan = plan_slo(llama8b, SLO.of(p99_ttft=1.0), poisson(5.0), space, FAST, prices={"Gaudi3": 2.0, "l4": 0.5})
    assert plan.ranked_by == "usd_per_hour" and not any("no price" in n for n in plan.notes)
    best = plan.recommendation
    assert best.gpu == "gaudi3" and best.usd_per_hour == pytest.approx(2.0 * best.total_gpus)
    l4 = next(c for c in plan.candidates if c.gpu == "l4")
    if l4.status == "meets":
        assert l4.usd_per_hour == pytest.approx(0.5 * l4.total_gpus)  # the user's price, not the profile's 0.7992
    else:
        assert l4.status == "not-cheaper" and "$" in l4.reason
    old_l4 = next(c for c in mixed.candidates if c.gpu == "l4")
    assert old_l4.usd_per_hour == pytest.approx(get_profile("l4").price_per_hour_usd * old_l4.total_gpus)


def test_plan_slo_refuses_a_bad_price(llama8b):
    space = CandidateSpace(gpus=("l4",), tp=(1,), base=BASE)
    with pytest.raises(HardwareProfileError, match="prices: the price of l4 must be"):
        plan_slo(llama8b, SLO.of(p99_ttft=1.0), poisson(1.0), space, FAST, prices={"l4": -1.0})


# --------------------------------------------------------------------------------------------
# The command line.
# --------------------------------------------------------------------------------------------

SLO_ARGS = [
    "slo",
    MODEL,
    "--source",
    "catalog",
    "--qps",
    "2",
    "--p99-ttft",
    "1",
    "--tp",
    "1",
    "--max-model-len",
    "4096",
    "--requests-per-probe",
    "200",
]

BAD = [
    ("bare number, two cards", ["--gpus", "l4,gaudi3", FLAG, "3"], "names no card, and 2 cards are tried"),
    ("unknown card", ["--gpus", "l4", FLAG, "tpu=3"], f"{FLAG}: unknown GPU 'tpu'; known ids: a100-40gb"),
    ("zero", ["--gpus", "l4", FLAG, "l4=0"], f"{FLAG} must be greater than 0 (got 0)"),
    ("negative", ["--gpus", "l4", FLAG, "-2"], f"{FLAG} must be greater than 0"),
    ("nan", ["--gpus", "l4", FLAG, "l4=nan"], f"{FLAG} must be a finite number"),
    ("inf", ["--gpus", "l4", FLAG, "inf"], f"{FLAG} must be a finite number"),
    ("not a number", ["--gpus", "l4", FLAG, "l4=cheap"], "is not a price"),
    ("no card before =", ["--gpus", "l4", FLAG, "=3"], "names no card"),
    ("one card twice", ["--gpus", "l4", FLAG, "l4=1", FLAG, "L4=2"], "prices L4 twice"),
    ("alias twice", ["--gpus", "h100-sxm", FLAG, "h100=1", FLAG, "h100-sxm=2"], "h100-sxm is priced twice"),
]


@pytest.mark.parametrize(("extra", "fragment"), [b[1:] for b in BAD], ids=[b[0] for b in BAD])
def test_bad_prices_on_the_command_line(capsys, extra, fragment):
    code = main(SLO_ARGS + extra)
    out, err = capsys.readouterr()
    assert code == 2 and out == ""
    assert err.strip().splitlines()[-1].startswith("error: ") and fragment in err, err
    assert "Traceback" not in err


def test_the_flag_sets_the_price_the_slo_search_costs_with(capsys):
    code = main(SLO_ARGS + ["--gpus", "l4", FLAG, "0.5", "--format", "json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    best = json.loads(out)["recommendation"]
    assert best["gpu"] == "l4" and best["usd_per_hour"] == pytest.approx(0.5 * best["total_gpus"])


def test_the_table_says_which_card_has_no_price_and_how_to_give_one(capsys):
    code = main(SLO_ARGS + ["--gpus", "gaudi3"])
    out, err = capsys.readouterr()
    assert code == 0, err
    flat = " ".join(out.split())
    assert "ranked by GPU count, not cost: no price for gaudi3" in flat
    assert f"{FLAG} gaudi3=USD" in flat and "no price" in flat
