"""A local stand-in for the Hugging Face Hub's file-resolve endpoint, for offline tests.

It answers the two requests ``huggingface_hub.hf_hub_download`` makes for one file,
``HEAD`` then ``GET`` on ``{endpoint}/{repo_id}/resolve/{revision}/{filename}``, with the
headers the client reads: ``X-Repo-Commit`` (commit of the revision), ``ETag`` (name of the
cached blob), ``Content-Length``; and on failure ``X-Error-Code`` (``RepoNotFound``,
``RevisionNotFound``, ``EntryNotFound``, ``GatedRepo``) plus ``X-Error-Message``, which the
client turns into ``RepositoryNotFoundError``, ``GatedRepoError`` and so on. ``GET`` honours
a ``Range: bytes=a-b`` header, which is how ``get_safetensors_metadata`` reads headers only.

It also answers the tree API, ``GET /api/models/{repo_id}/tree/{revision}``, with the
repo's files (what ``HfApi.list_repo_files`` reads), and misbehaves on request, per repo:
``delay_s`` (sleep before answering), ``head_trickle_s`` (status line and headers one byte at a
time), ``trickle_s`` (a GET body one byte at a time), ``stall_after_bytes`` (a GET sends that
much of its body and then nothing) and ``endless_body`` (a GET sends bytes without end and
without a Content-Length, whatever the HEAD said). Every wait wakes up when the stand-in stops.

It listens on 127.0.0.1 with an ephemeral port, never anywhere else, and records every
request so a test can prove that a path made no request, or no second ``GET``.

    with HubStandin() as hub:
        hub.add_repo("acme/tiny", {"config.json": b'{"model_type": "llama"}'})
        os.environ["HF_ENDPOINT"] = hub.url
"""

from __future__ import annotations

import hashlib
import json
import re
import struct
import threading
from dataclasses import dataclass, field
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import unquote, urlsplit

_RESOLVE_PATH = re.compile(r"^/(?P<repo>.+?)/resolve/(?P<revision>[^/]+)/(?P<filename>.+)$")
_TREE_PATH = re.compile(r"^/api/models/(?P<repo>[^/]+/[^/]+)/tree/(?P<revision>[^/]+)(?:/(?P<folder>.+))?$")
_RANGE = re.compile(r"^bytes=(?P<start>\d+)-(?P<end>\d*)$")


@dataclass
class StandinRepo:
    """One repo: its files, and how it misbehaves. Mutable so a test can change it mid-way."""

    files: dict[str, bytes]
    commit: str
    gated_token: str | None = None  # set: the repo is gated and only this bearer token gets in
    delay_s: float = 0.0  # sleep this long before answering (the "slow Hub" case)
    head_trickle_s: float = 0.0  # > 0: every answer's status line and headers go one byte per this many s
    trickle_s: float = 0.0  # > 0: a GET's body goes one byte per this many seconds
    stall_after_bytes: int | None = None  # set: a GET sends this many body bytes, then nothing until stop()
    endless_body: bool = False  # a GET answers 200 with no Content-Length and sends bytes until the client leaves


@dataclass(frozen=True)
class SeenRequest:
    """What the stand-in saw of one request."""

    method: str
    path: str
    token: str | None  # the bearer token sent, None when no Authorization header


