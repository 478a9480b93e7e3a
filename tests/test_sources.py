"""Where config.json comes from: catalog, Hub, HF cache, local file, upload; and every way that fails.

Hub cases run the real huggingface_hub client against ``tests/hub_standin.py`` on 127.0.0.1.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from planner.errors import ConfigError, GatedModelError, HubUnavailableError, ModelNotFoundError
from planner.model.sources import (
    DEFAULT_CATALOG_DIR,
    LoadedConfig,
    catalog_entries,
    fetch_safetensors_param_counts,
    load_config,
    load_uploaded,
    search_catalog,
)
from tests.conftest import TINY_LLAMA_CONFIG
from tests.hub_standin import HubStandin, safetensors_header_only

FRESH_CONFIG = {**TINY_LLAMA_CONFIG, "num_hidden_layers": 12}
SECRET = "hf_standinSECRETtoken123"
FAST_TIMEOUT_S = 0.5


# ---- the Hub answers -----------------------------------------------------------------------------


def test_hub_download_cites_the_commit(hub: HubStandin, tiny_catalog: Path) -> None:
    repo = hub.add_repo("acme/Fresh-7B", {"config.json": FRESH_CONFIG})
    loaded = load_config("acme/Fresh-7B", catalog_dir=tiny_catalog)
    assert loaded.config == FRESH_CONFIG
    assert (loaded.name, loaded.origin, loaded.warnings) == ("acme/Fresh-7B", "hub", [])
    assert loaded.source == f"{hub.url}/acme/Fresh-7B/blob/{repo.commit}/config.json"
    assert hub.count("GET") == 1  # config.json only: nothing else is fetched


def test_second_load_reuses_the_cache_and_survives_the_hub_going_away(hub: HubStandin, tiny_catalog: Path) -> None:
    hub.add_repo("acme/Fresh-7B", {"config.json": FRESH_CONFIG})
    load_config("acme/Fresh-7B", catalog_dir=tiny_catalog)
    again = load_config("acme/Fresh-7B", catalog_dir=tiny_catalog)
    assert again.origin == "hub"
    assert hub.count("GET") == 1  # the second load only HEADs

    hub.stop()
    offline = load_config("acme/Fresh-7B", catalog_dir=tiny_catalog, timeout_s=FAST_TIMEOUT_S)
    assert offline.origin == "hub-cache"
    assert offline.config == FRESH_CONFIG
    assert offline.warnings and offline.warnings[0].startswith("Hub unreachable (cannot connect to http://127.0.0.1")


def test_revision_pins_a_commit(hub: HubStandin, tiny_catalog: Path) -> None:
    repo = hub.add_repo("acme/Fresh-7B", {"config.json": FRESH_CONFIG})
    loaded = load_config("acme/Fresh-7B", revision=repo.commit, catalog_dir=tiny_catalog)
    assert loaded.origin == "hub"
    assert repo.commit in loaded.source
    assert hub.count(path_contains=f"/resolve/{repo.commit}/") >= 1


def test_pasted_hub_url_is_a_repo_id(hub: HubStandin, tiny_catalog: Path) -> None:
    hub.add_repo("acme/Fresh-7B", {"config.json": FRESH_CONFIG})
    assert load_config(f"{hub.url}/acme/Fresh-7B", catalog_dir=tiny_catalog).name == "acme/Fresh-7B"


# ---- the catalog answers without the network -----------------------------------------------------


@pytest.mark.parametrize("given", ["acme/Tiny-Llama-1B", "ACME/tiny-llama-1b", "tiny-llama", "TL-1B"])
def test_catalog_hit_makes_no_request(hub: HubStandin, tiny_catalog: Path, given: str) -> None:
    hub.add_repo("acme/Tiny-Llama-1B", {"config.json": FRESH_CONFIG})
    loaded = load_config(given, catalog_dir=tiny_catalog)
    assert (loaded.name, loaded.origin, loaded.config) == ("acme/Tiny-Llama-1B", "catalog", TINY_LLAMA_CONFIG)
    assert "acme--Tiny-Llama-1B.json" in loaded.source and "0123abc" in loaded.source
    assert hub.requests == []


def test_prefer_hub_asks_the_hub_even_for_an_alias(hub: HubStandin, tiny_catalog: Path) -> None:
    hub.add_repo("acme/Tiny-Llama-1B", {"config.json": FRESH_CONFIG})
    loaded = load_config("tiny-llama", prefer="hub", catalog_dir=tiny_catalog)
    assert (loaded.name, loaded.origin, loaded.config) == ("acme/Tiny-Llama-1B", "hub", FRESH_CONFIG)


def test_revision_skips_the_catalog_in_auto_mode(hub: HubStandin, tiny_catalog: Path) -> None:
    hub.add_repo("acme/Tiny-Llama-1B", {"config.json": FRESH_CONFIG})
    assert load_config("tiny-llama", revision="main", catalog_dir=tiny_catalog).origin == "hub"


def test_prefer_catalog_never_asks_the_hub(hub: HubStandin, tiny_catalog: Path) -> None:
    hub.add_repo("acme/Tiny-Lama-1B", {"config.json": FRESH_CONFIG})
    with pytest.raises(ModelNotFoundError, match=r"not in the bundled catalog.*acme/Tiny-Llama-1B"):
        load_config("acme/Tiny-Lama-1B", prefer="catalog", catalog_dir=tiny_catalog)
    assert hub.requests == []


# ---- the Hub says no: table of failure modes -----------------------------------------------------

GGUF_ONLY = {"model-Q4_K_M.gguf": b"GGUF\x03\x00\x00\x00", "README.md": "# quantised"}

HUB_FAILURES = [
    # id, repos to serve, load_config kwargs, error type, fragments the message must contain
    (
        "missing repo suggests catalog names",
        {},
        {"model": "acme/Tiny-Lama-1B"},
        ModelNotFoundError,
        [
            "no repo 'acme/Tiny-Lama-1B' on the Hub (HF_ENDPOINT=http://127.0.0.1:",
            "Check the id",
            "path to a config.json",
            "Catalog names close to it: acme/Tiny-Llama-1B",
        ],
    ),
    (
        "gated without a token",
        {"acme/Gated-7B": ({"config.json": FRESH_CONFIG}, SECRET)},
        {"model": "acme/Gated-7B"},
        GatedModelError,
        [
            "'acme/Gated-7B' is gated",
            "no valid token was sent (HTTP 401",
            "Accept its license at http://127.0.0.1:",
            "/acme/Gated-7B",
            "HF_TOKEN",
            "--hf-token",
        ],
    ),
    (
        "gated with a wrong token",
        {"acme/Gated-7B": ({"config.json": FRESH_CONFIG}, SECRET)},
        {"model": "acme/Gated-7B", "token": "hf_wrongTOKENvalue999"},
        GatedModelError,
        ["the token sent has no access to it (HTTP 403"],
    ),
    (
        "repo without config.json",
        {"acme/Model-GGUF": (GGUF_ONLY, None)},
        {"model": "acme/Model-GGUF"},
        ModelNotFoundError,
        ["repo 'acme/Model-GGUF' on the Hub has no config.json", "GGUF", "give a path to a config.json"],
    ),
    (
        "unknown revision",
        {"acme/Fresh-7B": ({"config.json": FRESH_CONFIG}, None)},
        {"model": "acme/Fresh-7B", "revision": "v9"},
        ModelNotFoundError,
        ["has no revision 'v9'", "leave the revision out"],
    ),
    (
        "invalid JSON",
        {"acme/Broken": ({"config.json": b'{"model_type": "llama",\n  "hidden_size": }'}, None)},
        {"model": "acme/Broken"},
        ConfigError,
        ["config.json of acme/Broken from http://127.0.0.1:", "is not valid JSON", "line 2 column 18"],
    ),
    (
        "JSON that is not an object",
        {"acme/Listy": ({"config.json": [1, 2, 3]}, None)},
        {"model": "acme/Listy"},
        ConfigError,
        ["config.json of acme/Listy", "holds a JSON array, but a config.json is a JSON object"],
    ),
    (
        "not a repo id at all",
        {},
        {"model": "no such model!!"},
        ModelNotFoundError,
        ["'no such model!!' is not a local path, a catalog name or a Hub repo id"],
    ),
    (
        "slow Hub, nothing cached, not in catalog",
        {"acme/Slow-7B": ({"config.json": FRESH_CONFIG}, None)},
        {"model": "acme/Slow-7B", "timeout_s": FAST_TIMEOUT_S},
        HubUnavailableError,
        [
            "cannot get 'acme/Slow-7B' from the Hub at http://127.0.0.1:",
            "(timeout after 0.5 s)",
            "no cached or catalog copy",
            "HF_ENDPOINT",
            "local config.json",
        ],
    ),
]


@pytest.mark.parametrize(
    ("repos", "kwargs", "error", "fragments"),
    [case[1:] for case in HUB_FAILURES],
    ids=[case[0] for case in HUB_FAILURES],
)
def test_hub_failure_modes(
    hub: HubStandin, tiny_catalog: Path, repos: dict, kwargs: dict, error: type, fragments: list[str]
) -> None:
    for repo_id, (files, gated_token) in repos.items():
        hub.add_repo(repo_id, files, gated_token=gated_token, delay_s=5.0 if "Slow" in repo_id else 0.0)
    started = time.monotonic()
    with pytest.raises(error) as caught:
        load_config(catalog_dir=tiny_catalog, **kwargs)
    assert time.monotonic() - started < 3.0
    message = str(caught.value)
    for fragment in fragments:
        assert fragment in message, f"{fragment!r} not in {message!r}"


# ---- repos without a root config.json: Mistral params.json, subfolders --------------------------

# A params.json with the values of the catalog's Mistral-7B-Instruct-v0.3 config.json, in the layout
# Mistral publishes (dim, n_layers, head_dim, hidden_dim, n_heads, n_kv_heads, norm_eps, vocab_size, rope_theta).
MISTRAL_PARAMS = {
    "dim": 4096,
    "n_layers": 32,
    "head_dim": 128,
    "hidden_dim": 14336,
    "n_heads": 32,
    "n_kv_heads": 8,
    "norm_eps": 1e-05,
    "vocab_size": 32768,
    "rope_theta": 1000000.0,
}
MIXTRAL_PARAMS = {**MISTRAL_PARAMS, "vocab_size": 32000, "moe": {"num_experts": 8, "num_experts_per_tok": 2}}


def _spec_numbers(config: dict, name: str) -> tuple:
    from planner.model.families import build_spec

    spec = build_spec(config, name)
    return spec.total_params, spec.active_params, spec.hidden_size, spec.vocab_size, len(spec.layers)


@pytest.mark.parametrize(
    ("params", "catalog_id"),
    [(MISTRAL_PARAMS, "mistralai/Mistral-7B-Instruct-v0.3"), (MIXTRAL_PARAMS, "mistralai/Mixtral-8x7B-v0.1")],
    ids=["dense", "moe"],
)
def test_params_json_only_repo_plans_like_its_config_json(hub: HubStandin, params: dict, catalog_id: str) -> None:
    repo = hub.add_repo("acme/Params-Only", {"params.json": params, "consolidated.safetensors": b"\x00"})
    loaded = load_config("acme/Params-Only")
    assert (loaded.origin, loaded.name) == ("hub", "acme/Params-Only")
    assert loaded.source == f"{hub.url}/acme/Params-Only/blob/{repo.commit}/params.json"
    assert "no config.json; read its Mistral params.json" in loaded.warnings[0]
    assert "128,000 tokens" in loaded.warnings[1]  # params.json states no context length
    reference = load_config(catalog_id, prefer="catalog").config
    assert _spec_numbers(loaded.config, "p") == _spec_numbers(reference, "c")
    assert hub.count("GET", "/resolve/main/params.json") == 1


def test_config_json_wins_over_params_json(hub: HubStandin) -> None:
    hub.add_repo("acme/Both", {"config.json": FRESH_CONFIG, "params.json": MISTRAL_PARAMS})
    loaded = load_config("acme/Both")
    assert loaded.config == FRESH_CONFIG and loaded.warnings == []
    assert hub.count(path_contains="/tree/") == 0 and hub.count(path_contains="params.json") == 0


@pytest.mark.parametrize(
    ("params", "fragment"),
    [
        ({**MISTRAL_PARAMS, "qk_nope_head_dim": 128}, "has 'qk_nope_head_dim': multi-head latent attention"),
        (
            {**MISTRAL_PARAMS, "moe": {"num_experts": 8, "num_experts_per_tok": 2, "num_shared_experts": 1}},
            "'moe.num_shared_experts' is 1: Mistral Large 3",
        ),
        ({**MISTRAL_PARAMS, "moe": {"num_experts": 8}}, "'moe' has no 'num_experts_per_tok'"),
        ({**MISTRAL_PARAMS, "quantization": {"qformat_weight": "int3"}}, "'quantization' {'qformat_weight': 'int3'}"),
        ({**MISTRAL_PARAMS, "vision_encoder": {"dim": 1024}}, "has 'vision_encoder': a vision encoder"),
    ],
    ids=["mla", "shared experts", "moe without top-k", "unknown quantization", "vision"],
)
def test_params_json_variants_that_are_refused(hub: HubStandin, params: dict, fragment: str) -> None:
    hub.add_repo("acme/Params-Odd", {"params.json": params})
    with pytest.raises(ConfigError) as caught:
        load_config("acme/Params-Odd")
    assert "params.json of acme/Params-Odd from http://127.0.0.1:" in str(caught.value)
    assert fragment in str(caught.value)


def test_params_json_fp8_and_window_pattern_translate() -> None:
    from planner.model.sources import mistral_params_to_config

    params = {
        **MISTRAL_PARAMS,
        "n_layers": 4,
        "sliding_window": [4096, None],
        "max_seq_len": 32768,
        "quantization": {"qformat_weight": "fp8_e4m3", "qscheme_act": "TENSOR"},
    }
    config, notes = mistral_params_to_config(params, "params.json")
    assert config["quantization_config"] == {"quant_method": "fp8", "activation_scheme": "static"}
    assert config["layer_types"] == ["sliding_attention", "full_attention"] * 2 and config["sliding_window"] == 4096
    assert config["max_position_embeddings"] == 32768 and notes == []


def test_configs_in_subfolders_are_named_and_loadable(hub: HubStandin, tiny_catalog: Path) -> None:
    repo = hub.add_repo(
        "acme/Multi",
        {"README.md": "# two models", "base/config.json": FRESH_CONFIG, "instruct/config.json": TINY_LLAMA_CONFIG},
    )
    with pytest.raises(ModelNotFoundError) as caught:
        load_config("acme/Multi", catalog_dir=tiny_catalog)
    message = str(caught.value)
    assert (
        "repo 'acme/Multi' on the Hub has no config.json; it has 2 config.json file(s) elsewhere: "
        "base/config.json, instruct/config.json." in message
    )
    assert "'org/name/subfolder', e.g. 'acme/Multi/base'" in message

    loaded = load_config("acme/Multi/instruct", catalog_dir=tiny_catalog)
    assert (loaded.name, loaded.origin, loaded.config) == ("acme/Multi/instruct", "hub", TINY_LLAMA_CONFIG)
    assert loaded.source == f"{hub.url}/acme/Multi/blob/{repo.commit}/instruct/config.json"
    again = load_config("acme/Multi/instruct", catalog_dir=tiny_catalog)  # from the HF cache: no second GET
    assert again.config == TINY_LLAMA_CONFIG and hub.count("GET", "/resolve/main/instruct/config.json") == 1
    hub.stop()
    cached = load_config("acme/Multi/instruct", catalog_dir=tiny_catalog, timeout_s=FAST_TIMEOUT_S)
    assert cached.origin == "hub-cache" and repo.commit in cached.source


@pytest.mark.parametrize("name", ["acme/Multi/../x", "acme/Multi/.hidden", "acme/Multi//base"])
def test_subfolder_names_stay_inside_the_repo(hub: HubStandin, tiny_catalog: Path, name: str) -> None:
    with pytest.raises(ModelNotFoundError, match="is not a local path, a catalog name or a Hub repo id"):
        load_config(name, catalog_dir=tiny_catalog)
    assert hub.requests == []


def test_a_repo_without_any_config_lists_what_it_holds(hub: HubStandin, tiny_catalog: Path) -> None:
    hub.add_repo("acme/Model-GGUF", GGUF_ONLY)
    with pytest.raises(ModelNotFoundError, match=r"Its files: README\.md, model-Q4_K_M\.gguf\."):
        load_config("acme/Model-GGUF", catalog_dir=tiny_catalog)


# ---- allow_local=False: what the app passes ------------------------------------------------------


@pytest.mark.parametrize(
    "name",
    [
        "/etc/passwd",
        "./config.json",
        "../x",
        "~/.ssh/id_rsa",
        "C:\\x\\config.json",
        "file:///etc/passwd",
        "config.json",
        ".",
    ],
)
def test_no_local_reads_when_not_allowed(hub: HubStandin, tiny_catalog: Path, name: str) -> None:
    with pytest.raises(ModelNotFoundError, match="looks like a file path; local files are not read here"):
        load_config(name, catalog_dir=tiny_catalog, allow_local=False)
    assert hub.requests == []


def test_a_repo_id_that_is_also_a_local_folder_goes_to_the_hub(
    hub: HubStandin, tiny_catalog: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "acme" / "Fresh-7B").mkdir(parents=True)
    (tmp_path / "acme" / "Fresh-7B" / "config.json").write_text(json.dumps(TINY_LLAMA_CONFIG))
    monkeypatch.chdir(tmp_path)
    hub.add_repo("acme/Fresh-7B", {"config.json": FRESH_CONFIG})
    assert load_config("acme/Fresh-7B", catalog_dir=tiny_catalog).origin == "file"
    loaded = load_config("acme/Fresh-7B", catalog_dir=tiny_catalog, allow_local=False)
    assert (loaded.origin, loaded.config) == ("hub", FRESH_CONFIG)
    with pytest.raises(ModelNotFoundError, match="is not a catalog name or a Hub repo id"):
        load_config("not a repo!!", catalog_dir=tiny_catalog, allow_local=False)


# ---- tokens --------------------------------------------------------------------------------------


def test_gated_repo_opens_with_the_right_token(hub: HubStandin, tiny_catalog: Path) -> None:
    hub.add_repo("acme/Gated-7B", {"config.json": FRESH_CONFIG}, gated_token=SECRET)
    loaded = load_config("acme/Gated-7B", token=SECRET, catalog_dir=tiny_catalog)
    assert loaded.origin == "hub" and loaded.config == FRESH_CONFIG
    assert {r.token for r in hub.requests} == {SECRET}
    assert all(SECRET not in text for text in (loaded.source, *loaded.warnings))


def test_token_none_lets_huggingface_hub_read_hf_token(
    hub: HubStandin, tiny_catalog: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    hub.add_repo("acme/Gated-7B", {"config.json": FRESH_CONFIG}, gated_token=SECRET)
    monkeypatch.setenv("HF_TOKEN", SECRET)
    assert load_config("acme/Gated-7B", catalog_dir=tiny_catalog).origin == "hub"


def test_a_refused_token_is_never_in_the_message(hub: HubStandin, tiny_catalog: Path) -> None:
    hub.add_repo("acme/Gated-7B", {"config.json": FRESH_CONFIG}, gated_token="hf_theRIGHTone")
    with pytest.raises(GatedModelError) as caught:
        load_config("acme/Gated-7B", token=SECRET, catalog_dir=tiny_catalog)
    assert hub.requests and hub.requests[0].token == SECRET  # it was sent...
    chain: list[BaseException] = []
    err: BaseException | None = caught.value
    while err is not None:
        chain.append(err)
        err = err.__cause__ or err.__context__
    assert all(SECRET not in str(e) and SECRET not in repr(e) for e in chain)  # ...and never shown


def test_gated_repo_falls_back_to_an_earlier_cached_copy(hub: HubStandin, tiny_catalog: Path) -> None:
    repo = hub.add_repo("acme/Gated-7B", {"config.json": FRESH_CONFIG}, gated_token=SECRET)
    load_config("acme/Gated-7B", token=SECRET, catalog_dir=tiny_catalog)
    loaded = load_config("acme/Gated-7B", catalog_dir=tiny_catalog)
    assert loaded.origin == "hub-cache"
    assert "is gated" in loaded.warnings[0] and repo.commit in loaded.source


# ---- timeouts and offline ------------------------------------------------------------------------


def test_timeout_falls_back_to_the_cached_copy(hub: HubStandin, tiny_catalog: Path) -> None:
    repo = hub.add_repo("acme/Fresh-7B", {"config.json": FRESH_CONFIG})
    load_config("acme/Fresh-7B", catalog_dir=tiny_catalog)
    repo.delay_s = 5.0
    started = time.monotonic()
    loaded = load_config("acme/Fresh-7B", catalog_dir=tiny_catalog, timeout_s=FAST_TIMEOUT_S)
    assert time.monotonic() - started < 2.0
    assert (loaded.origin, loaded.config) == ("hub-cache", FRESH_CONFIG)
    assert loaded.warnings == [
        f"Hub unreachable (timeout after 0.5 s); using the cached copy of acme/Fresh-7B (commit {repo.commit[:12]})."
    ]
    assert loaded.source.startswith(f"HF cache copy of {hub.url}/acme/Fresh-7B/blob/{repo.commit}/config.json")


def test_timeout_falls_back_to_the_catalog(hub: HubStandin, tiny_catalog: Path) -> None:
    hub.add_repo("acme/Tiny-Llama-1B", {"config.json": FRESH_CONFIG}, delay_s=5.0)
    started = time.monotonic()
    loaded = load_config("tiny-llama", prefer="hub", catalog_dir=tiny_catalog, timeout_s=FAST_TIMEOUT_S)
    assert time.monotonic() - started < 2.0
    assert (loaded.origin, loaded.config) == ("catalog", TINY_LLAMA_CONFIG)
    assert loaded.warnings == [
        "Hub unreachable (timeout after 0.5 s); using the bundled catalog copy of acme/Tiny-Llama-1B."
    ]


def test_offline_uses_cache_then_catalog_and_makes_no_request(
    hub: HubStandin, tiny_catalog: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    hub.add_repo("acme/Fresh-7B", {"config.json": FRESH_CONFIG})
    hub.add_repo("acme/Tiny-Llama-1B", {"config.json": FRESH_CONFIG})
    hub.add_repo("acme/Never-Fetched", {"config.json": FRESH_CONFIG})
    load_config("acme/Fresh-7B", catalog_dir=tiny_catalog)
    seen_before = len(hub.requests)

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    cached = load_config("acme/Fresh-7B", catalog_dir=tiny_catalog)
    assert cached.origin == "hub-cache"
    assert cached.warnings[0].startswith("Hub not asked (HF_HUB_OFFLINE is set); using the cached copy")
    from_catalog = load_config("acme/Tiny-Llama-1B", prefer="hub", catalog_dir=tiny_catalog)
    assert from_catalog.origin == "catalog" and "HF_HUB_OFFLINE" in from_catalog.warnings[0]
    with pytest.raises(HubUnavailableError, match="HF_HUB_OFFLINE is set and there is no cached or catalog copy"):
        load_config("acme/Never-Fetched", catalog_dir=tiny_catalog)
    assert len(hub.requests) == seen_before


def test_no_hub_fixture_means_no_network(tiny_catalog: Path) -> None:
    """The autouse guard points HF_ENDPOINT at a closed local port: a forgotten fixture fails fast, offline."""
    with pytest.raises(HubUnavailableError, match=r"cannot connect to http://127\.0\.0\.1:9"):
        load_config("acme/Anything", catalog_dir=tiny_catalog, timeout_s=FAST_TIMEOUT_S)


# ---- local files ---------------------------------------------------------------------------------


def test_local_file_and_folder(tmp_path: Path, tiny_catalog: Path) -> None:
    folder = tmp_path / "my-model"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(FRESH_CONFIG))
    for given in (str(folder), str(folder / "config.json")):
        loaded = load_config(given, catalog_dir=tiny_catalog)
        assert (loaded.name, loaded.origin, loaded.config) == (given, "file", FRESH_CONFIG)
        assert loaded.source == str((folder / "config.json").resolve())


@pytest.mark.parametrize(
    ("make", "error", "fragment"),
    [
        (lambda p: p.mkdir(), ModelNotFoundError, "has no config.json"),
        (lambda p: None, ModelNotFoundError, "no file at"),
        (lambda p: p.write_text('{"model_type": "llama", }'), ConfigError, "is not valid JSON: Expecting property"),
        (lambda p: p.write_text('"just a string"'), ConfigError, "holds a JSON string"),
    ],
    ids=["folder without config.json", "missing path", "trailing comma", "JSON string"],
)
def test_local_path_errors(tmp_path: Path, tiny_catalog: Path, make, error: type, fragment: str) -> None:
    target = tmp_path / "thing.json"
    make(target)
    with pytest.raises(error, match=fragment) as caught:
        load_config(str(target), catalog_dir=tiny_catalog)
    assert str(target) in str(caught.value)


# ---- uploads -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("data", "fragment"),
    [
        (b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR", "is not UTF-8 text"),
        (b"model_type: llama\n", "is not valid JSON: Expecting value at line 1 column 1"),
        (b"[1, 2, 3]", "holds a JSON array"),
        (b'{"bos_token": "<s>", "eos_token": "</s>"}', "without 'model_type' or 'architectures'"),
        (b" " * (5 * 2**20), "is 5.0 MiB; a config.json is a few KiB"),
    ],
    ids=["binary garbage", "YAML", "JSON list", "tokenizer config", "too big"],
)
def test_upload_that_is_not_a_config_json(data: bytes, fragment: str) -> None:
    with pytest.raises(ConfigError, match=fragment) as caught:
        load_uploaded(data, "upload.json")
    assert "uploaded file 'upload.json'" in str(caught.value)


def test_upload_of_a_config_json() -> None:
    loaded = load_uploaded(b"\xef\xbb\xbf" + json.dumps(FRESH_CONFIG).encode(), "config.json")  # with a BOM
    assert loaded == LoadedConfig(
        config=FRESH_CONFIG, name="config.json", origin="upload", source="uploaded file 'config.json'"
    )


# ---- catalog index -------------------------------------------------------------------------------


def test_catalog_entries_in_file_order(tiny_catalog: Path) -> None:
    assert [e.repo_id for e in catalog_entries(tiny_catalog)] == ["acme/Tiny-Llama-1B", "acme/Small-Qwen-2B"]


@pytest.mark.parametrize(
    ("query", "expected_first"),
    [
        ("tiny-llama", "acme/Tiny-Llama-1B"),  # alias
        ("qwen", "acme/Small-Qwen-2B"),  # substring of the id
        ("small qwen 2b", "acme/Small-Qwen-2B"),  # punctuation and spaces ignored
        ("Tiny-Lama-1B", "acme/Tiny-Llama-1B"),  # typo: difflib
    ],
)
def test_search_catalog(tiny_catalog: Path, query: str, expected_first: str) -> None:
    assert search_catalog(query, tiny_catalog)[0].repo_id == expected_first


def test_search_catalog_empty_query_and_no_match(tiny_catalog: Path) -> None:
    assert len(search_catalog("", tiny_catalog)) == 2
    assert search_catalog("mixtral", tiny_catalog) == []


@pytest.mark.parametrize(
    ("index", "fragment"),
    [
        ({"repo_id": "a/b"}, "must be a YAML list"),
        ([{"repo_id": "a/b", "file": "a--b.json", "family": "x", "source": "s", "colour": "red"}], "entry 0"),
        (
            [
                {"repo_id": "a/b", "file": "a--b.json", "family": "x", "source": "s", "aliases": ["ab"]},
                {"repo_id": "a/c", "file": "a--c.json", "family": "x", "source": "s", "aliases": ["AB"]},
            ],
            "'ab' is claimed by two entries (a/b and a/c)",
        ),
    ],
    ids=["not a list", "unknown key", "alias claimed twice"],
)
def test_bad_catalog_index(tmp_path: Path, index: object, fragment: str) -> None:
    (tmp_path / "index.yaml").write_text(yaml.safe_dump(index))
    with pytest.raises(ConfigError, match=f"catalog index .*{re.escape(fragment)}"):
        catalog_entries(tmp_path)


def test_catalog_folder_without_index(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"has no index\.yaml"):
        catalog_entries(tmp_path)


@pytest.mark.skipif(not (DEFAULT_CATALOG_DIR / "index.yaml").exists(), reason="bundled catalog not filled yet")
def test_bundled_catalog_loads_every_entry(hub: HubStandin) -> None:
    entries = catalog_entries()
    assert entries
    for entry in entries:
        loaded = load_config(entry.repo_id)
        assert loaded.origin == "catalog" and loaded.name == entry.repo_id
        assert all(alias == alias.lower() for alias in entry.aliases)
    assert hub.requests == []


# ---- safetensors header counts (optional enrichment) ---------------------------------------------


def test_safetensors_counts_single_file(hub: HubStandin) -> None:
    weights = safetensors_header_only({"embed": ("BF16", [64, 16]), "scale": ("F32", [16])})
    hub.add_repo("acme/Fresh-7B", {"config.json": FRESH_CONFIG, "model.safetensors": weights})
    assert fetch_safetensors_param_counts("acme/Fresh-7B") == {"BF16": 1024, "F32": 16}
    assert all(r.path.endswith("model.safetensors") for r in hub.requests if r.method == "GET")


def test_safetensors_counts_sharded(hub: HubStandin) -> None:
    shard_1 = safetensors_header_only({"a": ("BF16", [8, 8])})
    shard_2 = safetensors_header_only({"b": ("BF16", [4, 4]), "c": ("F8_E4M3", [10])})
    index = {
        "metadata": {"total_size": len(shard_1) + len(shard_2)},
        "weight_map": {
            "a": "model-00001-of-00002.safetensors",
            "b": "model-00002-of-00002.safetensors",
            "c": "model-00002-of-00002.safetensors",
        },
    }
    hub.add_repo(
        "acme/Sharded",
        {
            "config.json": FRESH_CONFIG,
            "model.safetensors.index.json": index,
            "model-00001-of-00002.safetensors": shard_1,
            "model-00002-of-00002.safetensors": shard_2,
        },
    )
    assert fetch_safetensors_param_counts("acme/Sharded") == {"BF16": 80, "F8_E4M3": 10}


@pytest.mark.parametrize("repo_id", ["acme/Missing", "acme/No-Safetensors", "not a repo!!"])
def test_safetensors_counts_unknown_is_none(hub: HubStandin, repo_id: str) -> None:
    hub.add_repo("acme/No-Safetensors", {"config.json": FRESH_CONFIG, "pytorch_model.bin": b"\x00"})
    assert fetch_safetensors_param_counts(repo_id) is None


# ---- import hygiene ------------------------------------------------------------------------------


def test_sources_imports_neither_streamlit_nor_torch() -> None:
    code = (
        "import sys, planner.model.sources; "
        "bad = [m for m in ('streamlit', 'torch') if m in sys.modules]; "
        "sys.exit(f'imported {bad}' if bad else 0)"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=Path(__file__).parents[1])
    assert result.returncode == 0, result.stderr
