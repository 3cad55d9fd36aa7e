#!/usr/bin/env python3
"""Byte-level token shards for fast trainer tests: token = byte (vocab 256), llm.c's uint16 format.

byte_shards.py OUT_DIR [--plant STEP] < text
writes OUT_DIR/b_val_000000.bin (the first 2000 bytes) and OUT_DIR/b_train_000001.bin (the rest);
--plant STEP replaces the 129 tokens that step STEP (1-based) reads in order with B=4, T=32 by byte
126 '~', which tinyshakespeare never has: a loss spike.
"""
import argparse
import struct
import sys


def write_shard(path, ids):
    header = struct.pack("<256i", 20240520, 1, len(ids), *[0] * 253)
    with open(path, "wb") as f:
        f.write(header + struct.pack("<%dH" % len(ids), *ids))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out_dir")
    ap.add_argument("--plant", type=int, default=0)
    args = ap.parse_args()
    text = bytearray(sys.stdin.buffer.read())
    train = text[2000:]
    if args.plant:
        begin = (args.plant - 1) * 128
        train[begin:begin + 129] = b"~" * 129
    write_shard(args.out_dir + "/b_val_000000.bin", text[:2000])
    write_shard(args.out_dir + "/b_train_000001.bin", train)


if __name__ == "__main__":
    main()
