"""A tokenizer that needs no download: byte-level, deterministic, with BOS/EOS.

Every UTF-8 byte of the text is one token, so any string round-trips exactly
and the vocabulary never changes (which keeps the cache fingerprint stable).
Ids follow the Llama convention for the special tokens:

    0 <unk>   1 <s> (BOS)   2 </s> (EOS)   3..258 the bytes 0x00..0xFF

It is a `tokenizers` BPE model with the 256 byte-level symbols and no merges,
wrapped in transformers' `PreTrainedTokenizerFast`, so it behaves like any
Hugging Face tokenizer (`__call__`, `decode`, `save_pretrained`). Encoding adds
BOS in front (like TinyLlama's tokenizer) and never adds EOS.

Text uses about one token per character for ASCII, i.e. ~4x more tokens than
TinyLlama's SentencePiece vocabulary for English text.
"""

from __future__ import annotations

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors
from transformers import PreTrainedTokenizerFast

SPECIAL_TOKENS = ["<unk>", "<s>", "</s>"]
UNK_ID, BOS_ID, EOS_ID = 0, 1, 2
BYTE_OFFSET = len(SPECIAL_TOKENS)
VOCAB_SIZE = BYTE_OFFSET + 256
NAME = "skymemory-bytes-v1"


def _byte_symbols() -> list[str]:
    """The 256 printable stand-ins GPT-2 style byte-level BPE uses for the bytes 0..255, in byte order."""
    table = pre_tokenizers.ByteLevel.alphabet()  # the 256 symbols, unordered
    # Rebuild GPT-2's bytes_to_unicode order so id 3+b is byte b.
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(
        range(ord("®"), ord("ÿ") + 1)
    )
    mapping, extra = {}, 0
    for b in range(256):
        if b in printable:
            mapping[b] = chr(b)
        else:
            mapping[b] = chr(256 + extra)
            extra += 1
    symbols = [mapping[b] for b in range(256)]
    assert set(symbols) == set(table), "byte-level alphabet changed in the tokenizers library"
    return symbols


def build_byte_tokenizer() -> PreTrainedTokenizerFast:
    vocab = {tok: i for i, tok in enumerate(SPECIAL_TOKENS)}
    for b, symbol in enumerate(_byte_symbols()):
        vocab[symbol] = BYTE_OFFSET + b
    core = Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    core.decoder = decoders.ByteLevel()
    core.post_processor = processors.TemplateProcessing(
        single="<s> $A", pair="<s> $A $B", special_tokens=[("<s>", BOS_ID)]
    )
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=core,
        bos_token="<s>",
        eos_token="</s>",
        unk_token="<unk>",
        pad_token="</s>",
        name_or_path=NAME,
        model_max_length=1 << 30,
    )
    return tokenizer
