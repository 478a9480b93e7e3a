"""The command line against hostile input: every numeric flag bounded, secrets masked, exit statuses.

Three parts, all offline and in-process through ``planner.cli.main`` (capsys captures stdout and
stderr):

- numbers: NaN and infinity in every float flag of every command, a 40-digit integer in every
  integer flag, and a table of bad values with the expected message and exit status;
- secrets: a token from each place one can come from (--hf-token, --hf-token=, a mistyped
  --hf_token, $HF_TOKEN, $HUGGING_FACE_HUB_TOKEN, the saved login files, an hf_... string, the
  password in $HF_ENDPOINT) never appears in stdout or stderr, while numbers are never masked;
- exit statuses: the EXIT_CODES table (2 usage, 1 runtime, 130 interrupted).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import pytest
from pydantic import ValidationError

from planner import cli
from planner.cli import EXIT_CODES, collect_secrets, error_rule, main, mask, masked_output
from planner.commands.common import Number
from planner.errors import (
    ConfigError,
    GatedModelError,
    HubUnavailableError,
    ModelNotFoundError,
    PlannerError,
    ScenarioError,
)
from planner.scenario import MAX_TOKENS, RequestShape, Scenario
from planner.serve.workload import MAX_REQUESTS, FixedLength, LognormalLength, PoissonArrivals
from planner.serve.workload import Workload as Traffic
from tests.conftest import CLOSED_LOCAL_ENDPOINT

ROOT = Path(__file__).resolve().parent.parent
CATALOG = ROOT / "planner" / "model" / "catalog"
MODEL = "llama3.1-8b"


def run_cli(capsys: pytest.CaptureFixture[str], argv: list[str]) -> tuple[int, str, str]:
    code = main(argv)
    out, err = capsys.readouterr()
    return code, out, err


# ----------------------------------------------------------------------------- every numeric flag


def _numeric_flags() -> list[tuple[str, str, Number]]:
    """(command, flag, type) for every flag whose type is a Number, over every command."""
    parser = cli.build_parser()
    subparsers = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    found = []
    for name, sub in subparsers.choices.items():
        for action in sub._actions:
            if action.option_strings and isinstance(action.type, Number):
                found.append((name, action.option_strings[0], action.type))
    return found


NUMERIC = _numeric_flags()
FLOATS = [(c, f) for c, f, t in NUMERIC if t.kind is float]
INTS = [(c, f) for c, f, t in NUMERIC if t.kind is int]


def test_every_numeric_flag_has_a_checked_type():
    """No command takes a bare int or float: every number goes through Number (finite, bounded)."""
    parser = cli.build_parser()
    subparsers = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    bare = [
        f"{name} {action.option_strings[0]}"
        for name, sub in subparsers.choices.items()
        for action in sub._actions
        if action.type in (int, float)
    ]
    assert bare == []
    assert len(FLOATS) >= 20 and len(INTS) >= 40  # simulate, slo, score, validate, plan, ... all covered
    unbounded = [f"{c} {f}" for c, f, t in NUMERIC if t.le is None and t.lt is None and t.kind is int]
    assert unbounded == []  # every integer has an upper bound


@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "NaN", "Infinity"])
@pytest.mark.parametrize(("command", "flag"), FLOATS, ids=[f"{c} {f}" for c, f in FLOATS])
def test_non_finite_float_is_refused_naming_the_flag_and_range(capsys, command, flag, value):
    code, out, err = run_cli(capsys, [command, f"{flag}={value}"])  # '=': argparse takes -inf for a flag otherwise
    assert code == 2 and out == ""
    last = err.strip().splitlines()[-1]
    assert last.startswith(f"error: {flag} must be a finite number"), last
    assert f"(got '{value}')" in last and any(op in last for op in (">", "<"))  # the range is stated
    assert "Traceback" not in err


@pytest.mark.parametrize(("command", "flag"), INTS, ids=[f"{c} {f}" for c, f in INTS])
def test_huge_integer_is_refused_naming_the_flag(capsys, command, flag):
    code, out, err = run_cli(capsys, [command, flag, "1" + "0" * 40])
    assert code == 2 and out == ""
    assert f"error: {flag} must be" in err and ("less than or equal to" in err or "digit number" in err)


BAD_VALUES = [
    # (id, argv, message fragment, exit status)
    (
        "utilization inf",
        ["plan", MODEL, "--gpu-memory-utilization", "inf"],
        "--gpu-memory-utilization must be a finite number > 0 and <= 1 (got 'inf')",
        2,
    ),
    (
        "non-torch GiB nan",
        ["plan", MODEL, "--non-torch-memory-gib", "nan"],
        "--non-torch-memory-gib must be a finite number >= 0 and <= 1,024 (got 'nan')",
        2,
    ),
    (
        "graph GiB above 1 TiB",
        ["plan", MODEL, "--cuda-graph-memory-gib", "5000"],
        "--cuda-graph-memory-gib must be less than or equal to 1,024 (got 5000)",
        2,
    ),
    (
        "simulate input-len nan",
        ["simulate", MODEL, "--input-len", "nan"],
        "--input-len must be a finite number > 0 and <= 16,777,216 (got 'nan')",
        2,
    ),
    ("qps inf", ["simulate", MODEL, "--qps", "inf"], "instead of an infinite rate", 2),
    (
        "block size 10^9",
        ["simulate", MODEL, "--block-size", "1000000000"],
        "--block-size must be less than or equal to 4,096 (got 1000000000)",
        2,
    ),
    (
        "num-requests 10^9",
        ["simulate", MODEL, "--num-requests", "1000000000"],
        "--num-requests must be less than or equal to 1,000,000 (got 1000000000)",
        2,
    ),
    ("concurrency 0", ["simulate", MODEL, "--concurrency", "0"], "--concurrency must be greater than or equal to 1", 2),
    ("seed negative", ["simulate", MODEL, "--seed", "-1"], "--seed must be greater than or equal to 0 (got -1)", 2),
    (
        "hit rate nan",
        ["simulate", MODEL, "--prefix-cache-hit-rate", "nan"],
        "--prefix-cache-hit-rate must be a finite number >= 0 and <= 1",
        2,
    ),
    (
        "std negative",
        ["simulate", MODEL, "--length-dist", "lognormal", "--input-len-std", "-5"],
        "--input-len-std must be greater than or equal to 0 (got -5)",
        2,
    ),
    (
        "max-model-len above 2^24",
        ["plan", MODEL, "--max-model-len", "100000000"],
        "--max-model-len must be less than or equal to 16,777,216",
        2,
    ),
    (
        "max-num-seqs 10^6",
        ["plan", MODEL, "--max-num-seqs", "1000000"],
        "--max-num-seqs must be less than or equal to 65,536",
        2,
    ),
    (
        "batched tokens 0",
        ["plan", MODEL, "--max-num-batched-tokens", "0"],
        "--max-num-batched-tokens must be greater than or equal to 1 (got 0)",
        2,
    ),
    ("batch 10^6", ["latency", MODEL, "--batch", "1000000"], "--batch must be less than or equal to 65,536", 2),
    (
        "tp 5000 digits",
        ["plan", MODEL, "--tp", "9" * 5000],
        "--tp must be >= 1 and <= 1,024 (got a 5,000-digit number)",
        2,
    ),
    ("num-gpus 10^6", ["plan", MODEL, "--num-gpus", "1000000"], "--num-gpus must be less than or equal to 65,536", 2),
    ("pp 0", ["plan", MODEL, "--pp", "0"], "--pp must be greater than or equal to 1 (got 0)", 2),
    (
        "context-len 10^9",
        ["inspect", MODEL, "--context-len", "1000000000"],
        "--context-len must be less than or equal to 16,777,216",
        2,
    ),
    ("seq-len 0", ["roofline", MODEL, "--seq-len", "0"], "--seq-len must be greater than or equal to 1 (got 0)", 2),
    (
        "slo tp list with 0",
        ["slo", MODEL, "--qps", "5", "--p99-ttft", "1", "--tp", "1,0"],
        "--tp must be greater than or equal to 1 (got 0)",
        2,
    ),
    (
        "slo 33 tp values",
        ["slo", MODEL, "--qps", "5", "--p99-ttft", "1", "--tp", ",".join(["1"] * 33)],
        "a candidate list takes at most 32",
        2,
    ),
    (
        "slo max-num-seqs list",
        ["slo", MODEL, "--qps", "5", "--p99-ttft", "1", "--max-num-seqs", "auto,10000000"],
        "--max-num-seqs must be less than or equal to 65,536",
        2,
    ),
    ("slo target nan", ["slo", MODEL, "--qps", "5", "--p99-ttft", "nan"], "--p99-ttft must be a finite number > 0", 2),
    (
        "slo target above a day",
        ["slo", MODEL, "--qps", "5", "--p99-e2e", "1e9"],
        "--p99-e2e must be less than or equal to 86,400",
        2,
    ),
    (
        "slo tolerance 1",
        ["slo", MODEL, "--qps", "5", "--p99-ttft", "1", "--tolerance", "1"],
        "--tolerance must be less than 1 (got 1)",
        2,
    ),
    (
        "slo probes 10^9",
        ["slo", MODEL, "--qps", "5", "--p99-ttft", "1", "--requests-per-probe", "1000000000"],
        "--requests-per-probe must be less than or equal to 1,000,000",
        2,
    ),
    (
        "score rate inf",
        ["score", "bench.json", "--request-rate", "inf"],
        "--request-rate must be a finite number > 0",
        2,
    ),
    ("score index 10^9", ["score", "bench.json", "--index", "1000000000"], "--index must be less than or equal to", 2),
    (
        "validate time limit nan",
        ["validate", MODEL, "--time-limit", "nan"],
        "--time-limit must be a finite number > 0",
        2,
    ),
    (
        "validate cpu threads -1",
        ["validate", MODEL, "--cpu-threads", "-1"],
        "--cpu-threads must be greater than or equal to 1 (got -1)",
        2,
    ),
    (
        "validate memory fraction 0",
        ["validate", MODEL, "--memory-fraction", "0"],
        "--memory-fraction must be greater than 0 (got 0)",
        2,
    ),
    (
        "validate scale 2",
        ["validate", MODEL, "--models-scale", "2"],
        "--models-scale must be less than or equal to 1",
        2,
    ),
    ("not a number", ["plan", MODEL, "--gpu-memory-utilization", "lots"], "invalid float value: 'lots'", 2),
    ("not an integer", ["simulate", MODEL, "--num-requests", "1e3"], "invalid int value: '1e3'", 2),
]


@pytest.mark.parametrize(("argv", "fragment", "status"), [b[1:] for b in BAD_VALUES], ids=[b[0] for b in BAD_VALUES])
def test_bad_value_table(capsys, argv, fragment, status):
    code, out, err = run_cli(capsys, argv)
    assert code == status, err
    assert out == ""
    assert err.strip().splitlines()[-1].startswith("error: ")
    assert fragment in err, err
    assert "Traceback" not in err and "internal error" not in err


def test_the_library_refuses_the_same_values():
    """The bounds live on the pydantic fields: a library caller or the app gets them too."""
    cases = [
        lambda: Scenario(gpu_memory_utilization=float("nan")),
        lambda: Scenario(block_size=10**9),
        lambda: Scenario(max_model_len=MAX_TOKENS + 1),
        lambda: Scenario(non_torch_memory_bytes=2**41),
        lambda: RequestShape(batch_size=10**6),
        lambda: Traffic(num_requests=MAX_REQUESTS + 1),
        lambda: Traffic(prefix_cache_hit_rate=float("nan")),
        lambda: Traffic(seed=2**64),
        lambda: FixedLength(tokens=MAX_TOKENS + 1),
        lambda: LognormalLength(mean_tokens=float("inf"), std_tokens=1),
        lambda: PoissonArrivals(request_rate_per_s=float("inf")),
    ]
    for make in cases:
        with pytest.raises(ValidationError):
            make()
    assert Traffic(num_requests=MAX_REQUESTS).num_requests == MAX_REQUESTS  # the bound itself is allowed
    assert "16,777,216" in (Scenario.model_fields["max_model_len"].description or "")  # --help states it


def test_a_trace_longer_than_the_bound_is_refused(tmp_path):
    from planner.serve.workload import load_trace

    trace = tmp_path / "trace.csv"
    trace.write_text("arrival_time_s,input_tokens,output_tokens\n0,100,10\n0,1" + "0" * 12 + ",10\n")
    with pytest.raises(ConfigError, match="whole number of tokens from 1 to 16,777,216"):
        load_trace(trace)


def test_help_states_the_bounds(capsys):
    code, out, _ = run_cli(capsys, ["simulate", "--help"])
    assert code == 0
    flat = " ".join(out.split())
    assert "at most 1,000,000" in flat and "1 to 4,096" in flat and "1 to 65,536" in flat


# ------------------------------------------------------------------------------ numbers stay


def test_plan_with_max_num_batched_tokens_2048_is_valid_json(capsys):
    code, out, err = run_cli(
        capsys, ["plan", "meta-llama/Llama-3.1-8B", "--max-num-batched-tokens", "2048", "--format", "json"]
    )
    assert code == 0, err
    data = json.loads(out)
    assert data["resolved"]["max_num_batched_tokens"] == 2048
    assert "2048" in out and "***" not in out


def test_numbers_are_never_masked():
    secrets = collect_secrets(["plan", "--hf-token", "16777216", "--max-num-batched-tokens", "2048", "--token", "1e10"])
    assert secrets == []
    assert (
        mask("max_num_batched_tokens 2048, 16777216 tokens", secrets) == "max_num_batched_tokens 2048, 16777216 tokens"
    )
    # a short --hf-token value (under 8 characters) is not a plausible token and masks nothing
    assert collect_secrets(["--hf-token", "abc"]) == []


# -------------------------------------------------------------------------------- secrets

SECRET = "s3cr3t-T0ken-Value"  # not hf_-shaped: only the literal masking can catch it


def _echoes(capsys, argv: list[str]) -> tuple[int, str]:
    """Run a command that quotes the secret back ('unknown GPU ...'); stdout + stderr."""
    code, out, err = run_cli(capsys, argv)
    return code, out + err


@pytest.mark.parametrize(
    ("source", "argv", "env"),
    [
        ("--hf-token X", ["--hf-token", SECRET], {}),
        ("--hf-token=X", [f"--hf-token={SECRET}"], {}),
        ("HF_TOKEN", [], {"HF_TOKEN": SECRET}),
        ("HUGGING_FACE_HUB_TOKEN", [], {"HUGGING_FACE_HUB_TOKEN": SECRET}),
    ],
)
def test_a_token_from_each_source_never_appears(capsys, monkeypatch, source, argv, env):
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    code, text = _echoes(capsys, ["plan", MODEL, *argv, "--gpu", SECRET])
    assert code == 2
    assert SECRET not in text and "unknown GPU '***'" in text


def test_a_mistyped_token_flag_that_argparse_quotes_back_is_masked(capsys):
    for flag in ("--hf_token", "--HF-TOKEN", "--hf-tokn", "--token"):
        code, text = _echoes(capsys, ["plan", MODEL, flag, SECRET])
        assert code == 2 and "unrecognized arguments" in text
        assert SECRET not in text, flag


def test_the_saved_login_never_appears(capsys, monkeypatch, tmp_path):
    home = tmp_path / "hf"
    home.mkdir()
    saved, stored = "saved-login-T0ken", "stored-login-T0ken"
    (home / "token").write_text(saved + "\n")
    (home / "stored_tokens").write_text(f"[work]\nhf_token = {stored}\n")
    monkeypatch.setenv("HF_HOME", str(home))
    monkeypatch.delenv("HF_TOKEN_PATH", raising=False)
    monkeypatch.delenv("HF_STORED_TOKENS_PATH", raising=False)
    for secret in (saved, stored):
        code, text = _echoes(capsys, ["plan", MODEL, "--gpu", secret])
        assert code == 2 and secret not in text and "***" in text


def test_an_hf_shaped_token_is_masked_wherever_it_is(capsys, tmp_path):
    token = "hf_" + "Ab1" * 12
    folder = tmp_path / token  # in a path that the result echoes on stdout
    folder.mkdir()
    (folder / "config.json").write_text((CATALOG / "meta-llama--Llama-3.2-1B.json").read_text())
    code, out, err = run_cli(capsys, ["inspect", str(folder), "--format", "json"])
    assert code == 0, err
    assert token not in out + err
    assert "***" in json.loads(out)["source"]  # still valid JSON, with the token masked


def test_a_password_in_hf_endpoint_is_masked_in_warnings(capsys, monkeypatch):
    password = "EndpointPassw0rd"
    monkeypatch.setenv("HF_ENDPOINT", CLOSED_LOCAL_ENDPOINT.replace("http://", f"http://planner:{password}@"))
    code, out, err = run_cli(capsys, ["inspect", "meta-llama/Llama-3.1-8B", "--source", "hub", "--format", "json"])
    assert code == 0, err
    assert "warning:" in err and "Hub unreachable" in err  # the warning that names the endpoint
    assert password not in out + err and "planner:" not in err
    assert "http://***@127.0.0.1:9" in err
    code, out, err = run_cli(capsys, ["inspect", "acme/not-in-the-catalog"])  # the error names it too
    assert code == 1 and password not in out + err


def test_only_the_secret_part_of_a_url_is_a_literal(monkeypatch):
    monkeypatch.setenv("HF_ENDPOINT", "https://meta-llama:Passw0rd%2F123@hub.example")
    secrets = collect_secrets([])
    assert {"Passw0rd%2F123", "Passw0rd/123"} <= set(secrets) and "meta-llama" not in secrets
    assert mask("meta-llama/Llama-3.1-8B", secrets) == "meta-llama/Llama-3.1-8B"
    monkeypatch.setenv("HF_ENDPOINT", "https://a1b2c3d4e5f6@hub.example")  # a token as the user name
    assert "a1b2c3d4e5f6" in collect_secrets([])


def test_masked_output_masks_prints_and_partial_lines(capsys):
    with masked_output([SECRET]):
        print(f"to stdout {SECRET}")
        sys.stderr.write("to stderr s3cr3t-")
        sys.stderr.write("T0ken-Value, in two pieces\n")
        print("https://user:pw@example.org/x", file=sys.stderr, end="")
    out, err = capsys.readouterr()
    assert out == "to stdout ***\n"
    assert err == "to stderr ***, in two pieces\nhttps://***@example.org/x"


def test_the_real_entry_point_masks_the_environment_token():
    token = "hf_" + "Zz9" * 12
    env = {
        "HF_TOKEN": token,
        "HF_ENDPOINT": CLOSED_LOCAL_ENDPOINT,
        "PYTHONPATH": str(ROOT),
        "PATH": "/usr/bin:/bin",
        "HF_HOME": "/nonexistent-hf-home",
    }
    proc = subprocess.run(
        [sys.executable, "-m", "planner", "plan", MODEL, "--gpu", token],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2
    assert token not in proc.stdout + proc.stderr and "unknown GPU '***'" in proc.stderr


# ------------------------------------------------------------------------------ exit statuses


@pytest.mark.parametrize(
    ("error", "status"),
    [
        (cli.UsageError("usage", "bad"), 2),
        (ConfigError("bad config.json"), 2),
        (ScenarioError("impossible"), 2),
        (ModelNotFoundError("no such repo"), 2),
        (GatedModelError("gated"), 2),
        (PlannerError("generic"), 2),
        (HubUnavailableError("offline"), 1),
        (FileNotFoundError(2, "No such file", "x.log"), 1),
        (PermissionError(13, "Permission denied", "/root/out"), 1),
        (RuntimeError("a bug"), 1),
        (RecursionError("deep"), 1),
        (KeyboardInterrupt(), 130),
    ],
    ids=lambda v: type(v).__name__ if isinstance(v, BaseException) else str(v),
)
def test_exit_code_table(error, status):
    assert error_rule(error).exit_code == status


def test_validation_error_is_usage():
    with pytest.raises(ValidationError) as caught:
        Scenario(tp=0)
    assert error_rule(caught.value) is EXIT_CODES[ValidationError] and error_rule(caught.value).exit_code == 2


def test_runtime_failures_exit_1_and_usage_exits_2(capsys, tmp_path, monkeypatch):
    code, _, err = run_cli(capsys, ["reconcile", str(tmp_path / "missing.log")])  # a path the user named: usage
    assert code == 2 and "error: no such file" in err
    unreadable = tmp_path / "server.log"
    unreadable.mkdir()  # a folder where the log should be: the file system refuses to read it
    code, _, err = run_cli(capsys, ["reconcile", str(unreadable)])
    assert code == 1 and "is a folder, not a file" in err
    code, _, err = run_cli(capsys, ["inspect", "acme/not-in-the-catalog"])
    assert code == 1 and "cannot get 'acme/not-in-the-catalog' from the Hub" in err
    code, _, err = run_cli(capsys, ["plan", MODEL, "--tp", "3"])
    assert code == 2 and "does not divide" in err
    code, _, err = run_cli(capsys, ["plan", MODEL, "--frobnicate"])
    assert code == 2 and "unrecognized arguments" in err

    from planner.commands import hardware

    def broken(args):
        raise ZeroDivisionError("oops")

    monkeypatch.setattr(hardware, "run", broken)
    code, out, err = run_cli(capsys, ["hardware"])
    assert code == 1 and out == "" and "internal error (ZeroDivisionError: oops)" in err and "Traceback" not in err

    def interrupted(args):
        raise KeyboardInterrupt

    monkeypatch.setattr(hardware, "run", interrupted)
    code, _, err = run_cli(capsys, ["hardware"])
    assert code == 130 and "error: interrupted" in err
