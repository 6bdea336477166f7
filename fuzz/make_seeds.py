"""Write the seed corpora of the C fuzz targets that need structured inputs (fuzz/corpus/).

- open/: small real indexes (token widths 1, 2, 4; one or two shards; with and without
  ntdcache.bin; an empty corpus) serialized as fuzz_open.c reads them: per file a record
  [tag u8][length u32 LE][bytes], tag = file kind (0 tokens.bin .. 4 ntdcache.bin) + 8 * shard.
  Plus forged variants of those indexes (forged_seeds): cases that once crashed the core at open
  or first use, so that mutations start from them too.
- build/: token streams for fuzz_build.c ([width][vocab][ntd cache][batch] then tokens, 0xFF
  ending a document).

Run from the repository root with the package importable:
    python fuzz/make_seeds.py
The seeds are committed; rerun only when the index format changes.
"""
from __future__ import annotations

import struct
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent
FILES = ["tokens.bin", "sa.bin", "docs.bin", "unigram.bin", "ntdcache.bin"]


def serialize(index_dir: Path, max_shards: int = 2) -> bytes:
    out = bytearray()
    shards = sorted(index_dir.glob("shard_*"))[:max_shards]
    for s, shard in enumerate(shards):
        for kind, name in enumerate(FILES):
            path = shard / name
            if path.exists():
                data = path.read_bytes()
                out += struct.pack("<BI", kind + 8 * s, len(data)) + data
    return bytes(out)


def open_seeds(tmp: Path) -> dict[str, bytes]:
    from infinigram_hf.build import build_index

    text = [b"abracadabra abracadabra", b"the cat sat on the mat", b"", b"aaaaaaaa", b"mississippi"]
    cases = {
        "bytes-1shard-ntc": dict(docs=[list(t) for t in text], vocab_size=255, ntd_cache_min_cost=2),
        "bytes-2shards": dict(docs=[list(t) for t in text], vocab_size=255, max_shard_tokens=40,
                              ntd_cache_min_cost=0),
        "u16-2shards-ntc": dict(docs=[[1, 2, 3, 1, 2, 4] * 4, [300, 2, 2], [5, 4, 3, 2, 1]], vocab_size=301,
                                max_shard_tokens=30, ntd_cache_min_cost=1),
        "u32-1shard": dict(docs=[[70000, 1, 2], [1, 2, 70000, 1, 2]], vocab_size=70001, ntd_cache_min_cost=0),
        "empty": dict(docs=[], vocab_size=10, ntd_cache_min_cost=0),
        "one-token": dict(docs=[[3]], vocab_size=4, ntd_cache_min_cost=0),
    }
    seeds = {}
    for name, kw in cases.items():
        docs = kw.pop("docs")
        build_index(docs, tmp / name, progress=False, **kw).close()
        seeds[name] = serialize(tmp / name)
    return seeds


def _unigram_wrapping_counts(index_dir: Path) -> None:
    """Shard 0's first two unigram counts forged so that their uint64 sum wraps around 2^64 to the
    true total: the first token's suffix-array range then reached 2^62 ranks past the array, and
    count([t, x]) crashed (SIGSEGV) before open checked each count against what is left."""
    path = index_dir / "shard_00000" / "unigram.bin"
    data = bytearray(path.read_bytes())
    (c0,), (c1,) = struct.unpack_from("<Q", data, 64 + 8), struct.unpack_from("<Q", data, 64 + 24)
    struct.pack_into("<Q", data, 64 + 8, 2**62)
    struct.pack_into("<Q", data, 64 + 24, (c0 + c1 - 2**62) % 2**64)
    path.write_bytes(bytes(data))


def forged_seeds(tmp: Path) -> dict[str, bytes]:
    from infinigram_hf.build import build_index

    docs = [[1, 2, 3, 1, 2, 4] * 4, [0, 2, 2], [5, 4, 3, 2, 1, 0]]
    build_index(docs, tmp / "forged-unigram", vocab_size=8, ntd_cache_min_cost=0, progress=False).close()
    _unigram_wrapping_counts(tmp / "forged-unigram")
    return {"unigram-counts-wrap": serialize(tmp / "forged-unigram")}


def build_seeds() -> dict[str, bytes]:
    def stream(width_sel: int, vocab: bytes, ntc: int, batch: int, tokens: bytes) -> bytes:
        return bytes([width_sel]) + vocab + bytes([ntc, batch]) + tokens

    return {
        "bytes-abra": stream(0, bytes([30]), 2, 1, b"\x00\x01\x11\x00\x02\x00\x00\x01\x11\x00\xff\x03\x03\x03\xff\xff\x05"),
        "u16-repeats": stream(1, struct.pack("<H", 299), 1, 3, bytes([1, 2, 1, 2, 1, 2, 0xFF, 2, 1, 0xFF, 7, 7, 7, 7])),
        "u32-big-ids": stream(2, b"\x01" + struct.pack("<H", 5), 3, 2,
                              b"\xf0\x10\x27\x00\x00\x01\xf0\x10\x27\x00\x00\x01\xff\x02\x03"),
        "u32-huge-vocab": stream(2, b"\x00" + struct.pack("<I", 0xFFFFFFF0), 0, 1,
                                 b"\xf0\xff\xff\xff\x0f\x01\xf0\xff\xff\xff\x0f\x01\xff"),
        "empty-docs": stream(0, bytes([5]), 5, 2, b"\xff\xff\xff\x01\xff"),
    }


def main() -> int:
    with tempfile.TemporaryDirectory() as tmp:
        open_corpus = {**open_seeds(Path(tmp)), **forged_seeds(Path(tmp))}
        for target, seeds in (("open", open_corpus), ("build", build_seeds())):
            out = ROOT / "corpus" / target
            out.mkdir(parents=True, exist_ok=True)
            for name, data in seeds.items():
                (out / name).write_bytes(data)
            print(f"{out}: {len(seeds)} seeds, {sum(map(len, seeds.values()))} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
