"""A /v1/completions body's one prompt, as the token ids the sites' engines will hash.

vLLM takes a prompt as token ids, text, or a batch of either. The router decides per prompt, so it takes a
batch of one only (a longer batch is refused, as vLLM refuses a bad request: HTTP 400 with a JSON error);
text is tokenized with the served model's own tokenizer, with special tokens added unless the request says
otherwise (vLLM's CompletionRequest.add_special_tokens), as the engine tokenizes it.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

Tokenizer = Callable[[str, bool], list[int]]  # (text, add_special_tokens) -> token ids


class BadRequest(ValueError):
    """A request the router refuses (HTTP 400), in one sentence."""


def _ids(value) -> bool:
    return isinstance(value, list) and all(isinstance(t, int) and not isinstance(t, bool) and t >= 0 for t in value)


def one_prompt(body: dict, tokenizer: Tokenizer | None) -> list[int]:
    """The token ids of `body`'s prompt; BadRequest for a batch of more than one, or no prompt."""
    prompt = body.get("prompt")
    if isinstance(prompt, list) and prompt and all(isinstance(p, (str, list)) for p in prompt):
        if len(prompt) != 1:  # a batch: [str, ...] or [[ids], ...]
            raise BadRequest(f"the router takes one prompt per request, got a batch of {len(prompt)}: send them "
                             "one by one")
        prompt = prompt[0]
    if isinstance(prompt, str):
        if not prompt:
            raise BadRequest("prompt is empty")
        if tokenizer is None:
            raise BadRequest("this router has no tokenizer: send the prompt as token ids")
        add_special = body.get("add_special_tokens", True)
        if not isinstance(add_special, bool):
            raise BadRequest(f"add_special_tokens must be true or false, got {add_special!r}")
        return list(tokenizer(prompt, add_special))
    if _ids(prompt):
        if not prompt:
            raise BadRequest("prompt is empty")
        return list(prompt)
    if prompt is None:
        raise BadRequest("prompt is required (token ids or text)")
    raise BadRequest("prompt must be text, a list of token ids, or a batch of one of either")


def model_tokenizer(model_dir: str | Path) -> Tokenizer:
    """The model folder's tokenizer (transformers' AutoTokenizer), as a function of text."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
    return lambda text, add_special: tokenizer(text, add_special_tokens=add_special)["input_ids"]
