"""The app in a real browser: `streamlit run app.py` on 127.0.0.1, driven by headless Debian Chromium.

A user's path through it: open the app, pick a model from the catalog, move the
gpu_memory_utilization slider, open Export and download the vLLM YAML; the downloaded file must
carry the choices, the page must show no exception, and the browser must not have asked for
anything beyond 127.0.0.1. A screenshot goes to ``test-artifacts/`` (gitignored, kept by CI).

``PLANNER_SCREENSHOTS=1`` also rewrites the README's ``docs/screenshots/plan.png`` and
``roofline.png``. Skipped, with the reason, when /usr/bin/chromium or Playwright is missing.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest

from planner.estimate.memory import plan_memory
from planner.hardware import get_profile
from planner.model.families import build_spec
from planner.model.sources import load_config
from planner.scenario import Scenario
from tests.app_server import CHROMIUM, CHROMIUM_ARGS, ROOT, app_server

ARTIFACTS = ROOT / "test-artifacts"
SCREENSHOTS = ROOT / "docs" / "screenshots"
SERVER_START_S = 60
PAGE_TIMEOUT_S = 60

playwright_api = pytest.importorskip("playwright.sync_api", reason="Playwright (python) is not installed")
pytestmark = pytest.mark.skipif(not CHROMIUM.exists(), reason=f"{CHROMIUM} is missing (CI installs Debian's chromium)")

#: The app is idle when Streamlit's "running" status widget is gone and no element is stale or a skeleton.
IDLE_JS = """() => !document.querySelector('[data-testid="stStatusWidget"]')
  && !document.querySelector('[data-stale="true"]')
  && !document.querySelector('[data-testid="stSkeleton"]')
  && !!document.querySelector('[data-testid="stMain"] h1')"""


@contextmanager
def serving(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """`streamlit run app.py` on a free 127.0.0.1 port, freshly started; yields its base URL (a server
    that does not start raises with its log's path)."""
    home = tmp_path_factory.mktemp("hf_home")
    log_path = tmp_path_factory.mktemp("server") / "streamlit.log"
    with log_path.open("w") as log, app_server(home, log, start_timeout_s=SERVER_START_S) as url:
        yield url


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """One server for the module's tests."""
    with serving(tmp_path_factory) as url:
        yield url


@pytest.fixture
def fresh_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A server no session has reached yet (its first session is the one Streamlit treats specially)."""
    with serving(tmp_path_factory) as url:
        yield url


@pytest.fixture
def browser_page() -> Iterator:
    """A Chromium page that records every request outside 127.0.0.1."""
    with playwright_api.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        context = browser.new_context(viewport={"width": 1440, "height": 1000}, accept_downloads=True)
        page = context.new_page()
        page.set_default_timeout(PAGE_TIMEOUT_S * 1000)
        page.outside = []  # type: ignore[attr-defined]
        page.on(
            "request",
            lambda request: None if urlsplit(request.url).hostname == "127.0.0.1" else page.outside.append(request.url),
        )  # type: ignore[attr-defined]
        try:
            yield page
        finally:
            context.close()
            browser.close()


def wait_idle(page, settle_s: float = 1.0) -> None:
    """Wait until Streamlit has finished the rerun and stayed idle for ``settle_s`` seconds."""
    deadline = time.monotonic() + PAGE_TIMEOUT_S
    calm_since = None
    while time.monotonic() < deadline:
        if page.evaluate(IDLE_JS):
            calm_since = calm_since or time.monotonic()
            if time.monotonic() - calm_since >= settle_s:
                return
        else:
            calm_since = None
        time.sleep(0.1)
    raise AssertionError("the app did not finish running within the timeout")


def assert_no_exception(page) -> None:
    assert page.locator('[data-testid="stException"]').count() == 0
    assert "This app has encountered an error" not in page.inner_text("body")


def query(page) -> dict[str, str]:
    return {key: values[-1] for key, values in parse_qs(urlsplit(page.url).query).items()}


def pick_catalog_model(page, repo_id: str) -> None:
    """Type part of the name into the catalog picker (its search) and click the match."""
    page.get_by_role("combobox", name="Catalog model").click()
    page.keyboard.type(repo_id.split("/")[-1])
    page.get_by_role("option", name=repo_id, exact=True).click()
    wait_idle(page)


def open_page(page, title: str) -> None:
    page.locator('[data-testid="stSidebarNavLink"]').filter(has_text=title).click()
    wait_idle(page)


def expected_reason(model: str, **scenario) -> str:
    loaded = load_config(model)
    spec = build_spec(loaded.config, loaded.name)
    return plan_memory(spec, get_profile("h100-sxm"), Scenario(**scenario)).reason  # max_model_len: the model's


def test_pick_a_model_move_a_slider_download_the_vllm_yaml(server: str, browser_page) -> None:
    page = browser_page
    ARTIFACTS.mkdir(exist_ok=True)
    page.goto(server)
    wait_idle(page)
    assert_no_exception(page)
    assert expected_reason("meta-llama/Llama-3.1-8B") in page.inner_text("body")
    assert "max_model_len 131,072 (the model's maximum, vLLM's default)" in page.inner_text("body")

    pick_catalog_model(page, "Qwen/Qwen2.5-7B")
    assert query(page).get("model") == "Qwen/Qwen2.5-7B"
    assert "Qwen/Qwen2.5-7B on 1 x NVIDIA H100" in page.inner_text("body")

    slider = page.locator('[data-testid="stSlider"]').filter(has_text="gpu_memory_utilization").get_by_role("slider")
    slider.focus()
    for _ in range(4):  # 0.92 -> 0.88, one 0.01 step per key
        page.keyboard.press("ArrowLeft")
    wait_idle(page)
    assert query(page).get("util") == "0.88"
    assert expected_reason("Qwen/Qwen2.5-7B", gpu_memory_utilization=0.88) in page.inner_text("body")
    assert_no_exception(page)
    page.screenshot(path=str(ARTIFACTS / "browser-plan.png"))

    open_page(page, "Export")
    assert_no_exception(page)
    assert query(page).get("util") == "0.88"  # the link still holds the plan on another page
    with page.expect_download() as download_info:
        page.get_by_role("button", name="Download vllm-latency.yaml").click()
    download = download_info.value
    assert download.suggested_filename == "vllm-latency.yaml"
    text = Path(download.path()).read_text()
    assert "model: Qwen/Qwen2.5-7B" in text
    assert "tensor-parallel-size: 1" in text
    assert "gpu-memory-utilization: 0.88" in text
    assert "max-model-len: 131072" in text  # Qwen2.5-7B's maximum: vLLM's default, and the app's
    (ARTIFACTS / "vllm-latency.yaml").write_text(text)
    page.screenshot(path=str(ARTIFACTS / "browser-export.png"), full_page=True)
    assert_no_exception(page)
    assert page.outside == [], f"the page reached beyond 127.0.0.1: {page.outside}"


def test_a_shared_deep_link_opens_with_its_inputs(server: str, browser_page) -> None:
    page = browser_page
    page.goto(f"{server}/roofline?gpu=h200&tp=2&batch=4")
    wait_idle(page)
    assert_no_exception(page)
    body = page.inner_text("body")
    assert "NVIDIA H200" in body and "per GPU at TP 2" in body and "batch 4" in body
    open_page(page, "Plan")
    assert query(page) == {"gpu": "h200", "tp": "2", "batch": "4"}
    assert page.outside == []


def test_a_fresh_servers_first_session_can_start_on_a_deep_link(fresh_server: str, browser_page) -> None:
    """The very first session of a server opens a page's link and keeps its inputs on the first change.

    With a folder named "pages" next to app.py, Streamlit ran that first session in its older
    multipage mode: the page without the frame, whose widgets then lost their values on the first
    interaction. The views live in views/, so every run, the first included, goes through st.navigation.
    """
    page = browser_page
    page.goto(f"{fresh_server}/roofline?gpu=h200&tp=2")
    wait_idle(page)
    assert_no_exception(page)
    assert "per GPU at TP 2" in page.inner_text("body")
    batch = page.get_by_role("spinbutton", name="Batch / concurrency")
    batch.fill("4")
    batch.press("Enter")
    wait_idle(page)
    assert_no_exception(page)
    assert query(page) == {"gpu": "h200", "tp": "2", "batch": "4"}
    body = page.inner_text("body")
    assert "NVIDIA H200" in body and "per GPU at TP 2" in body and "batch 4" in body
    assert page.outside == []


def test_a_bad_input_shows_an_error_not_a_traceback(server: str, browser_page) -> None:
    page = browser_page
    page.goto(f"{server}/?tp=3")
    wait_idle(page)
    assert_no_exception(page)
    assert "--tp 3 does not divide the 32 attention heads" in page.inner_text("body")
    assert page.locator('[data-testid="stAlertContentError"]').count() >= 1


def shot(page, name: str) -> None:
    """A full-page screenshot into test-artifacts/, and into docs/screenshots/ with PLANNER_SCREENSHOTS=1."""
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / f"browser-{name}.png"), full_page=True)
    if os.environ.get("PLANNER_SCREENSHOTS") == "1":
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(SCREENSHOTS / f"{name}.png"), full_page=True)


def test_issue10_overload_shortfall_prices_and_page_words(server: str, browser_page) -> None:
    """Issue 10's flows: a shortfall not a negative size, the overload banner above the knee, a price on every
    Compare column, ms axes, and the Diagnose error naming the page's toggle."""
    page = browser_page
    page.set_viewport_size(
        {"width": 1440, "height": 2600}
    )  # Streamlit scrolls inside its main block: a tall window shows it all
    page.goto(f"{server}/?model=meta-llama/Llama-3.1-70B")
    wait_idle(page)
    assert_no_exception(page)
    body = page.inner_text("body")
    assert "short by 62.3 GiB" in body and "-62.3" not in body
    shot(page, "plan-does-not-fit")

    page.goto(f"{server}/simulate")
    wait_idle(page)
    rate = page.get_by_role("spinbutton", name="Request rate (req/s)")
    rate.fill("60")
    rate.press("Enter")
    wait_idle(page, settle_s=2.0)
    assert_no_exception(page)
    body = page.inner_text("body")
    assert "Overloaded: 60.0 req/s offered, this replica sustains about" in body and "Try TP 2" in body
    assert "steady state" in body and "milliseconds" in page.content()
    shot(page, "simulate")

    open_page(page, "Compare")
    assert_no_exception(page)
    body = page.inner_text("body")
    assert body.count("$/GPU-hour") >= 4 and body.count("Price: ") == 4
    shot(page, "compare")
    page.set_viewport_size({"width": 1400, "height": 2600})  # the width the README's screenshots use
    wait_idle(page)
    table = page.locator('[data-testid="stDataFrame"]').last  # the results, under the cards
    widths = table.evaluate(
        "e => { const s = e.querySelector('.dvn-scroller'); return [s.scrollWidth, s.clientWidth] }"
    )
    assert widths[0] <= widths[1], f"the comparison scrolls sideways at 1,400 px: {widths}"
    page.set_viewport_size({"width": 1440, "height": 2600})

    page.goto(f"{server}/latency?gpu=l4")
    wait_idle(page, settle_s=2.0)
    assert_no_exception(page)
    assert "TTFT (ms)" in page.content() and "exceeds the KV cache" in page.content()
    shot(page, "latency")

    for path, name in (("export", "export"), ("validate", "validate"), ("roofline", "roofline-page")):
        page.goto(f"{server}/{path}")
        wait_idle(page, settle_s=1.5)
        assert_no_exception(page)
        shot(page, name)
    assert "does not start: does not start" not in page.inner_text("body")

    page.goto(f"{server}/diagnose")
    wait_idle(page)
    page.get_by_role("textbox", name="vLLM server log").fill(
        "INFO 12-13 19:54:18 worker.py:243] total_gpu_memory 79.22GiB\n"
        "INFO 12-13 19:54:18 worker.py:243] model weights take 14.96GiB"
    )
    page.keyboard.press("Control+Enter")
    wait_idle(page)
    assert_no_exception(page)
    body = page.inner_text("body")
    assert "Plan with the sidebar's model and GPU" in body and "Pass MODEL" not in body
    shot(page, "diagnose")
    assert page.outside == []


def test_issue12_speculation_on_latency_and_lora_on_plan(server: str, browser_page) -> None:
    """The sidebar's Serving features from a link: the Latency page's speed-up chart and break-even sentence, the
    Plan page's lora term; screenshots of both with the expander open."""
    from planner.estimate.latency import estimate_latency
    from planner.scenario import LoRA, SpeculativeDecoding
    from planner.units import fmt_bytes

    page = browser_page
    page.set_viewport_size({"width": 1440, "height": 2000})
    spec = build_spec(load_config("meta-llama/Llama-3.1-8B").config, "meta-llama/Llama-3.1-8B")
    sc = Scenario(speculative=SpeculativeDecoding(method="eagle3", num_speculative_tokens=4, acceptance_rate=0.3))
    core = estimate_latency(spec, get_profile("h100-sxm"), sc).speculative
    assert core is not None and core.break_even_batch is not None
    page.goto(f"{server}/latency?spec=eagle3&spec_k=4&spec_a=0.3")
    wait_idle(page)
    page.get_by_text("Serving features").click()
    wait_idle(page)
    assert_no_exception(page)
    body = page.inner_text("body")
    assert f"Speculation stops paying at batch {core.break_even_batch:,}" in body
    assert page.locator('[data-testid="stPlotlyChart"]').count() >= 2  # the speed-up chart and the curves
    shot(page, "issue12-latency-speculative")
    page.goto(f"{server}/?lora=1&loras=4&lora_rank=64")
    wait_idle(page)
    page.get_by_text("Serving features").click()
    wait_idle(page)
    assert_no_exception(page)
    plan = plan_memory(spec, get_profile("h100-sxm"), Scenario(lora=LoRA(max_loras=4, max_lora_rank=64)))
    assert plan.lora_bytes_per_gpu is not None
    assert f"{fmt_bytes(plan.lora_bytes_per_gpu)} per GPU (exact)" in page.inner_text("body")  # 1.38 GiB
    shot(page, "issue12-plan-lora")
    assert page.outside == []


def test_issue11_placement_on_plan_and_disaggregation_on_simulate(server: str, browser_page) -> None:
    """Parallelism from a link: the Plan page's placement picture (70B at TP 4 x PP 2 over two nodes: 8 GPU cells,
    the stage boundary over the network) with the Parallelism expander open, and the Simulate page's disaggregated
    section turned on by the link (1P2D over NVLink), its verdict the core's; screenshots of both."""
    from planner.estimate.placement import place
    from planner.serve.disagg import DisaggLayout, compare_layouts
    from planner.serve.replica import length_distribution
    from planner.serve.workload import PoissonArrivals, Workload

    page = browser_page
    page.set_viewport_size({"width": 1440, "height": 2400})
    name = "meta-llama/Llama-3.1-70B"
    spec = build_spec(load_config(name).config, name)
    core = place(spec, get_profile("h100-sxm"), Scenario(tp=4, pp=2, num_nodes=2))
    page.goto(f"{server}/?model={name}&tp=4&pp=2&nodes=2")
    wait_idle(page)
    page.get_by_text("Parallelism", exact=True).click()
    wait_idle(page)
    assert_no_exception(page)
    body = page.inner_text("body")
    assert "Placement: which GPU holds what" in body and "stage 0 → 1 over the network (InfiniBand/RoCE)" in body
    assert core.stages[0].send_link == "network"
    figure = page.locator('[data-testid="stPlotlyChart"]').nth(1)  # the memory bar, then the placement
    for rank in range(8):
        assert f"GPU {rank}" in figure.inner_text()
    shot(page, "issue11-plan-placement")

    page.goto(f"{server}/simulate?pd=1&pd_d=2&pd_link=nvlink")
    wait_idle(page)
    assert_no_exception(page)
    small = build_spec(load_config("meta-llama/Llama-3.1-8B").config, "meta-llama/Llama-3.1-8B")
    workload = Workload(
        arrivals=PoissonArrivals(request_rate_per_s=10.0),
        num_requests=1000,
        input_tokens=length_distribution("fixed", 1024, 0, "prompt length"),
        output_tokens=length_distribution("fixed", 256, 0, "output length"),
        prefix_cache_hit_rate=0.0,
        seed=0,
    )
    layout = DisaggLayout(decode_instances=2, kv_transfer_link="nvlink")
    cmp = compare_layouts(small, get_profile("h100-sxm"), Scenario(), workload, layout)
    assert cmp.verdict in page.inner_text("body")
    page.get_by_text("Disaggregated prefill/decode", exact=True).scroll_into_view_if_needed()
    shot(page, "issue11-simulate-disaggregated")
    assert page.outside == []


def test_issue11_simulate_with_expert_and_data_parallel(server: str, browser_page) -> None:
    """A MoE model at EP over TP 1 x DP 2 from a link: the Plan page's placement (2 GPUs, half the experts each),
    then the Simulate page: the search keeps the layout (its recommendation is TP1 DP2 EP, the Export link
    carries ep and dp) and the disaggregated pools count every DP engine; then the pools with a draft model.
    Screenshots of each."""
    page = browser_page
    page.set_viewport_size({"width": 1440, "height": 2400})
    moe = "Qwen/Qwen3-30B-A3B"
    page.goto(f"{server}/?model={moe}&ep=1&dp=2")
    wait_idle(page)
    assert_no_exception(page)
    body = page.inner_text("body")
    assert "Placement: which GPU holds what" in body and "experts 0-63" in body and "experts 64-127" in body
    shot(page, "issue11-plan-placement-ep-dp")

    page.goto(f"{server}/simulate?model={moe}&ep=1&dp=2&pd=1")
    wait_idle(page, settle_s=2.0)
    assert_no_exception(page)
    body = page.inner_text("body")
    assert "replica(s) of h100-sxm TP1 DP2 EP" in body
    assert "Every candidate keeps the sidebar's layout (PP 1, expert parallel over TP x DP 2" in body
    assert "against 2 aggregated TP1 DP2 replicas" in body and "2 DP engines of its TP" in body
    export = page.get_by_role("link", name="Open the Export page with this deployment")
    href = parse_qs(urlsplit(export.get_attribute("href")).query)
    assert href["ep"] == ["1"] and href["dp"] == ["2"]
    shot(page, "issue11-simulate-ep-dp")
    page.get_by_text("Disaggregated prefill/decode", exact=True).scroll_into_view_if_needed()
    page.screenshot(path=str(ARTIFACTS / "browser-issue11-simulate-ep-dp-pools.png"))
    page.get_by_text("Open the Export page with this deployment").scroll_into_view_if_needed()
    page.screenshot(path=str(ARTIFACTS / "browser-issue11-simulate-ep-dp-search.png"))

    page.goto(f"{server}/simulate?spec=draft&draft=meta-llama/Llama-3.2-1B&pd=1&pd_d=2&pd_link=nvlink")
    wait_idle(page, settle_s=2.0)
    assert_no_exception(page)
    body = page.inner_text("body")
    assert "The decode pool and the aggregated replicas run the sidebar's speculative decoding (draft" in body
    page.get_by_text("Disaggregated prefill/decode", exact=True).scroll_into_view_if_needed()
    page.screenshot(path=str(ARTIFACTS / "browser-issue11-simulate-pools-draft.png"))
    assert page.outside == []


@pytest.mark.skipif(
    os.environ.get("PLANNER_SCREENSHOTS") != "1", reason="set PLANNER_SCREENSHOTS=1 to refresh the README screenshots"
)
def test_readme_screenshots(server: str, browser_page) -> None:
    page = browser_page
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    for path, name, height in (("", "plan", 1600), ("roofline", "roofline", 1250)):
        page.set_viewport_size({"width": 1400, "height": height})
        page.goto(f"{server}/{path}")
        wait_idle(page, settle_s=2.0)
        assert_no_exception(page)
        page.screenshot(path=str(SCREENSHOTS / f"{name}.png"))
