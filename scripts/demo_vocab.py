#!/usr/bin/env python3
"""demo_vocab.py - writes data/demo-vocab.gguf: a small byte-level BPE vocabulary (4096 tokens,
Qwen2's pre-tokenizer) trained with Hugging Face `tokenizers` on this repository's own docs, so
that `make run`'s built-in random-weight model prints text instead of raw ids on a fresh machine.
It also writes data/demo-vocab.expected.json (HF's ids for a few strings, which test_tokenizer
compares with ours).

    pip install tokenizers gguf numpy
    python3 scripts/demo_vocab.py

Deterministic for a given tokenizers version (the committed files: tokenizers 0.23.3, gguf 0.18).
"""
import glob
import json
import os

import gguf
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
OUT = os.path.join(ROOT, "data")
VOCAB = 4096
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
# Qwen2's pre-tokenizer split (tokenizer.json of Qwen/Qwen2.5-*)
QWEN2_PAT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
             r"|\s*[\r\n]+|\s+(?!\S)|\s+")
SAMPLES = ["The capital of France is", "Mixture-of-Experts models route each token to a few experts.",
           "  leading spaces, tabs\tand\nnewlines", "numbers 12345 and 3.14159", "naïve café"]


def corpus():
    files = sorted([os.path.join(ROOT, "README.md")] + glob.glob(os.path.join(ROOT, "docs", "*.md")))
    for f in files:
        with open(f, encoding="utf-8") as fh:
            yield fh.read()


def main():
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN2_PAT), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=VOCAB, special_tokens=SPECIALS, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(corpus(), trainer)
    os.makedirs(OUT, exist_ok=True)
    spec = json.loads(tok.to_str())
    vocab = spec["model"]["vocab"]
    n = len(vocab)
    tokens = [None] * n
    for t, i in vocab.items():
        tokens[i] = t
    merges = [m if isinstance(m, str) else " ".join(m) for m in spec["model"]["merges"]]
    types = [gguf.TokenType.CONTROL if t in SPECIALS else gguf.TokenType.NORMAL for t in tokens]
    w = gguf.GGUFWriter(os.path.join(OUT, "demo-vocab.gguf"), "qwen3moe")
    w.add_name("hmoe demo vocabulary")
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("qwen2")
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(merges)
    w.add_eos_token_id(vocab["<|endoftext|>"])
    w.add_bos_token_id(vocab["<|endoftext|>"])
    w.add_add_bos_token(False)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    expected = {"vocab": n, "samples": [{"text": s, "ids": tok.encode(s).ids} for s in SAMPLES]}
    with open(os.path.join(OUT, "demo-vocab.expected.json"), "w") as f:
        json.dump(expected, f, indent=1, ensure_ascii=False)
        f.write("\n")
    print(f"{n} tokens, {len(merges)} merges -> data/demo-vocab.gguf")


if __name__ == "__main__":
    main()
