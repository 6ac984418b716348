#!/usr/bin/env python3
"""Writes pieces.jsonl: random texts and their Qwen2 pre-tokenizer pieces, split by Python's
`regex` module (a backtracking engine like Oniguruma, with lookahead), as an independent check
of the hand-written scanner in pretok.go. Characters are limited to ones assigned before
Unicode 14, where the Unicode versions of regex, Oniguruma and Go agree, and to no U+001C-001F
(\\s differs there between engines). Run: python3 gen_pieces.py > pieces.jsonl"""
import json
import random

import regex

PAT = regex.compile(r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+""")

ALPHABET = (list("abcxyzSTMDRVELsdtmrvel'\"`.,;:!?()[]{}<>|=+-*/\\_#$%&@^~0123456789")
            + [" "] * 8 + ["\t", "\n", "\n", "\r", "\x0b", "\x0c"]
            + ["ſ", "\u00a0", "\u0085", "\u3000", "\u2028", "\u2029", "\u2003", "\u202f", "\ufeff",
               "\u200b", "\u0301", "\u0308", "é", "ß", "İ", "中", "文", "テ", "ス", "한", "ع", "٣", "५",
               "Ⅻ", "²", "½", "😀", "👍", "\u00ad", "—", "…", "«", "»", "€", "¥"])

def main():
    rnd = random.Random(20241203)
    for _ in range(3000):
        n = rnd.choice([1, 2, 3, 5, 8, 13, 21, 40])
        text = "".join(rnd.choice(ALPHABET) for _ in range(n))
        pieces = [m.group(0) for m in PAT.finditer(text)]
        assert "".join(pieces) == text
        print(json.dumps({"text": text, "pieces": pieces}, ensure_ascii=False))

main()
