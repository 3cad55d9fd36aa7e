#!/usr/bin/env python3
"""Writes a token shard in llm.c's format for the distributed tests:
a 256 x int32 header (magic 20240520, version 1, token count) then uint16 tokens.
The tokens are short arithmetic runs over a small vocabulary, so a tiny model
has something to learn and the loss falls.  usage: synthetic_shard.py OUT [TOKENS] [VOCAB]"""
import random
import struct
import sys

out = sys.argv[1]
count = int(sys.argv[2]) if len(sys.argv) > 2 else 40000
vocab = int(sys.argv[3]) if len(sys.argv) > 3 else 512
random.seed(4)
tokens = []
while len(tokens) < count:
    base, stride = random.randrange(vocab), random.randrange(1, 9)
    tokens += [(base + k * stride) % vocab for k in range(random.randrange(3, 12))]
tokens = tokens[:count]
header = [20240520, 1, count] + [0] * 253
with open(out, "wb") as f:
    f.write(struct.pack("<256i", *header) + struct.pack("<%dH" % count, *tokens))
