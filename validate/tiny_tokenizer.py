"""A small character-level tokenizer for random-weight checkpoints (make-checkpoint), built with the `tokenizers`
library and saved the way Hugging Face saves any fast tokenizer, with a chat template: `offloadsim run` and
transformers load it with AutoTokenizer like a real checkpoint's."""
from __future__ import annotations

import string
from pathlib import Path

from hwmodels.units import InputError

SPECIALS = ("<unk>", "<s>", "</s>", "<|system|>", "<|user|>", "<|assistant|>")
CHAT_TEMPLATE = ("{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}\n{% endfor %}"
                 "{% if add_generation_prompt %}<|assistant|>{% endif %}")
MIN_VOCAB = len(SPECIALS) + 2


def tiny_vocab(vocab_size: int) -> dict[str, int]:
    """The special tokens, then printable ASCII characters, then filler tokens '<extra_N>' up to `vocab_size`."""
    if vocab_size < MIN_VOCAB:
        raise InputError(f"vocab: {vocab_size} is too small for the checkpoint's tokenizer; give --vocab "
                         f"{MIN_VOCAB} or more.")
    chars = [c for c in string.printable if c not in "\x0b\x0c"]
    names = list(SPECIALS) + chars[: vocab_size - len(SPECIALS)]
    names += [f"<extra_{k}>" for k in range(vocab_size - len(names))]
    return {name: k for k, name in enumerate(names)}


def write_tiny_tokenizer(out: Path, vocab_size: int) -> dict[str, int]:
    """Save the tokenizer into folder `out`; returns its special ids (bos_token_id, eos_token_id) for the config."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = tiny_vocab(vocab_size)
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")  # one token a character
    tok.decoder = decoders.Fuse()
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", bos_token="<s>", eos_token="</s>",
                                   additional_special_tokens=list(SPECIALS[3:]), chat_template=CHAT_TEMPLATE)
    fast.save_pretrained(out)
    return {"bos_token_id": vocab["<s>"], "eos_token_id": vocab["</s>"]}
