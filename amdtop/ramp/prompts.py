"""Endpoint discovery and prompts of a given token length built from the model's own vocabulary."""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

import httpx

from amdtop.errors import AmdtopError, InputError
from amdtop.secrets import mask_url

PLAIN_WORDS = [
    "the",
    "of",
    "and",
    "to",
    "in",
    "is",
    "it",
    "that",
    "for",
    "on",
    "with",
    "as",
    "was",
    "at",
    "by",
    "be",
    "this",
    "are",
    "from",
    "or",
    "have",
    "an",
    "they",
    "which",
    "one",
    "you",
    "were",
    "her",
    "all",
    "she",
    "there",
    "would",
    "their",
    "we",
    "him",
    "been",
    "has",
    "when",
    "who",
    "will",
    "more",
    "no",
    "if",
    "out",
    "so",
    "said",
    "what",
    "up",
    "its",
    "about",
    "into",
    "than",
    "them",
    "can",
    "only",
    "other",
    "new",
    "some",
    "could",
    "time",
    "these",
    "two",
    "may",
    "then",
    "do",
    "first",
    "any",
    "my",
    "now",
    "such",
    "like",
    "our",
    "over",
    "man",
    "me",
    "even",
    "most",
    "made",
]


SALT_WORDS = tuple(sorted({w for w in PLAIN_WORDS if len(w) == 3}))
SALT_WORDS_PER_REQUEST = 4


SALT_SPACE = len(SALT_WORDS) ** SALT_WORDS_PER_REQUEST
"""Distinct salts before they repeat."""


def _coprime_step(space: int) -> int:
    step = int(space * 0.6180339887) | 1  # a golden-ratio step spreads consecutive numbers over the whole space
    while math.gcd(step, space) != 1:
        step += 2
    return step


_SALT_MIX = _coprime_step(SALT_SPACE)
"""n -> n * _SALT_MIX mod SALT_SPACE is a bijection that changes every word from one request to the next, so the
salt's mean token cost holds over any run of requests."""


def salt(n: int) -> str:
    """The unique opening of request ``n``: four three-letter words (a fixed 16 bytes, so a prebuilt request keeps its
    Content-Length). vLLM caches prefixes by default; a prompt sent twice would be served from that cache and its
    TTFT would not be a prefill's. `vllm bench serve`'s random dataset varies the first token per request for the
    same reason."""
    n = (n * _SALT_MIX) % SALT_SPACE
    words = []
    for _ in range(SALT_WORDS_PER_REQUEST):
        n, d = divmod(n, len(SALT_WORDS))
        words.append(SALT_WORDS[d])
    return " ".join(words) + " "


@dataclass(frozen=True, slots=True)
class Endpoint:
    """What the server says about itself."""

    model: str
    max_model_len: int | None
    tokenizer: bool
    """``/tokenize`` and ``/detokenize`` answered."""


async def discover(client: httpx.AsyncClient, url: str, model: str | None) -> Endpoint:
    """Ask ``/v1/models`` for the served model (raises a one-line AmdtopError when the endpoint is down)."""
    try:
        r = await client.get("/v1/models")
    except httpx.HTTPError as exc:
        raise AmdtopError(
            f"--url: cannot reach {url} ({type(exc).__name__}); start the server or fix the URL"
        ) from None
    if r.status_code == 401:
        # vLLM started with --api-key / VLLM_API_KEY guards /v1: the ramp sends VLLM_API_KEY from its environment.
        raise AmdtopError(
            f"--url: {mask_url(url)}/v1/models answered HTTP 401 (the server wants an API key); "
            "set VLLM_API_KEY to the server's key and run again"
        )
    if r.status_code != 200:
        raise AmdtopError(f"--url: {url}/v1/models answered HTTP {r.status_code}; is this an OpenAI-compatible server?")
    try:
        data = r.json().get("data") or []
    except ValueError:
        raise AmdtopError(f"--url: {url}/v1/models did not return JSON; is this an OpenAI-compatible server?") from None
    ids = [d.get("id") for d in data if isinstance(d, dict)]
    if model is None:
        if not ids:
            raise InputError(f"--model: {url} lists no model; pass --model NAME")
        model = str(ids[0])
    elif ids and model not in ids:
        raise InputError(f"--model: {model!r} is not served by {url}; served: {', '.join(map(str, ids))}")
    card = next((d for d in data if isinstance(d, dict) and d.get("id") == model), {})
    mml = card.get("max_model_len")
    tok = await _tokenizer_works(client, model)
    return Endpoint(model=model, max_model_len=int(mml) if isinstance(mml, int) else None, tokenizer=tok)


