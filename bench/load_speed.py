"""How fast a large trace loads: `python -m bench.load_speed [--rows N] [--repeat R] [--gzip]`.

Writes synthetic traces of N rows (default 5,000,000) in the Vidur, Azure (wall-clock timestamps) and Mooncake
(JSONL with hash_ids) formats to a temporary folder, then times `load_trace` on each: best of R runs, wall clock.
"""

from __future__ import annotations

import argparse
import gzip
import tempfile
import time
from pathlib import Path

import numpy as np

from servesim.workloads import load_trace


def write_traces(folder: Path, n: int, rng: np.random.Generator) -> dict[str, Path]:
    import polars as pl

    t = np.cumsum(rng.exponential(0.01, n))  # ~100 req/s
    prompt = rng.integers(1, 8000, n)
    output = rng.integers(1, 1000, n)
    vidur = folder / "vidur.csv"
    pl.DataFrame({"arrived_at": t, "num_prefill_tokens": prompt, "num_decode_tokens": output}).write_csv(vidur)
    azure = folder / "azure.csv"
    stamps = (np.datetime64("2023-11-16T18:15:00", "ns") + (t * 1e9).astype("timedelta64[ns]")).astype("M8[ns]")
    pl.DataFrame({"TIMESTAMP": stamps, "ContextTokens": prompt, "GeneratedTokens": output}).with_columns(
        pl.col("TIMESTAMP").dt.strftime("%Y-%m-%d %H:%M:%S%.9f").str.slice(0, 27)  # 7 digits, as Azure
    ).write_csv(azure)
    mooncake = folder / "mooncake.jsonl"
    blocks = -(-prompt // 512)  # one 512-token block hash per started block, as in Mooncake's traces
    end = np.cumsum(blocks)
    frame = (
        pl.DataFrame(
            {
                "timestamp": (t * 1000).astype(np.int64),
                "input_length": prompt,
                "output_length": output,
                "s": end - blocks,
                "e": end,
            }
        )
        .with_columns(pl.int_ranges("s", "e").alias("hash_ids"))
        .drop("s", "e")
    )
    frame.write_ndjson(mooncake)
    return {"vidur": vidur, "azure": azure, "mooncake": mooncake}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=5_000_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--gzip", action="store_true", help="also time the gzipped Vidur file")
    ap.add_argument("--formats", default="vidur,azure,mooncake")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        t0 = time.perf_counter()
        files = write_traces(folder, args.rows, np.random.default_rng(0))
        if args.gzip:
            files["vidur (gzip)"] = folder / "vidur.csv.gz"
            files["vidur (gzip)"].write_bytes(gzip.compress(files["vidur"].read_bytes(), compresslevel=6))
        print(f"wrote {args.rows:,}-row traces in {time.perf_counter() - t0:.1f} s")
        print(f"{'format':<14} {'rows':>11} {'MB':>8} {'best s':>8} {'rows/s':>12}")
        for name, path in files.items():
            if name.split()[0] not in args.formats.split(","):
                continue
            best = float("inf")
            for _ in range(args.repeat):
                t0 = time.perf_counter()
                table = load_trace(path)
                best = min(best, time.perf_counter() - t0)
            assert len(table) == args.rows
            mb = path.stat().st_size / 1e6
            print(f"{name:<14} {len(table):>11,} {mb:>8.1f} {best:>8.2f} {len(table) / best:>12,.0f}")


if __name__ == "__main__":
    main()
