#!/usr/bin/env python3
"""tokenizer_goldens.py - Hugging Face `tokenizers` (the oracle) on the inputs tests/test_tokenizer.c
checks for normalizers and long whitespace; writes tests/data/tokenizer/:

  *.json         small tokenizer.json files: a byte-level BPE whose vocabulary is the 256 GPT-2
                 byte symbols and no merges (so ids spell out the bytes the normalizer produced),
                 each declaring one normalizer; qwen2-split.json has no normalizer and Qwen2's Split
                 regex (the 10 MB whitespace case);
  expected.json  {"cases": [{"tokenizer", "text", "ids"}], "mixed_ws": {...}}: ids from HF for each
                 case; "tokenizer" is a file above or "qwen2" (the shared testdata's Qwen2
                 vocab.json + merges.txt, built here as Qwen2's tokenizer.json declares it: NFC,
                 Split(regex, isolated), ByteLevel); mixed_ws is the count, FNV-1a 64 hash and ends
                 of the ids of the 1 MB text mixed_ws_text() builds (test_tokenizer.c builds the
                 same bytes).

    pip install tokenizers
    python3 tests/gen/tokenizer_goldens.py [TESTDATA]   # TESTDATA: ../shared/testdata by default
"""
import json
import os
import sys

from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
OUT = os.path.join(ROOT, 'tests', 'data', 'tokenizer')
QWEN2_RE = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+"
            r"[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")


def gpt2_alphabet():
    bs = list(range(33, 127)) + list(range(161, 173)) + list(range(174, 256))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


BYTE_VOCAB = {ch: b for b, ch in sorted(gpt2_alphabet().items())}

FIXTURES = {
    'nfc': {'type': 'NFC'},
    'nfd': {'type': 'NFD'},
    'nfkc': {'type': 'NFKC'},
    'nfkd': {'type': 'NFKD'},
    'lowercase': {'type': 'Lowercase'},
    'strip': {'type': 'Strip', 'strip_left': True, 'strip_right': True},
    'strip-left': {'type': 'Strip', 'strip_left': True, 'strip_right': False},
    'prepend': {'type': 'Prepend', 'prepend': '\u2581'},
    'replace': {'type': 'Sequence', 'normalizers': [
        {'type': 'Replace', 'pattern': {'String': ' '}, 'content': '\u2581'},
        {'type': 'Replace', 'pattern': {'Regex': '[0-9]+'}, 'content': '#'}]},
    'sequence': {'type': 'Sequence', 'normalizers': [
        {'type': 'NFKD'}, {'type': 'Lowercase'},
        {'type': 'Sequence', 'normalizers': [{'type': 'Strip', 'strip_left': False,
                                              'strip_right': True}]},
        {'type': 'Prepend', 'prepend': '>'}]},
}


def tokenizer_json(normalizer, split=False):
    pre = {'type': 'ByteLevel', 'add_prefix_space': False, 'trim_offsets': True, 'use_regex': True}
    if split:
        pre = {'type': 'Sequence', 'pretokenizers': [
            {'type': 'Split', 'pattern': {'Regex': QWEN2_RE}, 'behavior': 'Isolated',
             'invert': False},
            {'type': 'ByteLevel', 'add_prefix_space': False, 'trim_offsets': False,
             'use_regex': False}]}
    return {'version': '1.0', 'truncation': None, 'padding': None, 'added_tokens': [],
            'normalizer': normalizer, 'pre_tokenizer': pre, 'post_processor': None,
            'decoder': {'type': 'ByteLevel', 'add_prefix_space': True, 'trim_offsets': True,
                        'use_regex': True},
            'model': {'type': 'BPE', 'dropout': None, 'unk_token': None,
                      'continuing_subword_prefix': None, 'end_of_word_suffix': None,
                      'fuse_unk': False, 'byte_fallback': False, 'ignore_merges': False,
                      'vocab': BYTE_VOCAB, 'merges': []}}


def qwen2(testdata):
    d = os.path.join(testdata, 'tokenizers', 'qwen2')
    t = Tokenizer(models.BPE.from_file(os.path.join(d, 'vocab.json'),
                                       os.path.join(d, 'merges.txt')))
    t.normalizer = normalizers.NFC()
    t.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN2_RE), behavior='isolated', invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    t.decoder = decoders.ByteLevel()
    return t