async def _tokenize(client: httpx.AsyncClient, model: str, text: str) -> list[int] | None:
    try:
        r = await client.post("/tokenize", json={"model": model, "prompt": text, "add_special_tokens": False})
        if r.status_code != 200:
            return None
        toks = r.json().get("tokens")
        return [int(t) for t in toks] if isinstance(toks, list) else None
    except (httpx.HTTPError, ValueError, TypeError):
        return None


async def _detokenize(client: httpx.AsyncClient, model: str, ids: list[int]) -> str | None:
    try:
        r = await client.post("/detokenize", json={"model": model, "tokens": ids})
        if r.status_code != 200:
            return None
        text = r.json().get("prompt")
        return text if isinstance(text, str) else None
    except (httpx.HTTPError, ValueError):
        return None


async def _tokenizer_works(client: httpx.AsyncClient, model: str) -> bool:
    ids = await _tokenize(client, model, "hello world")
    return bool(ids) and (await _detokenize(client, model, ids or [])) is not None


async def build_prompts(
    client: httpx.AsyncClient, ep: Endpoint, input_len: int, count: int, seed: int = 0
) -> tuple[str, ...]:
    """``count`` distinct prompts that make ``input_len`` tokens (without BOS) once a :func:`salt` opens them.

    Token ids come from tokenizing a word corpus (so they are real, printable vocabulary entries); a random draw of
    them is detokenized, re-tokenized and trimmed or topped up until its length is right, as `vllm bench serve`'s
    random dataset does. Without a tokenizer endpoint, one plain word stands for one token.
    """
    rng = random.Random(seed)
    reserve = SALT_WORDS_PER_REQUEST
    pool = await _vocab_pool(client, ep.model) if ep.tokenizer else []
    if pool:
        first = await _vocab_prompts(client, ep.model, pool, max(1, input_len - reserve), count, random.Random(seed))
        if first:
            # What a salt costs in tokens depends on the tokenizer and on what follows it: measure it over many.
            base = await _tokenize(client, ep.model, first[0])
            probe = random.Random(seed + 1)
            salted = [
                await _tokenize(client, ep.model, salt(probe.randrange(SALT_SPACE)) + first[0]) for _ in range(32)
            ]
            if base and all(salted):
                cost = round(sum(len(x or []) for x in salted) / len(salted)) - len(base)
                if cost != reserve:
                    again = await _vocab_prompts(
                        client, ep.model, pool, max(1, input_len - cost), count, random.Random(seed)
                    )
                    return again or first
            return first
    n = max(1, input_len - reserve)
    return tuple(" ".join(rng.choice(PLAIN_WORDS) for _ in range(n)) for _ in range(count))


async def _vocab_pool(client: httpx.AsyncClient, model: str) -> list[int]:
    """Real, printable vocabulary ids: the word corpus tokenized (empty when the tokenizer fails)."""
    ids = await _tokenize(client, model, " ".join(PLAIN_WORDS * 2) + " " + " ".join(w.upper() for w in PLAIN_WORDS))
    return sorted(set(ids or []))


async def _vocab_prompts(
    client: httpx.AsyncClient, model: str, pool: list[int], input_len: int, count: int, rng: random.Random
) -> tuple[str, ...]:
    """``count`` prompts of ``input_len`` tokens drawn from ``pool``; empty when the tokenizer fails."""
    out = []
    for _ in range(count):
        text = await _fit(client, model, [rng.choice(pool) for _ in range(input_len)], input_len, pool, rng)
        if text is None:
            return ()
        out.append(text)
    return tuple(out)


async def _fit(
    client: httpx.AsyncClient, model: str, ids: list[int], n: int, pool: list[int], rng: random.Random
) -> str | None:
    text = await _detokenize(client, model, ids)
    for _ in range(4):
        if text is None:
            return None
        again = await _tokenize(client, model, text)
        if again is None:
            return None
        if len(again) == n:
            return text
        ids = again[:n] if len(again) > n else again + [rng.choice(pool) for _ in range(n - len(again))]
        text = await _detokenize(client, model, ids)
    return text  # close enough: usage.prompt_tokens reports the real length
