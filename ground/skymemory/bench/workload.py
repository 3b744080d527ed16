"""The TTFT workload, in the style of vLLM's prefix-caching example.

vLLM's example (examples/offline_inference/prefix_caching.py) gives every
prompt one long shared prefix (a school principal drafting interview questions)
followed by a different short question. We do the same with a prefix of an
exact token length: the shared document below, repeated as needed and cut to
`prefix_tokens` tokens, then one of several questions cut to `suffix_tokens`.

Prompts are strings (TTFT starts at the string: tokenising is part of it).
The cut is made in token space and decoded back; `build_workload` checks the
round trip so the prefix really covers `prefix_tokens` tokens of every prompt.
"""

from __future__ import annotations

from dataclasses import dataclass

SHARED_PREFIX = (
    "You are an expert school principal, skilled in effectively managing faculty and staff. "
    "Draft 10-15 questions for a potential first grade Head Teacher for my K-12, all-girls', "
    "independent school that emphasizes community, joyful discovery, and life-long learning. "
    "The candidate is coming in for a first-round panel interview for an 8th grade Math teaching role. "
    "They have 5 years of previous teaching experience as an assistant teacher at a co-ed, public school "
    "with experience in middle school math teaching. Based on these information, fulfill the following "
    "paragraph: The school day begins at eight with morning circle, where every class shares one thing "
    "it wonders about. Teachers plan units together in grade-level teams and visit each other's classrooms "
    "every month. Families are invited to a learning exhibition at the end of each term, where students "
    "explain what they built, what failed, and what they would try next. The mathematics program moves "
    "from concrete materials to pictures to symbols, and students keep a notebook of strategies they "
    "invented. Assessment is mostly formative: short conversations, exit tickets, and portfolios. "
)

# Distinct first letters: even a one-token suffix differs between prompts.
QUESTIONS = (
    "Describe the first thing the candidate should do on the first day of school. Answer:",
    "Explain how the candidate should teach fractions to a student who is struggling. Answer:",
    "Which three qualities matter most for a teacher at this school, and why? Answer:",
    "Suggest how the candidate would involve families in the mathematics program. Answer:",
)


@dataclass(frozen=True)
class Prompt:
    text: str
    prefix_tokens: int  # tokens of the shared prefix (including any BOS the tokenizer adds)
    suffix_index: int
    n_tokens: int  # tokens of the whole prompt


@dataclass(frozen=True)
class Workload:
    prefix_tokens: int
    suffix_tokens: int
    prompts: tuple[Prompt, ...]  # one per suffix; every prompt starts with the same prefix


def _ids(tokenizer, text: str) -> list[int]:
    return list(tokenizer(text).input_ids)


def _adds_bos(tokenizer) -> bool:
    ids = _ids(tokenizer, "a")
    return bool(ids) and tokenizer.bos_token_id is not None and ids[0] == tokenizer.bos_token_id


def _text_with_tokens(tokenizer, source: str, n_tokens: int, *, with_bos: bool) -> str:
    """A string that tokenises to exactly n_tokens tokens (counting BOS when with_bos), cut from `source`.

    The cut is made in token space and decoded back; subword tokenizers do not
    always round-trip a cut, so a few neighbouring cut points are tried.
    """
    text = source
    while len(_ids(tokenizer, text)) < n_tokens + 16:
        text += source
    bos = 1 if _adds_bos(tokenizer) else 0
    body = _ids(tokenizer, text)[bos:]
    target = n_tokens if with_bos else n_tokens + bos  # what tokenizer(result) must return
    wanted = n_tokens - bos if with_bos else n_tokens
    for delta in (0, -1, 1, -2, 2, -3, 3):
        candidate = tokenizer.decode(body[: wanted + delta], skip_special_tokens=True)
        if len(_ids(tokenizer, candidate)) == target:
            return candidate
    raise ValueError(f"could not cut a text of exactly {n_tokens} tokens with this tokenizer")


def build_workload(tokenizer, prefix_tokens: int, suffix_tokens: int, n_suffixes: int) -> Workload:
    """Prompts = the shared prefix of exactly `prefix_tokens` tokens + each of `n_suffixes` questions.

    `prefix_tokens` counts the tokens the tokenizer produces for the prefix alone
    (with its BOS token, if it adds one), so the KV blocks of a prompt's first
    prefix_tokens tokens are the same for every prompt.
    """
    if prefix_tokens < 1 or suffix_tokens < 1:
        raise ValueError("prefix and suffix need at least one token each")
    if not 1 <= n_suffixes <= len(QUESTIONS):
        raise ValueError(f"n_suffixes must be 1..{len(QUESTIONS)}")
    prefix = _text_with_tokens(tokenizer, SHARED_PREFIX, prefix_tokens, with_bos=True)
    prefix_ids = _ids(tokenizer, prefix)
    prompts = []
    for k in range(n_suffixes):
        question = QUESTIONS[k] + " " + QUESTIONS[(k + 1) % len(QUESTIONS)]
        # cut the question alone, then check the joined prompt tokenises as prefix + suffix
        suffix = _text_with_tokens(tokenizer, question, suffix_tokens, with_bos=False)
        text = prefix + suffix
        ids = _ids(tokenizer, text)
        if ids[:prefix_tokens] != prefix_ids:
            raise ValueError("the suffix changes how the shared prefix tokenises; choose other questions")
        prompts.append(Prompt(text, prefix_tokens, k, len(ids)))
    return Workload(prefix_tokens, suffix_tokens, tuple(prompts))
