"""Writers of what a run produced: step records and timelines as JSON (`json_records`), step records streamed to
Parquet (`parquet`). Each reads a `SimResult` or its records; none changes them."""
