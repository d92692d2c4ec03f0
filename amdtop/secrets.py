"""The one rule for hiding secrets wherever amdtop writes or shows argv, env or config (logs, state, status, TUI).

A name is secret when, split at ``_``/``-``/``.``, one of its words is ``TOKEN``, ``KEY``, ``APIKEY``, ``SECRET``,
``PASSWORD``, ``PASSWD``, ``PASS``, ``CREDENTIAL(S)`` or ``AUTH``, or it contains ``SECRET``/``PASSWORD``/``PASSWD``/
``APIKEY`` glued to other letters, or ends in ``TOKEN`` (``HFTOKEN``, ``DBPASSWORD``). ``TOKENS``,
``TOKENIZER`` and ``KEYFILE`` are not secret: ``--max-num-batched-tokens`` and ``--ssl-keyfile`` name sizes and paths.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

MASK = "***"
"""What a secret value is replaced with."""

_WORDS = frozenset(
    {"TOKEN", "KEY", "APIKEY", "SECRET", "PASSWORD", "PASSWD", "PASS", "CREDENTIAL", "CREDENTIALS", "AUTH"}
)
_GLUED = re.compile(r"(SECRET|PASSWORD|PASSWD|APIKEY|.TOKEN$)")
_ASSIGN = re.compile(r"^([A-Za-z_][A-Za-z0-9_.-]*)=(.*)$", re.S)
_URL_CREDS = re.compile(r"(?P<head>[a-zA-Z][a-zA-Z0-9+.-]*://[^/:@\s]+:)(?P<pw>[^@/\s]+)(?P<at>@)")


def is_secret_name(name: str) -> bool:
    """True when an env variable, flag or config key called ``name`` holds a secret (see the module rule)."""
    upper = name.strip().lstrip("-").upper()
    words = [w for w in re.split(r"[_.\-]+", upper) if w]
    return any(w in _WORDS for w in words) or any(_GLUED.search(w) for w in words)


def mask_value(name: str, value: str) -> str:
    """``value`` with a secret hidden: :data:`MASK` under a secret ``name``, else with URL passwords masked."""
    if is_secret_name(name) and value:
        return MASK
    return mask_url(value)


def mask_url(text: str) -> str:
    """``text`` with the password of any ``scheme://user:password@host`` replaced."""
    return _URL_CREDS.sub(lambda m: f"{m['head']}{MASK}{m['at']}", text)


def mask_env(env: Mapping[str, str]) -> dict[str, str]:
    """Copy of ``env`` with every secret value hidden."""
    return {k: mask_value(k, v) for k, v in env.items()}


def mask_argv(argv: Iterable[str]) -> list[str]:
    """Copy of ``argv`` with secrets hidden: the value after ``--api-key`` (or in ``--api-key=v``), ``NAME=v``
    words with a secret name (``env HF_TOKEN=...``) and URL passwords."""
    out: list[str] = []
    hide_next = False
    for word in argv:
        if hide_next:
            hide_next = False
            # A bare switch (``--disable-auth``) takes no value: the next flag is not its secret.
            if not word.startswith("--"):
                out.append(MASK if word else word)
                continue
        if word.startswith("-") and len(word) > 1:
            flag, eq, _ = word.partition("=")
            if is_secret_name(flag):
                if eq:
                    out.append(f"{flag}={MASK}")
                else:
                    out.append(word)
                    hide_next = True
                continue
        elif (m := _ASSIGN.match(word)) and is_secret_name(m[1]):
            out.append(f"{m[1]}={MASK}")
            continue
        out.append(mask_url(word))
    return out


def mask_command_line(argv: Iterable[str]) -> str:
    """``argv`` masked and joined with spaces, as amdtop shows and logs a launch line."""
    return " ".join(mask_argv(argv))
