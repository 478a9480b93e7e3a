"""Run exported deployment files through the engines' own parsers; print each engine's verdict.

Run inside the engines' environment that .ci/run builds (.venv-engines/, see tools/engines-requirements.txt):

    .venv-engines/bin/python tools/check_exports.py --model-config
    meta-llama/Llama-3.1-8B=planner/model/catalog/meta-llama--Llama-3.1-8B.json \
        out/vllm-latency.yaml out/vllm-latency.sh out/sglang-latency.sh out/k8s-latency.yaml

What each file goes through (the file name says what it is, as planner.deploy.export names it):

* ``vllm-*.yaml``: ``vllm serve --config FILE`` through vLLM's own top-level parser with its ``serve``
  subcommand (vllm/entrypoints/cli/main.py builds the same), then every key must have reached the
  namespace with its value (vLLM drops some keys without a word), then
  ``AsyncEngineArgs.from_cli_args(...).create_engine_config()``, vLLM's whole config validation.
* ``vllm-*.sh``: the ``vllm serve`` command line, the same two steps (each node's command of a multi-node DP
  script; $LEADER_ADDR-style references read as 127.0.0.1, a start rank $((NODE_RANK*N)) as node 1's, N;
  a ``--headless`` command's engine config is built as ``vllm serve --headless`` builds it).
* ``sglang-*.sh``: the ``sglang serve`` command line through SGLang's ``prepare_server_args`` (the
  ServerArgs parser and its validation); a deprecation warning is a failure.
* ``k8s-*.yaml``: every object through kubernetes-validate (Kubernetes 1.37, strict); a LeaderWorkerSet
  through tools/schemas/leaderworkerset-v1.schema.json and its pod templates as PodTemplates; a
  Service named like a LeaderWorkerSet fails (the LWS controller then creates no headless Service);
  every ``vllm serve`` container command (leader and worker pods) through vLLM as above.

Only a model's config.json is needed (``--model-config REPO=PATH``): the checker serves a temporary
folder holding it instead of the Hub repo, and sets ``skip_tokenizer_init`` (no tokenizer offline).
There is no GPU here: vLLM's CUDA platform class runs with a declared device (``--capability``, default
9.0, an H100) and its compiled kernels stubbed (they are not needed to validate a config; the model
classes are imported in-process for vLLM's architecture inspection instead of in a subprocess).

Output: one JSON line per checked item ({"file": the path as given (then the object, for a manifest),
"check", "ok", "error": the engine's own message}); exit status 1 if any failed.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.abc
import importlib.machinery
import io
import json
import logging
import os
import re
import shlex
import shutil
import sys
import tempfile
import types
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, ClassVar

ROOT = Path(__file__).resolve().parent.parent
LWS_SCHEMA = ROOT / "tools" / "schemas" / "leaderworkerset-v1.schema.json"
K8S_VERSION = "1.37.0"
#: vLLM's compiled extension modules: they need libcuda / libtorch_cuda, which a CPU machine lacks.
VLLM_COMPILED = (
    "vllm._C_stable_libtorch",
    "vllm._moe_C_stable_libtorch",
    "vllm.vllm_flash_attn",
    "vllm._flashmla_C",
    "vllm._flashmla_extension_C",
    "vllm._qutlass_C",
    "vllm.cumem_allocator",
    "vllm._deepselect_C",
    "vllm._flashkda_C",
)
TORCH_OP_NAMESPACES = (
    "_C",
    "_moe_C",
    "_C_cache_ops",
    "_C_custom_ar",
    "_rocm_C",
    "_vllm_fa2_C",
    "_vllm_fa3_C",
    "_flashmla_C",
)
SHELL_VALUES = {"$NODE_RANK": "0", "$LEADER_ADDR:50000": "127.0.0.1:50000"}
#: Shell and Kubernetes references in a vLLM command, as a node would see them: an address for the leader's
#: ($LEADER_ADDR, $LWS_LEADER_ADDRESS, $(LWS_LEADER_ADDRESS)), node 1's value for a start rank $((VAR*N)).
_ADDRESS_REF = re.compile(r"^\$(\()?(LEADER_ADDR|LWS_LEADER_ADDRESS)(?(1)\))$")
_RANK_REF = re.compile(r"^\$\(\((NODE_RANK|LWS_WORKER_INDEX)\*(\d+)\)\)$")


def shell_value(word: str) -> str:
    """``word`` with a shell or Kubernetes variable reference replaced by a value a node would have."""
    if _ADDRESS_REF.match(word):
        return "127.0.0.1"
    rank = _RANK_REF.match(word)
    return rank.group(2) if rank else SHELL_VALUES.get(word, word)


# ------------------------------------------------------------------------------- results


def result(file: str, check: str, error: str | None) -> dict[str, Any]:
    return {"file": file, "check": check, "ok": error is None, "error": error}


def engine_error(run: Callable[[], Any]) -> str | None:
    """None if ``run`` passes, else the engine's own message (argparse's usage error included)."""
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            run()
    except SystemExit as exc:
        lines = [line for line in err.getvalue().splitlines() if "error:" in line]
        return (lines[-1] if lines else f"exit {exc.code}").strip()
    except Exception as exc:  # noqa: BLE001 - the engine's own validation error, whatever its type
        return f"{type(exc).__name__}: {exc}".strip()
    return None


# ------------------------------------------------------------------------ model configs


class Models:
    """Hub ids -> temporary folders holding only their config.json."""

    def __init__(self, mapping: dict[str, str]) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="check-exports-"))
        self.folders: dict[str, str] = {}
        for i, (repo, config) in enumerate(mapping.items()):
            folder = self.root / f"m{i}"
            folder.mkdir()
            shutil.copy(config, folder / "config.json")
            self.folders[repo] = str(folder)

    def local(self, model: str) -> str:
        return self.folders.get(model, model)

    def close(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)


# ------------------------------------------------------------------------------- vLLM


class _Stub(types.ModuleType):
    """A compiled module's stand-in: every attribute is another stub, calls return a (falsy) stub."""

    __path__: ClassVar[list[str]] = []

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return _Stub(f"{self.__name__}.{name}")

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return _Stub("result")

    def __bool__(self) -> bool:
        return False


