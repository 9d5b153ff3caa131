"""The rows the reference path stores for OTLP batches, and random byte edits of batches: what the C decoders'
differential tests (test_otlp_fast.py, test_otlp_proto_fast.py) compare them with."""

from __future__ import annotations

import random

from budgetscope.ingest import staging
from budgetscope.ingest.spanbatch import BadBatch
from budgetscope.ingest.staging import DECODED_COLUMNS


def reference_rows(payloads: list[bytes], decode) -> tuple[list, dict[int, str]]:
    """(rows the reference decoder `decode` (bytes → SpanBatch) and the staging SQL give the batches they take,
    sorted; {batch id: error} of the rest). Batch ids count from 1."""
    import duckdb

    con = duckdb.connect()
    staging.setup(con)
    got, bad = [], {}
    for b, p in enumerate(payloads, 1):
        try:
            batch = decode(p)
        except BadBatch as e:
            bad[b] = str(e)
            continue
        if not len(batch):
            continue
        con.register("bs_ref", batch.to_arrow(b))
        staged = con.execute(
            f"SELECT {', '.join(DECODED_COLUMNS)}, err FROM ({staging.normalise('bs_ref')})"
        ).fetchall()
        con.unregister("bs_ref")
        errors = [r[-1] for r in staged if r[-1] is not None]
        if errors:
            bad[b] = errors[0]
        else:
            got += [r[:-1] for r in staged]
    return sorted(got, key=repr), bad


def json_edits(bases: list[bytes], n: int, seed: int) -> list[bytes]:
    """`n` copies of the JSON batches `bases` (drawn in turn at random), each with 1-3 bytes changed, cut or
    inserted, the JSON syntax's bytes likeliest."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        b = bytearray(rng.choice(bases))
        for _ in range(rng.randint(1, 3)):
            i = rng.randrange(len(b))
            op = rng.random()
            if op < 0.4:
                b[i] = rng.choice(b'{}[]",:0123456789abcdefE.-\\ tnul\x00\xc3\x80')
            elif op < 0.7:
                del b[i]
            else:
                b[i:i] = bytes([rng.choice(b'{}[]",:09a\\ ')])
        out.append(bytes(b))
    return out


def wire_edits(bases: list[bytes], n: int, seed: int) -> list[bytes]:
    """`n` copies of the protobuf messages `bases`, each with 1-3 edits: a byte set or a bit flipped, 1-4 bytes cut,
    1-3 random bytes inserted."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        p = bytearray(rng.choice(bases))
        for _ in range(rng.randint(1, 3)):
            i = rng.randrange(len(p))
            op = rng.randrange(4)
            if op == 0:
                p[i] = rng.randrange(256)
            elif op == 1:
                p[i] ^= 1 << rng.randrange(8)
            elif op == 2:
                del p[i : i + rng.randint(1, 4)]
            else:
                p[i:i] = rng.randbytes(rng.randint(1, 3))
        out.append(bytes(p))
    return out
