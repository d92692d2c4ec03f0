"""The one rule for hiding secrets wherever amdtop writes or shows argv, env, config or log text (logs, state,
status, TUI, ramp results).

A name is secret when, split at ``_``/``-``/``.``, one of its words is ``TOKEN``, ``KEY``, ``APIKEY``, ``SECRET``,
``PASSWORD``, ``PASSWD``, ``PASS``, ``PAT`` (``GH_PAT``), ``CREDENTIAL(S)`` or ``AUTH``, or it contains ``SECRET``,
``PASS`` (``MY_PASSPHRASE``, ``DBPASSWORD``), ``CREDENTIAL`` or ``APIKEY`` glued to other letters, or ends in
``TOKEN`` (``HFTOKEN``): the patterns ``*_KEY``, ``*_TOKEN``, ``*_SECRET``, ``*PASS*``, ``*_PAT``, ``*CREDENTIAL*``.
``TOKENS``, ``TOKENIZER`` and ``KEYFILE`` are not secret: ``--max-num-batched-tokens`` and ``--ssl-keyfile`` name sizes
and paths. Every value of a secret flag is hidden (``--api-key k1 k2``), and so is a URL's userinfo.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

MASK = "***"
"""What a secret value is replaced with."""

_WORDS = frozenset(
    {"TOKEN", "KEY", "APIKEY", "SECRET", "PASSWORD", "PASSWD", "PASS", "PAT", "CREDENTIAL", "CREDENTIALS", "AUTH"}
)
_GLUED = re.compile(r"(SECRET|PASS|CREDENTIAL|APIKEY|.TOKEN$)")
_ASSIGN = re.compile(r"^([A-Za-z_][A-Za-z0-9_.-]*)=(.*)$", re.S)
_URL_CREDS = re.compile(r"(?P<head>[a-zA-Z][a-zA-Z0-9+.-]*://[^/:@\s]+:)(?P<pw>[^@/\s]+)(?P<at>@)")
_URL_USER_ONLY = re.compile(r"(?P<head>[a-zA-Z][a-zA-Z0-9+.-]*://)(?P<user>[^/:@\s]+)(?P<at>@)")
"""A userinfo without a password (``https://ghp_token@github.com``): the user part is the secret."""


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
    """``text`` with the userinfo secret of any URL replaced: the password of ``scheme://user:password@host``, the
    whole userinfo of ``scheme://token@host``."""
    if "@" not in text:
        return text
    text = _URL_CREDS.sub(lambda m: f"{m['head']}{MASK}{m['at']}", text)
    return _URL_USER_ONLY.sub(lambda m: f"{m['head']}{MASK}{m['at']}" if m["user"] != MASK else m[0], text)


def mask_env(env: Mapping[str, str]) -> dict[str, str]:
    """Copy of ``env`` with every secret value hidden."""
    return {k: mask_value(k, v) for k, v in env.items()}


def mask_argv(argv: Iterable[str]) -> list[str]:
    """Copy of ``argv`` with secrets hidden: every value after ``--api-key`` (or in ``--api-key=v``), ``NAME=v``
    words with a secret name (``env HF_TOKEN=...``) and URL passwords."""
    out: list[str] = []
    hide_next = False
    for word in argv:
        if hide_next:
            # Every value up to the next flag is the secret's (``--api-key k1 k2``: a list-valued arg); a bare switch
            # (``--disable-auth``) takes no value: the next flag is not its secret.
            if not word.startswith("--"):
                out.append(MASK if word else word)
                continue
            hide_next = False
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


# Cheap test first (substring searches on the lowered line, ~10x cheaper than one case-insensitive regex): most log
# lines (NCCL INFO, progress bars) name nothing secret and skip the masking.
_PAT_WORD = re.compile(r"pat\b")
_REPR_ITEM = re.compile(
    r"""(?P<q>['"])(?P<key>[A-Za-z0-9_.\-]+)(?P=q)(?P<sep>\s*:\s*)"""
    r"""(?P<value>'[^']*'|"[^"]*"|\[[^\]]*\]|\([^)]*\)|[^,}\s]+)"""
)
"""``'api_key': ['k1', 'k2']`` in a Python dict repr: how vLLM echoes its own argv (``non-default args: {...}``)."""
_FLAG_VALUES = re.compile(r"(?P<flag>--?[A-Za-z][A-Za-z0-9_.\-]*)(?P<rest>(?:[= ](?!-)[^\s'\",\]\)]+)+)")
_LIST_FLAG = re.compile(
    r"""(?P<q>['"])(?P<flag>--?[A-Za-z][A-Za-z0-9_.\-]*)(?:=(?P<glued>[^'"]*))?(?P=q)"""
    r"""(?P<values>(?:\s*,\s*(?P<vq>['"])(?!-)[^'"]*(?P=vq))*)"""
)
"""``'--api-key', 'k1'`` and ``'--api-key=k1'`` in a Python list repr: a worker that echoes its ``sys.argv``."""
_LIST_ITEM = re.compile(r"""(?P<q>['"])(?P<v>[^'"]*)(?P=q)""")


def _mask_list_flag(m: re.Match[str]) -> str:
    if not is_secret_name(m["flag"]):
        return m[0]
    q = m["q"]
    head = f"{q}{m['flag']}={MASK}{q}" if m["glued"] is not None else f"{q}{m['flag']}{q}"
    return head + _LIST_ITEM.sub(lambda v: f"{v['q']}{MASK}{v['q']}", m["values"])


def mask_log_line(text: str) -> str:
    """A log line with secrets hidden: a worker's echo of its own arguments (``non-default args: {'api_key': ...}``,
    ``--api-key k1 k2``), ``NAME=value`` words with a secret name, and URL userinfo."""
    low = text.lower()
    # Chained ``in`` tests: a third of the cost of ``any()`` over _LOG_HINTS (bench/log_mask.py).
    if not (
        "key" in low
        or "token" in low
        or "secret" in low
        or "pass" in low
        or "credential" in low
        or "auth" in low
        or "@" in low
        or ("pat" in low and _PAT_WORD.search(low))
    ):
        return text
    if ":" in text and ("'" in text or '"' in text):
        text = _REPR_ITEM.sub(
            lambda m: f"{m['q']}{m['key']}{m['q']}{m['sep']}'{MASK}'" if is_secret_name(m["key"]) else m[0], text
        )
    if "-" in text and ("'" in text or '"' in text):
        text = _LIST_FLAG.sub(_mask_list_flag, text)
    if "-" in text:
        text = _FLAG_VALUES.sub(
            lambda m: f"{m['flag']}{m['rest'][0]}{MASK}" if is_secret_name(m["flag"]) else m[0], text
        )
    if "=" in text:
        words = text.split(" ")
        for i, word in enumerate(words):
            if "=" in word and (m := _ASSIGN.match(word)) and is_secret_name(m[1]) and m[2]:
                words[i] = f"{m[1]}={MASK}"
        text = " ".join(words)
    return mask_url(text)