@dataclass
class HubStandin:
    """Threaded HTTP server on 127.0.0.1 that plays the Hub for a dict of repos. Use as a context manager."""

    repos: dict[str, StandinRepo] = field(default_factory=dict)
    requests: list[SeenRequest] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # ---- set-up -------------------------------------------------------------------------------
    def add_repo(
        self,
        repo_id: str,
        files: dict[str, bytes | str | dict | list],
        *,
        gated_token: str | None = None,
        delay_s: float = 0.0,
        **misbehaviour: Any,
    ) -> StandinRepo:
        """Serve ``files`` under ``repo_id``; dicts and lists are JSON-encoded, str is UTF-8.

        ``misbehaviour``: any of StandinRepo's ``head_trickle_s``, ``trickle_s``, ``stall_after_bytes``,
        ``endless_body``.
        """
        encoded = {name: _encode(content) for name, content in files.items()}
        commit = hashlib.sha1(repo_id.encode() + b"".join(sorted(encoded.values()))).hexdigest()
        repo = StandinRepo(files=encoded, commit=commit, gated_token=gated_token, delay_s=delay_s, **misbehaviour)
        self.repos[repo_id] = repo
        return repo

    # ---- what happened ------------------------------------------------------------------------
    def count(self, method: str | None = None, path_contains: str = "") -> int:
        """Number of requests seen, optionally only one method and paths containing a string."""
        with self._lock:
            return sum(1 for r in self.requests if (method is None or r.method == method) and path_contains in r.path)

    def _record(self, seen: SeenRequest) -> None:
        with self._lock:
            self.requests.append(seen)

    # ---- lifecycle ----------------------------------------------------------------------------
    @property
    def url(self) -> str:
        """Base URL to put in HF_ENDPOINT, e.g. ``http://127.0.0.1:51234``."""
        if self._server is None:
            raise RuntimeError("the stand-in Hub is not running; use it as a context manager")
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def start(self) -> HubStandin:
        """Bind 127.0.0.1 on an ephemeral port and serve from a daemon thread."""
        standin = self

        class Handler(_ResolveHandler):
            hub = standin

        self._stopping.clear()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True  # a slow handler must not hold up stop()
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving; wakes handlers that are sleeping in a slow repo. Safe to call twice."""
        self._stopping.set()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def __enter__(self) -> HubStandin:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


class _ResolveHandler(BaseHTTPRequestHandler):
    """Answers HEAD/GET on /{repo_id}/resolve/{revision}/{filename} like the Hub does."""

    hub: HubStandin  # set on the subclass made in HubStandin.start
    protocol_version = "HTTP/1.0"  # one request per connection: nothing lingers after stop()

    def do_HEAD(self) -> None:
        self._answer(send_body=False)

    def do_GET(self) -> None:
        self._answer(send_body=True)

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002
        """Quiet: pytest output is for the tests."""

    def _answer(self, *, send_body: bool) -> None:
        auth = self.headers.get("Authorization") or ""
        token = auth[len("Bearer ") :] if auth.startswith("Bearer ") else None
        path = unquote(urlsplit(self.path).path)
        self.hub._record(SeenRequest(method=self.command, path=path, token=token))
        try:
            if _TREE_PATH.match(path):
                self._answer_tree(path, token, send_body=send_body)
            else:
                self._answer_resolve(path, token, send_body=send_body)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up (its timeout) before the slow answer came

    def _repo_or_refusal(self, repo_id: str, revision: str, token: str | None, send_body: bool) -> StandinRepo | None:
        """The repo if this request may see it at this revision; else the refusal is sent and None returned."""
        repo = self.hub.repos.get(repo_id)
        if repo is None:
            self._error(404, "RepoNotFound", "Repository not found", send_body)
            return None
        if repo.delay_s > 0 and self.hub._stopping.wait(repo.delay_s):
            return None  # stop() was called while sleeping: drop the connection
        if repo.gated_token is not None and token != repo.gated_token:
            status = 401 if token is None else 403
            message = f"Access to model {repo_id} is restricted and you are not in the authorized list."
            self._error(status, "GatedRepo", message, send_body, repo=repo)
            return None
        if revision not in ("main", repo.commit):
            self._error(404, "RevisionNotFound", "Invalid rev id", send_body, repo.commit, repo=repo)
            return None
        return repo

    def _answer_tree(self, path: str, token: str | None, *, send_body: bool) -> None:
        match = _TREE_PATH.match(path)
        assert match is not None
        repo = self._repo_or_refusal(match["repo"], match["revision"], token, send_body)
        if repo is None:
            return
        folder = (match["folder"] or "").strip("/")
        names = sorted(n for n in repo.files if not folder or n.startswith(folder + "/"))
        folders = sorted({n.rsplit("/", 1)[0] for n in names if "/" in n})
        entries = [{"type": "directory", "oid": "0" * 40, "size": 0, "path": f} for f in folders]
        entries += [
            {"type": "file", "oid": hashlib.sha1(repo.files[n]).hexdigest(), "size": len(repo.files[n]), "path": n}
            for n in names
        ]
        body = json.dumps(entries).encode()
        headers = {"Content-Type": "application/json", "Content-Length": str(len(body))}
        self._send(200, headers, body if send_body else b"", repo)

    def _answer_resolve(self, path: str, token: str | None, *, send_body: bool) -> None:
        match = _RESOLVE_PATH.match(path)
        if match is None:
            return self._error(404, None, f"no route for {path}", send_body)
        repo = self._repo_or_refusal(match["repo"], match["revision"], token, send_body)
        if repo is None:
            return
        content = repo.files.get(match["filename"])
        if content is None:
            return self._error(404, "EntryNotFound", "Entry not found", send_body, repo.commit, repo=repo)

        status, body = 200, content
        headers = {
            "X-Repo-Commit": repo.commit,
            "ETag": f'"{hashlib.sha1(content).hexdigest()}"',
            "Content-Type": "application/octet-stream",
            "Content-Length": str(len(body)),
        }
        range_match = _RANGE.match(self.headers.get("Range") or "")
        if send_body and range_match is not None:
            start = int(range_match["start"])
            end = min(int(range_match["end"] or len(content) - 1), len(content) - 1)
            status, body = 206, content[start : end + 1]
            headers.update({"Content-Range": f"bytes {start}-{end}/{len(content)}", "Content-Length": str(len(body))})
        if send_body and repo.endless_body:
            del headers["Content-Length"]  # HTTP/1.0: the body ends when the connection closes, i.e. never
            self._send(status, headers, b"", repo)
            return self._send_endless()
        self._send(status, headers, body if send_body else b"", repo)

    def _send(self, status: int, headers: dict[str, str], body: bytes, repo: StandinRepo | None = None) -> None:
        """Status line, headers, body; trickled or stalled the way ``repo`` misbehaves."""
        head = f"HTTP/1.0 {status} {HTTPStatus(status).phrase}\r\n"
        head += "".join(f"{name}: {value}\r\n" for name, value in headers.items()) + "\r\n"
        self._write(head.encode("latin-1"), repo.head_trickle_s if repo else 0.0)
        if not body or repo is None:
            self.wfile.write(body)
            return
        if repo.stall_after_bytes is not None:
            self.wfile.write(body[: repo.stall_after_bytes])
            self.wfile.flush()
            self.hub._stopping.wait()  # nothing more until the stand-in stops
            return
        self._write(body, repo.trickle_s)

    def _write(self, data: bytes, gap_s: float) -> None:
        """All of ``data`` at once, or one byte every ``gap_s`` seconds (until stop())."""
        if gap_s <= 0:
            self.wfile.write(data)
            return
        for position in range(len(data)):
            self.wfile.write(data[position : position + 1])
            self.wfile.flush()
            if self.hub._stopping.wait(gap_s):
                return

    def _send_endless(self) -> None:
        chunk = b" " * 65536
        while not self.hub._stopping.is_set():
            self.wfile.write(chunk)

    def _error(
        self,
        status: int,
        code: str | None,
        message: str,
        send_body: bool,
        commit: str | None = None,
        *,
        repo: StandinRepo | None = None,
    ) -> None:
        body = json.dumps({"error": message}).encode()
        headers = {"X-Error-Message": message, "Content-Type": "application/json", "Content-Length": str(len(body))}
        if code is not None:
            headers["X-Error-Code"] = code
        if commit is not None:
            headers["X-Repo-Commit"] = commit
        self._send(status, headers, body if send_body else b"", repo)


def safetensors_header_only(tensors: dict[str, tuple[str, list[int]]]) -> bytes:
    """A valid safetensors file whose tensors are all zeros: ``{"w": ("BF16", [4, 8])}``.

    Layout: 8-byte little-endian header length, the JSON header, then the raw data.
    """
    bytes_per_element = {"F32": 4, "F16": 2, "BF16": 2, "I8": 1, "U8": 1, "F8_E4M3": 1, "I64": 8}
    header: dict[str, object] = {"__metadata__": {"format": "pt"}}
    offset = 0
    for name, (dtype, shape) in tensors.items():
        count = 1
        for dim in shape:
            count *= dim
        size = count * bytes_per_element[dtype]
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + size]}
        offset += size
    header_bytes = json.dumps(header).encode()
    return struct.pack("<Q", len(header_bytes)) + header_bytes + bytes(offset)


def _encode(content: bytes | str | dict | list) -> bytes:
    if isinstance(content, bytes):
        return content
    if isinstance(content, str):
        return content.encode()
    return json.dumps(content).encode()
