"""Prompts of an exact token length, distinct per request (prefix caching cannot hide prefill).

Random token ids are decoded to text and re-encoded until the text is exactly N tokens
(vLLM's ``gen_prompt_decode_to_target_len`` rule), with a tokenizer that counts as the
server does. Where it comes from, best first (:func:`prompt_source`):

1. the server's ``/tokenize`` (vLLM, SGLang), which then checks every prompt's length;
2. the model's own tokenizer (``--tokenizer``, or the served model id when it is a local
   folder; transformers is needed, and nothing is downloaded unless asked);
3. the server's ``/tokenize`` alone: word prompts lengthened or shortened, word by word, until
   the server counts exactly N tokens (:class:`ServerAlignedWords`);
4. none: words of a fixed list, about one token each — the length is then *approximate* and
   the server's ``usage.prompt_tokens`` is what the report uses.

>>> src = WordPrompts()
>>> a, b = src.prompt(8, draw=1), src.prompt(8, draw=2)
>>> a != b, len(a.split())
(True, 8)
"""

from __future__ import annotations

import os
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from roofprof.errors import ConfigError

__all__ = [
    "PromptSource",
    "ServerAlignedWords",
    "ServerTokenizer",
    "TokenizerPrompts",
    "WordPrompts",
    "load_tokenizer",
    "prompt_source",
]

#: Decode → re-encode rounds before giving up on an exact length.
_MAX_TRIES = 20
_WORDS = (
    "the roofline memory bandwidth token prefill decode cache kernel matrix vector layer "
    "model weight compute latency batch stream server request answer river stone cloud "
    "garden window paper music light number"
).split()


class PromptSource(Protocol):
    """Makes a prompt text of ``n`` tokens; ``exact`` says whether lengths are exact."""

    @property
    def exact(self) -> bool: ...

    @property
    def name(self) -> str: ...

    def prompt(self, n: int, draw: int) -> str: ...


@dataclass(frozen=True)
class WordPrompts:
    """Distinct word prompts, ``n`` words (about ``n`` tokens; not exact)."""

    exact: bool = False
    name: str = "words (approximate length; usage.prompt_tokens reported)"

    def prompt(self, n: int, draw: int) -> str:
        """``n`` words drawn with ``draw``, starting with the draw number (distinct)."""
        rng = random.Random(draw)
        return " ".join([str(draw), *(rng.choice(_WORDS) for _ in range(max(0, n - 1)))])