class _StubFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, name: str, path: Any, target: Any = None) -> Any:
        if any(name == m or name.startswith(m + ".") for m in VLLM_COMPILED):
            return importlib.machinery.ModuleSpec(name, self, is_package=True)
        return None

    def create_module(self, spec: Any) -> types.ModuleType:
        return _Stub(spec.name)

    def exec_module(self, module: types.ModuleType) -> None:
        pass


def vllm_parser(capability: tuple[int, int]) -> Any:
    """vLLM's `vllm` parser with its `serve` subcommand, on a declared CUDA device."""
    sys.meta_path.insert(0, _StubFinder())
    import torch
    import torch.library

    for ns in TORCH_OP_NAMESPACES:
        setattr(torch.ops, ns, _Stub(f"torch.ops.{ns}"))
    impl = torch.library.Library.impl

    def lenient_impl(self: Any, *args: Any, **kwargs: Any) -> Any:  # fake kernels of the stubbed ops
        try:
            return impl(self, *args, **kwargs)
        except RuntimeError as exc:
            if "does not exist" not in str(exc):
                raise
            return None

    torch.library.Library.impl = lenient_impl  # type: ignore[method-assign]
    from vllm import platforms
    from vllm.model_executor.models import registry
    from vllm.platforms import cuda
    from vllm.platforms.interface import DeviceCapability

    class DeclaredCuda(cuda.NonNvmlCudaPlatform):  # type: ignore[misc, valid-type]
        @classmethod
        def get_device_capability(cls, device_id: int = 0) -> Any:
            return DeviceCapability(*capability)

        @classmethod
        def get_device_name(cls, device_id: int = 0) -> str:
            return "declared CUDA device"

        @classmethod
        def is_fully_connected(cls, physical_device_ids: Any) -> bool:
            return True

    platforms.current_platform = DeclaredCuda()
    registry._run_in_subprocess = lambda fn: fn()  # inspect model classes here, where the stubs are
    from vllm.entrypoints.cli import serve
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    parser = FlexibleArgumentParser(description="vLLM CLI")
    subparsers = parser.add_subparsers(required=False, dest="subparser")
    for cmd in serve.cmd_init():
        cmd.subparser_init(subparsers).set_defaults(dispatch_function=cmd.cmd)
    return parser


def _engine_config(args: argparse.Namespace, models: Models) -> None:
    from vllm.engine.arg_utils import AsyncEngineArgs

    args.model = models.local(args.model_tag or args.model)
    # --kv-transfer-config is already a KVTransferConfig (the parser's type validated its fields); building the
    # engine config would import the connector's worker, whose GPU kernels this environment stubs out
    args.kv_transfer_config = None
    engine_args = AsyncEngineArgs.from_cli_args(args)
    engine_args.skip_tokenizer_init = True
    engine_args.create_engine_config(headless=bool(getattr(args, "headless", False)))


