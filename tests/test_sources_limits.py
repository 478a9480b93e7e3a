"""Bounded work when reading configs: hostile JSON is refused with the key named, and a Hub load has one deadline.

JSON cases run through every way a config is read from a user (upload, local file, the Hub);
Hub cases run the real huggingface_hub client against the stand-in Hub (``tests/hub_standin.py``)
misbehaving: trickling, stalling, oversized or endless bodies. Every case has a time bound far
below what the same input cost before (a trickle never timed out; a stall took ~70 s).
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest

from planner.errors import ConfigError, HubUnavailableError
from planner.model.sources import (
    MAX_CONFIG_BYTES,
    MAX_JSON_DEPTH,
    fetch_safetensors_param_counts,
    load_config,
    load_uploaded,
    parse_json,
)
from tests.conftest import TINY_LLAMA_CONFIG
from tests.hub_standin import HubStandin, safetensors_header_only

DEADLINE_S = 1.0
SLACK_S = 0.75  # thread start, HTTP and parsing on a loaded 2-core machine


def _config_text(**raw_values: str) -> bytes:
    """TINY_LLAMA_CONFIG with some values replaced by raw JSON text (which json.dumps could not write)."""
    text = json.dumps({**TINY_LLAMA_CONFIG, **{key: f"@{key}@" for key in raw_values}})
    for key, raw in raw_values.items():
        text = text.replace(f'"@{key}@"', raw)
    return text.encode()


def _nested(depth: int) -> bytes:
    """A config whose 'rope_scaling' holds lists nested ``depth`` levels deep (the config object is level 1)."""
    return _config_text(rope_scaling="[" * (depth - 1) + "]" * (depth - 1))


# ---- JSON: table of hostile inputs -------------------------------------------------------------

HOSTILE_JSON = [
    # id, bytes, fragments of the message
    ("nested [ x 200 KB", b"[" * 200_000, ["nesting deeper than 64 levels"]),
    ("nested { x 200 KB", b'{"a":' * 40_000, ["nesting deeper than 64 levels"]),
    ("65 levels", _nested(MAX_JSON_DEPTH + 1), ["nesting deeper than 64 levels at key 'rope_scaling"]),
    ("5,000-digit integer", _config_text(vocab_size="9" * 5000), ["number with 5,000 digits", "at key 'vocab_size'"]),
    ("5,000-digit negative", _config_text(hidden_size="-" + "1" * 5000), ["number with 5,000 digits", "'hidden_size'"]),
    ("5,000-digit float", _config_text(rms_norm_eps="0." + "1" * 5000), ["number with 5,001 digits", "'rms_norm_eps'"]),
    ("1e400", _config_text(hidden_size="1e400"), ["1e400 overflows to infinity", "at key 'hidden_size'"]),
    ("-1e400", _config_text(intermediate_size="-1e400"), ["-1e400 overflows to infinity", "'intermediate_size'"]),
    ("Infinity", _config_text(num_hidden_layers="Infinity"), ["Infinity is not a finite", "'num_hidden_layers'"]),
    ("-Infinity", _config_text(vocab_size="-Infinity"), ["-Infinity is not a finite number", "'vocab_size'"]),
    ("NaN", _config_text(rms_norm_eps="NaN"), ["NaN is not a finite number", "at key 'rms_norm_eps'"]),
    (
        "NaN deep inside",
        _config_text(text_config='{"layer_types": ["full_attention", NaN]}'),
        ["NaN is not a finite number", "at key 'text_config.layer_types[1]'"],
    ),
    ("UTF-16", json.dumps(TINY_LLAMA_CONFIG).encode("utf-16"), ["is UTF-16 text; a config.json is UTF-8"]),
    ("binary", b"\x00\x9f\x92\x96" * 100, ["is not UTF-8 text (bad byte at offset 1)"]),
    ("just a number", b"1" * 5000, ["number with 5,000 digits at the top level"]),
]


@pytest.mark.parametrize(("data", "fragments"), [c[1:] for c in HOSTILE_JSON], ids=[c[0] for c in HOSTILE_JSON])
def test_hostile_upload_is_refused_with_the_key(data: bytes, fragments: list[str]) -> None:
    started = time.monotonic()
    with pytest.raises(ConfigError) as caught:
        load_uploaded(data, "config.json")
    assert time.monotonic() - started < 1.0
    message = str(caught.value)
    assert message.startswith("uploaded file 'config.json'")
    for fragment in fragments:
        assert fragment in message, f"{fragment!r} not in {message!r}"


@pytest.mark.parametrize(("data", "fragments"), [c[1:] for c in HOSTILE_JSON], ids=[c[0] for c in HOSTILE_JSON])
def test_hostile_local_file_is_refused_with_the_key(tmp_path: Path, data: bytes, fragments: list[str]) -> None:
    path = tmp_path / "config.json"
    path.write_bytes(data)
    with pytest.raises(ConfigError) as caught:
        load_config(str(path))
    assert str(path) in str(caught.value)
    assert all(fragment in str(caught.value) for fragment in fragments)


def test_hostile_hub_config_is_refused_and_not_cached(hub: HubStandin, tmp_path: Path) -> None:
    hub.add_repo("acme/Huge-Int", {"config.json": _config_text(vocab_size="7" * 5000)})
    with pytest.raises(
        ConfigError,
        match=r"config\.json of acme/Huge-Int from http://127\.0\.0\.1:\d+/.*"
        r"number with 5,000 digits at key 'vocab_size'",
    ):
        load_config("acme/Huge-Int")
    assert not list((tmp_path / "hf_home" / "hub").glob("**/snapshots/*/config.json"))


def test_depth_limit_is_exact() -> None:
    assert parse_json(_nested(MAX_JSON_DEPTH), "deep.json")["model_type"] == "llama"
    with pytest.raises(ConfigError, match="nesting deeper than 64 levels"):
        parse_json(_nested(MAX_JSON_DEPTH + 1), "deep.json")


def test_ordinary_numbers_are_unchanged() -> None:
    data = b'{"a": 1e-05, "b": -0.0, "c": 18446744073709551615, "d": 1.7976931348623157e308, "e": [0, -3]}'
    expected = {"a": 1e-05, "b": -0.0, "c": 2**64 - 1, "d": 1.7976931348623157e308, "e": [0, -3]}
    assert parse_json(data, "x.json") == expected


def test_size_cap_applies_to_any_json() -> None:
    with pytest.raises(ConfigError, match=r"is 5\.0 MiB; a config\.json is a few KiB"):
        parse_json(b" " * (5 * 2**20), "big.json")
    assert parse_json(b" " * (5 * 2**20) + b"[]", "bench.json", max_bytes=8 * 2**20) == []


# ---- the Hub: one deadline, one size cap -------------------------------------------------------


def _timed_load(name: str, **kwargs):
    started = time.monotonic()
    try:
        return load_config(name, timeout_s=DEADLINE_S, **kwargs), time.monotonic() - started
    except Exception as err:  # noqa: BLE001 (returned for the test to check)
        return err, time.monotonic() - started


MISBEHAVING = [
    # id, StandinRepo misbehaviour; each would take minutes (or forever) without a deadline
    ("body one byte every 0.3 s", {"trickle_s": 0.3}),
    ("headers one byte every 0.3 s", {"head_trickle_s": 0.3}),
    ("body stalls after 10 bytes", {"stall_after_bytes": 10}),
    ("every answer 0.6 s late (two requests: 1.2 s)", {"delay_s": 0.6}),
]


@pytest.mark.parametrize("misbehaviour", [c[1] for c in MISBEHAVING], ids=[c[0] for c in MISBEHAVING])
def test_one_deadline_for_the_whole_load(hub: HubStandin, misbehaviour: dict) -> None:
    hub.add_repo("acme/Slow-7B", {"config.json": TINY_LLAMA_CONFIG}, **misbehaviour)
    result, took_s = _timed_load("acme/Slow-7B")
    assert took_s < DEADLINE_S + SLACK_S
    assert isinstance(result, HubUnavailableError), result
    assert "(timeout after 1 s)" in str(result) and "no cached or catalog copy" in str(result)


def test_a_stalled_download_falls_back_to_the_cache_in_time(hub: HubStandin) -> None:
    repo = hub.add_repo("acme/Stalls-7B", {"config.json": TINY_LLAMA_CONFIG})
    load_config("acme/Stalls-7B")
    repo.files["config.json"] = json.dumps({**TINY_LLAMA_CONFIG, "num_hidden_layers": 8}).encode()
    repo.commit = "f" * 40  # a new commit: the cached copy is stale, so a GET is needed, and it stalls
    repo.stall_after_bytes = 10
    result, took_s = _timed_load("acme/Stalls-7B")
    assert took_s < DEADLINE_S + SLACK_S
    assert result.origin == "hub-cache" and result.config == TINY_LLAMA_CONFIG
    assert result.warnings[0].startswith("Hub unreachable (timeout after 1 s); using the cached copy")


def test_a_50_mb_config_is_refused_from_its_size_alone(hub: HubStandin) -> None:
    hub.add_repo("acme/Big", {"config.json": b" " * (50 * 2**20)})
    result, _ = _timed_load("acme/Big")
    assert isinstance(result, ConfigError), result
    assert "config.json of acme/Big from http://127.0.0.1:" in str(result)
    assert "is 50.0 MiB; a config.json is a few KiB (the limit is 4 MiB)" in str(result)
    assert hub.count("GET") == 0  # the HEAD's size was enough


def test_a_body_longer_than_announced_is_cut_at_the_cap(hub: HubStandin, tmp_path: Path) -> None:
    hub.add_repo("acme/Endless", {"config.json": TINY_LLAMA_CONFIG}, endless_body=True)
    result, took_s = _timed_load("acme/Endless")
    assert took_s < DEADLINE_S + SLACK_S
    assert isinstance(result, ConfigError), result
    assert "(still sending) is 4.0 MiB" in str(result) or "(still sending) is 4.1 MiB" in str(result)
    cached = list((tmp_path / "hf_home" / "hub").glob("**/blobs/*"))
    assert all(p.stat().st_size <= MAX_CONFIG_BYTES for p in cached) and not any("incomplete" in p.name for p in cached)


def test_safetensors_counts_give_up_at_the_deadline(hub: HubStandin) -> None:
    weights = safetensors_header_only({"w": ("BF16", [4, 8])})
    files = {"config.json": TINY_LLAMA_CONFIG, "model.safetensors": weights}
    hub.add_repo("acme/Slow-Weights", files, head_trickle_s=0.3)
    started = time.monotonic()
    assert fetch_safetensors_param_counts("acme/Slow-Weights", timeout_s=DEADLINE_S) is None
    assert time.monotonic() - started < DEADLINE_S + SLACK_S


@pytest.mark.parametrize("timeout_s", [0, -1, float("nan"), float("inf"), 1e9])
def test_timeout_must_be_a_real_deadline(timeout_s: float) -> None:
    with pytest.raises(ValueError, match="timeout_s must be a number of seconds"):
        load_config("acme/Anything", timeout_s=timeout_s)


def test_abandoned_fetches_end_when_the_server_lets_go(hub: HubStandin) -> None:
    """The caller leaves at the deadline; the worker thread it left ends once the server stops sending."""
    hub.add_repo("acme/Trickle", {"config.json": TINY_LLAMA_CONFIG}, head_trickle_s=0.2)
    _timed_load("acme/Trickle")
    hub.stop()
    ends_by = time.monotonic() + 3.0
    while any(t.name == "planner-hub-fetch" for t in threading.enumerate()) and time.monotonic() < ends_by:
        time.sleep(0.05)
    assert not any(t.name == "planner-hub-fetch" for t in threading.enumerate())


def test_credentials_in_an_endpoint_never_reach_a_message_or_a_warning():
    """HF_ENDPOINT=https://user:TOKEN@host: errors and LoadedConfig warnings/sources show ***@host (CLI and app)."""
    from planner.errors import PlannerError, redact_secrets
    from planner.model.sources import LoadedConfig

    secret = "hf_" + "A1b2C3d4" * 4
    url = f"https://alice:{secret}@hub.example/api"
    assert secret not in str(PlannerError(f"cannot reach {url}", hint=f"check {url}"))
    loaded = LoadedConfig(config={}, name="x", origin="hub", source=url, warnings=[f"Hub at {url} unreachable"])
    assert secret not in loaded.source and all(secret not in w for w in loaded.warnings)
    assert "alice" not in loaded.source and "***@hub.example" in loaded.source
    assert redact_secrets("2048 tokens, max-num-batched-tokens 2048") == "2048 tokens, max-num-batched-tokens 2048"