class ServerAlignedWords:
    """Word prompts whose length the server's token counter (``count``) makes exact."""

    exact = True
    name = "words aligned by the server's /tokenize"

    def __init__(self, count: Callable[[str], int]):
        self.count = count

    def prompt(self, n: int, draw: int) -> str:
        """Words drawn with ``draw``, resized until the server counts exactly ``n`` tokens.

        Raises:
            ConfigError: no exact length after 20 counts (the last count is named).
        """
        rng = random.Random(draw)
        words = WordPrompts().prompt(n, draw).split()
        got = -1
        for _ in range(_MAX_TRIES):
            text = " ".join(words)
            got = self.count(text)
            if got == n:
                return text
            if got > n and len(words) > 1:  # drop about the excess, at least one word
                words = words[: len(words) - max(1, min(got - n, len(words) - 1))]
            elif got > n:  # one word of several tokens: another word
                words = [rng.choice(_WORDS)]
            else:
                words += [rng.choice(_WORDS) for _ in range(max(1, (n - got) // 2))]
        raise ConfigError(f"no prompt of exactly {n} tokens after {_MAX_TRIES} tries (last {got})")


class ServerTokenizer:
    """Token counts from the server's ``/tokenize`` (``post`` sends the JSON, returns it)."""

    def __init__(self, post: Callable[[str, dict[str, Any]], Any], model: str):
        self.post, self.model = post, model

    def count(self, text: str) -> int:
        """Tokens of ``text`` without special tokens, as the server counts them."""
        out = self.post(
            "/tokenize", {"model": self.model, "prompt": text, "add_special_tokens": False}
        )
        if isinstance(out, dict) and isinstance(out.get("count"), int):
            return out["count"]
        tokens = out.get("tokens") if isinstance(out, dict) else None
        if not isinstance(tokens, list):
            raise ConfigError("the server's /tokenize answered no token list")
        return len(tokens)


class TokenizerPrompts:
    """Exact-length prompts from a tokenizer (``encode``/``decode`` of token ids).

    ``check`` (optional) counts a text's tokens another way (the server's ``/tokenize``);
    a prompt is accepted only when both agree.
    """

    exact = True

    def __init__(
        self,
        encode: Callable[[str], list[int]],
        decode: Callable[[Sequence[int]], str],
        allowed: Sequence[int],
        name: str,
        check: Callable[[str], int] | None = None,
    ):
        if not allowed:
            raise ConfigError("the tokenizer has no ordinary (non-special) tokens")
        self.encode, self.decode, self.allowed = encode, decode, list(allowed)
        self.name, self.check = name, check

    def prompt(self, n: int, draw: int) -> str:
        """A text of exactly ``n`` tokens (random ids drawn with ``draw``).

        Raises:
            ConfigError: no exact text after 20 rounds (the last length is named).
        """
        rng = random.Random(draw)
        ids = [rng.choice(self.allowed) for _ in range(n)]
        got = -1
        for _ in range(_MAX_TRIES):
            text = self.decode(ids)
            ids = self.encode(text)
            got = len(ids)
            if got == n:
                if self.check is None or self.check(text) == n:
                    return text
                ids = ids[: n - 1]  # the server counts differently: perturb the tail
            if len(ids) > n:
                ids = ids[:n]
            else:
                ids = ids + [rng.choice(self.allowed) for _ in range(n - len(ids))]
        raise ConfigError(f"no prompt of exactly {n} tokens after {_MAX_TRIES} tries (last {got})")


def load_tokenizer(name: str) -> Any:
    """A transformers tokenizer from a local folder (or a hub id, when the user names one).

    Raises:
        ConfigError: transformers is missing or the tokenizer cannot be loaded.
    """
    try:
        from transformers import AutoTokenizer
    except ImportError:
        raise ConfigError("--tokenizer needs transformers (pip install 'roofprof[hf]')") from None
    try:
        return AutoTokenizer.from_pretrained(name)
    except Exception as exc:  # transformers raises OSError, ValueError, ...
        raise ConfigError(
            f"cannot load tokenizer {name!r}: {' '.join(str(exc).split())[:200]}"
        ) from None


def _from_tokenizer(tok: Any, name: str, check: Callable[[str], int] | None) -> TokenizerPrompts:
    special = set(getattr(tok, "all_special_ids", ()) or ())
    allowed = [i for i in range(len(tok)) if i not in special]
    return TokenizerPrompts(
        lambda text: tok.encode(text, add_special_tokens=False),
        lambda ids: tok.decode(ids),
        allowed,
        name,
        check,
    )


def prompt_source(
    tokenizer: str | None,
    served_model: str,
    server_count: Callable[[str], int] | None,
) -> tuple[PromptSource, str]:
    """Choose how prompts are made; returns the source and one line saying which.

    Args:
        tokenizer: ``--tokenizer`` (a local folder or hub id), or None.
        served_model: the served model id (used when it is a local folder).
        server_count: the server's token counter (``/tokenize``), or None when absent.

    Raises:
        ConfigError: ``--tokenizer`` was given and cannot be loaded.
    """
    name = tokenizer or (served_model if served_model and os.path.isdir(served_model) else None)
    if name is not None:
        try:
            tok = load_tokenizer(name)
        except ConfigError:
            if tokenizer is not None:
                raise
        else:
            via = " checked by the server's /tokenize" if server_count else ""
            src = _from_tokenizer(tok, f"tokenizer {name}{via}", server_count)
            return src, f"prompts: exact lengths, random ids through {src.name}"
    if server_count is not None:
        aligned = ServerAlignedWords(server_count)
        return aligned, f"prompts: exact lengths, {aligned.name}"
    src = WordPrompts()
    return src, f"prompts: {src.name}"