def _took_effect(config: dict[str, Any], ns: argparse.Namespace) -> str | None:
    """Every --config key must reach the parsed namespace with its value."""
    for key, value in config.items():
        dest, want = key.replace("-", "_"), value
        if key.startswith("no-") and value is True:
            dest, want = key[3:].replace("-", "_"), False
        got = (ns.model_tag or ns.model) if dest == "model" else getattr(ns, dest, "<no such option>")
        if isinstance(want, dict) and not isinstance(got, dict) and got is not None:  # parsed into a config object
            got = {k: getattr(got, k, "<no such field>") for k in want}
        if str(got) != str(want):
            return f"'{key}: {value}' in the config file did not take effect: vLLM parsed {dest}={got!r}"
    return None


def check_vllm_yaml(path: Path, parser: Any, models: Models) -> Iterator[dict[str, Any]]:
    import yaml

    config = yaml.safe_load(path.read_text())
    parsed: dict[str, argparse.Namespace] = {}
    error = engine_error(lambda: parsed.setdefault("ns", parser.parse_args(["serve", "--config", str(path)])))
    yield result(str(path), "vllm serve --config (parser)", error)
    if error:
        return
    yield result(str(path), "vllm serve --config (every key honoured)", _took_effect(config, parsed["ns"]))
    yield result(str(path), "vllm create_engine_config", engine_error(lambda: _engine_config(parsed["ns"], models)))


def check_vllm_words(name: str, words: list[str], parser: Any, models: Models) -> Iterator[dict[str, Any]]:
    if words[:2] != ["vllm", "serve"]:
        yield result(name, "vllm serve command", f"not a vllm serve command: {words[:2]}")
        return
    parsed: dict[str, argparse.Namespace] = {}
    argv = [shell_value(w) for w in words[1:]]
    error = engine_error(lambda: parsed.setdefault("ns", parser.parse_args(argv)))
    yield result(name, "vllm serve (parser)", error)
    if not error:
        yield result(name, "vllm create_engine_config", engine_error(lambda: _engine_config(parsed["ns"], models)))


# ------------------------------------------------------------------------------ SGLang


class _Deprecations(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if "deprecated" in message.lower():
            self.messages.append(message.replace("\033[1;33m", "").replace("\033[0m", ""))


def check_sglang_words(name: str, words: list[str], models: Models) -> Iterator[dict[str, Any]]:
    if words[:2] != ["sglang", "serve"]:
        yield result(name, "sglang serve command", f"not the sglang serve entrypoint: {' '.join(words[:3])}")
        return
    from sglang.srt.server_args import prepare_server_args

    argv = [SHELL_VALUES.get(w, w) for w in words[2:]]
    if "--model-path" in argv:
        i = argv.index("--model-path") + 1
        argv[i] = models.local(argv[i])
    handler = _Deprecations()
    logging.getLogger().addHandler(handler)
    try:
        error = engine_error(lambda: prepare_server_args(argv))
    finally:
        logging.getLogger().removeHandler(handler)
    yield result(name, "sglang ServerArgs", error)
    yield result(name, "sglang no deprecated flag", "; ".join(handler.messages) or None)


# -------------------------------------------------------------------------- Kubernetes


def check_k8s(path: Path, parser: Any, models: Models) -> Iterator[dict[str, Any]]:
    import jsonschema
    import yaml
    from kubernetes_validate import utils as kv

    docs = [d for d in yaml.safe_load_all(path.read_text()) if d]
    lws_names = {d["metadata"]["name"] for d in docs if d.get("kind") == "LeaderWorkerSet"}
    for doc in docs:
        label = f"{doc.get('kind')}/{doc.get('metadata', {}).get('name')}"
        if doc.get("kind") == "LeaderWorkerSet":
            schema = json.loads(LWS_SCHEMA.read_text())
            yield result(
                str(path),
                f"LeaderWorkerSet schema {label}",
                engine_error(lambda doc=doc, schema=schema: jsonschema.validate(doc, schema)),
            )
            template = doc["spec"]["leaderWorkerTemplate"]
            for role in ("leaderTemplate", "workerTemplate"):
                if role in template:
                    pod_template = {
                        "apiVersion": "v1",
                        "kind": "PodTemplate",
                        "metadata": {"name": f"{doc['metadata']['name']}-{role}"},
                        "template": template[role],
                    }
                    yield result(
                        str(path),
                        f"kubernetes-validate {K8S_VERSION} strict {label} {role}",
                        engine_error(lambda t=pod_template: kv.validate(t, K8S_VERSION, strict=True)),
                    )
        else:
            yield result(
                str(path),
                f"kubernetes-validate {K8S_VERSION} strict {label}",
                engine_error(lambda doc=doc: kv.validate(doc, K8S_VERSION, strict=True)),
            )
        if doc.get("kind") == "Service" and doc["metadata"]["name"] in lws_names:
            yield result(
                str(path),
                f"LWS headless Service {label}",
                "a Service named like the LeaderWorkerSet: the LWS controller then creates no headless "
                "Service, and workers cannot resolve $LWS_LEADER_ADDRESS",
            )
        for role, words in _vllm_container_words(doc):
            yield from check_vllm_words(f"{path} {label}{role}", words, parser, models)


def _vllm_container_words(doc: dict[str, Any]) -> Iterator[tuple[str, list[str]]]:
    """(role, words) of every container that runs vllm serve: a Deployment's, a LeaderWorkerSet leader's and
    worker's (role " leaderTemplate" / " workerTemplate"; a Ray worker runs no vllm serve)."""
    spec = doc.get("spec", {})
    group = spec.get("leaderWorkerTemplate", {})
    templates = [("", spec.get("template"))] + [(f" {k}", group.get(k)) for k in ("leaderTemplate", "workerTemplate")]
    for role, template in templates:
        if not template:
            continue
        for container in template["spec"]["containers"]:
            words = [*container.get("command", []), *container.get("args", [])]
            if words[:2] == ["vllm", "serve"]:
                yield role, words
            elif words[:2] == ["/bin/sh", "-c"] and "exec vllm serve" in words[2]:
                yield role, shlex.split(words[2].split("exec ", 1)[1])


# ---------------------------------------------------------------------------- the files


def shell_words(text: str) -> list[str]:
    """The command of an exported .sh file (comment lines and line continuations removed)."""
    body = "\n".join(line for line in text.splitlines() if not line.startswith("#"))
    return shlex.split(body.replace("\\\n", " "))


def shell_commands(text: str) -> list[list[str]]:
    """Each command of an exported .sh file: the ``[exec] vllm serve`` lines of a script that branches per node
    (a multi-node DP launch), else the file's one command (shell_words)."""
    body = "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#"))
    lines = [shlex.split(line) for line in body.replace("\\\n", " ").splitlines() if line.strip()]
    commands = [w[1:] if w[:1] == ["exec"] else w for w in lines]
    serves = [w for w in commands if w[:2] == ["vllm", "serve"]]
    return serves if len(serves) > 1 else [shell_words(text)]