# Decomposed, precomposed and compatibility characters, marks out of canonical order, Hangul,
# case with multi-code-point lowercase, whitespace to strip, ASCII around all of them.
TEXTS = [
    'e\u0301', 'caf\u00e9 or cafe\u0301?', 'A\u030a \u212b \u00c5', '\u1100\u1161\u11a8 \uac01',
    '\ufb01ne \u2460\u2461 \uff48\uff45\uff4c\uff4c\uff4f x\u00b2 \u2122',
    '\u1e9b\u0323 q\u0307\u0323 q\u0323\u0307', 'a\u0308\u0301\u0316b', '\u0344\u0958 \u2adc',
    '\u0130stanbul \u03a3\u0391\u03a3 \u01c5 \u1f88', '  padded\ttext \n',
    '\u3000\u00a0ideographic\u2003', 'a  b   c 123 45x6', '', ' ', 'plain ASCII only',
    '\ufdfa \u3392 \u00bd \u2075', 'Z\u0327\u030c\u0301 \u0ddd \u0b4b \u1026',
]


def mixed_ws_text():
    """1 MB of whitespace runs (one of 400 KB) mixed with words; tests/test_tokenizer.c has the
    same generator (xorshift64, same tables, same order)."""
    mask = (1 << 64) - 1
    state = [0x9E3779B97F4A7C15]

    def rnd():
        x = state[0]
        x ^= (x << 13) & mask
        x ^= x >> 7
        x ^= (x << 17) & mask
        state[0] = x
        return x >> 32

    words = ['hello', 'world', 'Qwen', 'caf\u00e9', '\u65e5\u672c\u8a9e', 'x1', '2024', '!!',
             "don't", '\u00c5ngstr\u00f6m']
    ws = [' ', '  ', '\t', '\n', '\r\n', ' \n ', '\n\n', '\u3000']
    out = [' ' * 400000, 'end']
    size = 400003
    while size < 1000000:
        r = rnd() % 100
        if r < 45:
            s = words[rnd() % len(words)]
        elif r < 95:
            s = ws[rnd() % len(ws)] * (1 + rnd() % 64)
        else:
            s = ' ' * (1000 + rnd() % 20000)
        out.append(s)
        size += len(s.encode())
    return ''.join(out)


def fnv1a64(ids):
    h = 0xCBF29CE484222325
    for i in ids:
        for b in int(i).to_bytes(4, 'little', signed=True):
            h = ((h ^ b) * 0x100000001B3) & ((1 << 64) - 1)
    return h


def main():
    testdata = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, '..', 'shared',
                                                                    'testdata')
    os.makedirs(OUT, exist_ok=True)
    files = {}
    for name, norm in FIXTURES.items():
        files[name + '.json'] = tokenizer_json(norm)
    files['qwen2-split.json'] = tokenizer_json(None, split=True)
    files['unsupported.json'] = tokenizer_json({'type': 'BertNormalizer', 'clean_text': True,
                                                'handle_chinese_chars': True,
                                                'strip_accents': None, 'lowercase': True})
    for fn, obj in files.items():
        with open(os.path.join(OUT, fn), 'w', encoding='utf-8') as f:
            json.dump(obj, f, ensure_ascii=False, separators=(',', ':'))
            f.write('\n')
    cases = []
    for name in list(FIXTURES) + ['qwen2']:
        tok = qwen2(testdata) if name == 'qwen2' else Tokenizer.from_file(
            os.path.join(OUT, name + '.json'))
        for text in TEXTS:
            cases.append({'tokenizer': name if name == 'qwen2' else name + '.json', 'text': text,
                          'ids': tok.encode(text, add_special_tokens=False).ids})
    split = Tokenizer.from_file(os.path.join(OUT, 'qwen2-split.json'))
    for text in [' ' * 600 + 'x', '\n \t' * 100 + 'y ', 'a' + ' ' * 500, '\r\n  \n\t ']:
        cases.append({'tokenizer': 'qwen2-split.json', 'text': text,
                      'ids': split.encode(text, add_special_tokens=False).ids})
    mixed = mixed_ws_text()
    ids = qwen2(testdata).encode(mixed, add_special_tokens=False).ids
    expected = {'generator': 'tests/gen/tokenizer_goldens.py',
                'tokenizers_version': __import__('tokenizers').__version__,
                'cases': cases,
                'mixed_ws': {'bytes': len(mixed.encode()), 'n_ids': len(ids),
                             'fnv1a64': '%016x' % fnv1a64(ids), 'first': ids[:8],
                             'last': ids[-8:]}}
    with open(os.path.join(OUT, 'expected.json'), 'w', encoding='utf-8') as f:
        f.write('{\n')  # one case per line
        for k in ('generator', 'tokenizers_version', 'mixed_ws'):
            f.write(' %s: %s,\n' % (json.dumps(k), json.dumps(expected[k])))
        f.write(' "cases": [\n%s\n ]\n}\n' % ',\n'.join('  ' + json.dumps(c) for c in cases))
    print('wrote %d tokenizer files and %d cases to %s' % (len(files), len(cases), OUT))


if __name__ == '__main__':
    main()
