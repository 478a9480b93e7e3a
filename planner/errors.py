"""Error types. The core raises them with the numbers and the fix; the CLI and the UI translate.

Every message says what is wrong and what would make it work, e.g.
"needs 142.3 GiB per GPU, H100 SXM has 79.6 GiB; try --tp 2 or --weight-dtype fp8".
"""

from __future__ import annotations

import re

#: A URL's user:password@ (or token@) part, and a Hugging Face token: never shown to a user.
_URL_USERINFO = re.compile(r"(?P<scheme>[a-zA-Z][a-zA-Z0-9+.-]{0,20}://)[^/@\s]{1,512}@")
_HF_TOKEN = re.compile(r"hf_[A-Za-z0-9]{20,}")


def redact_secrets(text: str) -> str:
    """``text`` with URL credentials (``https://user:pw@host`` -> ``https://***@host``) and ``hf_...``
    tokens replaced by ``***``: every message and warning a face shows goes through this."""
    return _HF_TOKEN.sub("***", _URL_USERINFO.sub(lambda m: f"{m.group('scheme')}***@", text))


class PlannerError(Exception):
    """Base class: a problem the user can fix. ``str(err)`` is the full message."""

    def __init__(self, message: str, *, hint: str | None = None):
        message = redact_secrets(message)
        hint = None if hint is None else redact_secrets(hint)
        self.message = message
        self.hint = hint
        super().__init__(message if hint is None else f"{message} {hint}")


class ConfigError(PlannerError):
    """config.json is malformed, misses keys, or names values that contradict each other."""


class UnknownArchitectureError(ConfigError):
    """model_type is unknown and the config lacks the keys needed for a generic estimate."""


class ModelNotFoundError(PlannerError):
    """The model name is neither a catalog entry, a local path, nor a repo on the Hub."""


class GatedModelError(PlannerError):
    """The Hub repo exists but needs accepted terms and a token (HTTP 401/403)."""


class HubUnavailableError(PlannerError):
    """The Hub could not be reached (offline, timeout) and no cached or catalog copy exists."""


class HardwareProfileError(PlannerError):
    """A hardware profile YAML is malformed or a --gpu id is unknown."""


class ScenarioError(PlannerError):
    """The user's choices are impossible together (e.g. --tp does not divide the heads)."""
