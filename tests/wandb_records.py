"""Read an offline wandb run's `.wandb` transaction log without the network or wandb's private reader.

The file is a LevelDB-style log (the format wandb documents for its transaction log): a 7-byte header
(`:W&B`, magic 0xBEE1, version), then 32 KiB blocks of chunks, each `crc32 u32 | length u16 | type u8 |
payload`, where type 1 is a whole record and 2/3/4 are the first/middle/last piece of a split one; a block
tail shorter than a chunk header is zero padding. Each record is a `wandb_internal_pb2.Record` protobuf.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from pathlib import Path

BLOCK = 32 * 1024
CHUNK_HEADER = 7
FULL, FIRST, MIDDLE, LAST = 1, 2, 3, 4


def raw_records(path: Path) -> Iterator[bytes]:
    data = Path(path).read_bytes()
    if data[:4] != b":W&B":
        raise ValueError(f"{path}: not a wandb transaction log (header {data[:7]!r})")
    pos, pending = CHUNK_HEADER, b""
    while pos + CHUNK_HEADER <= len(data):
        left_in_block = BLOCK - pos % BLOCK
        if left_in_block < CHUNK_HEADER:
            pos += left_in_block
            continue
        _crc, length, kind = struct.unpack("<IHB", data[pos : pos + CHUNK_HEADER])
        payload = data[pos + CHUNK_HEADER : pos + CHUNK_HEADER + length]
        pos += CHUNK_HEADER + length
        if kind == FULL:
            yield payload
        elif kind == FIRST:
            pending = payload
        elif kind == MIDDLE:
            pending += payload
        elif kind == LAST:
            yield pending + payload
        elif kind == 0 and length == 0:  # zero padding at the end of a block
            pos += BLOCK - pos % BLOCK if pos % BLOCK else 0
        else:
            raise ValueError(f"{path}: unknown chunk type {kind} at byte {pos}")


def read_run(path: Path) -> dict:
    """{"kinds": {record type: count}, "history": set of logged keys, "summary": set of summary keys}."""
    from wandb.proto import wandb_internal_pb2 as pb

    kinds: dict[str, int] = {}
    history: set[str] = set()
    summary: set[str] = set()
    for payload in raw_records(path):
        record = pb.Record()
        record.ParseFromString(payload)
        kind = record.WhichOneof("record_type")
        kinds[kind] = kinds.get(kind, 0) + 1
        if kind == "history":
            history |= {item.key or "/".join(item.nested_key) for item in record.history.item}
        elif kind == "summary":
            summary |= {item.key or "/".join(item.nested_key) for item in record.summary.update}
    return {"kinds": kinds, "history": history, "summary": summary}
