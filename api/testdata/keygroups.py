#!/usr/bin/env python3
"""Writes keygroups.json: key-group vectors computed from the key hash as
stated.proto specifies it, independently of the Go code (which
api/client's TestKeyGroupVectors checks against the file, as the Node
client's conformance script does). Run: python3 keygroups.py > keygroups.json
"""
import json

MASK = 0xFFFFFFFF


def fnv1a32(data: bytes) -> int:
    h = 2166136261
    for b in data:
        h ^= b
        h = (h * 16777619) & MASK
    return h


def signed(x: int) -> int:
    return x - (1 << 32) if x & 0x80000000 else x


def rotl(x: int, n: int) -> int:
    return ((x << n) | (x >> (32 - n))) & MASK


def murmur(code: int) -> int:
    k = (code & MASK) * 0xCC9E2D51 & MASK
    k = rotl(k, 15)
    k = k * 0x1B873593 & MASK
    x = rotl(k, 13)
    x = (x * 5 + 0xE6546B64) & MASK
    x ^= 4
    x ^= x >> 16
    x = x * 0x85EBCA6B & MASK
    x ^= x >> 13
    x = x * 0xC2B2AE35 & MASK
    x ^= x >> 16
    v = signed(x)
    if v >= 0:
        return v
    return 0 if v == -(1 << 31) else -v


KEYS = [b"", b"a", b"b", b"hello", b"k0", b"k1", b"k42", b"user-1234", b"\x00", b"\xff",
        b"\x00\x01\x02\x03", b"\xff\xfe\xfd\xfc\xfb", "ключ".encode(), "鍵".encode(),
        b"word:the", b"word:stream", b"A" * 100, bytes(range(256))]
MAX_PARALLELISMS = [1, 2, 7, 128, 1000, 4096, 32768]

vectors = []
for key in KEYS:
    h = signed(fnv1a32(key))
    m = murmur(h)
    vectors.append({
        "key_hex": key.hex(),
        "fnv1a32": h,
        "murmur": m,
        "key_groups": {str(p): m % p for p in MAX_PARALLELISMS},
    })
doc = {
    "comment": "key bytes (hex) -> fnv1a32 (FNV-1a 32 read as a signed int) -> murmur "
               "(Flink's MathUtils.murmurHash of it) -> key group (murmur % max parallelism); see api/stated.proto",
    "max_parallelisms": MAX_PARALLELISMS,
    "vectors": vectors,
}
print(json.dumps(doc, indent=1))