def check_file(path: Path, parser: Any, models: Models) -> Iterator[dict[str, Any]]:
    name = path.name
    if name.startswith("vllm-") and name.endswith(".yaml"):
        yield from check_vllm_yaml(path, parser, models)
    elif name.startswith("vllm-") and name.endswith(".sh"):
        commands = shell_commands(path.read_text())
        for i, words in enumerate(commands):
            label = str(path) if len(commands) == 1 else f"{path} command {i + 1} of {len(commands)}"
            yield from check_vllm_words(label, words, parser, models)
    elif name.startswith("sglang-"):
        yield from check_sglang_words(str(path), shell_words(path.read_text()), models)
    elif name.startswith("k8s-"):
        yield from check_k8s(path, parser, models)
    else:
        yield result(str(path), "file kind", "unknown export file (vllm-*.yaml, vllm-*.sh, sglang-*.sh, k8s-*.yaml)")


def main(argv: list[str] | None = None) -> int:
    cli = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    cli.add_argument("files", nargs="+", type=Path)
    cli.add_argument(
        "--model-config",
        action="append",
        default=[],
        metavar="REPO=CONFIG_JSON",
        help="serve this config.json wherever a file names REPO (repeatable)",
    )
    cli.add_argument("--capability", default="9.0", help="declared CUDA compute capability (default 9.0)")
    args = cli.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    logging.disable(logging.INFO)
    models = Models(dict(item.split("=", 1) for item in args.model_config))
    for var, sub in (
        ("XDG_CACHE_HOME", "cache"),
        ("VLLM_CACHE_ROOT", "cache/vllm"),
        ("SGLANG_CACHE_DIR", "cache/sglang"),
        ("TORCHINDUCTOR_CACHE_DIR", "cache/inductor"),
        ("TRITON_CACHE_DIR", "cache/triton"),
    ):
        os.environ[var] = str(models.root / sub)  # the engines' caches die with the temporary folder
    needs_vllm = any(p.name.startswith(("vllm-", "k8s-")) for p in args.files)
    major, minor = (int(x) for x in args.capability.split("."))
    parser = vllm_parser((major, minor)) if needs_vllm else None
    failed = 0
    try:
        for path in args.files:
            for row in check_file(path, parser, models):
                failed += not row["ok"]
                print(json.dumps(row), flush=True)
    finally:
        models.close()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
