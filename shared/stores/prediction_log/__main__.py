"""Read a range of the prediction log: a summary, the records as JSON lines, or a DataFrame.

    python -m shared.stores.prediction_log --dir .run/predictions --since 2026-12-01T10 [--until 2026-12-01T12]
    python -m shared.stores.prediction_log --blob --model fraud --version 3 --jsonl | jq .score

`--blob` reads PREDICTION_LOG_CONTAINER of the model storage account the settings name
(ModelStorage, or ModelStorage__blobServiceUri with the signed-in identity).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import orjson

from shared.settings import Settings
from shared.stores.prediction_log import reader


def parse(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m shared.stores.prediction_log", description=__doc__.split("\n")[0])
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--dir", type=Path, help="the log's directory (PREDICTION_LOG_DIR)")
    where.add_argument("--blob", action="store_true", help="the log's container in the model storage account")
    parser.add_argument("--since", type=reader.parse_time, help="from this UTC time (inclusive): 2026-12-01T10")
    parser.add_argument("--until", type=reader.parse_time, help="to this UTC time (exclusive)")
    parser.add_argument("--model", help="one model's records")
    parser.add_argument("--version", help="one version's records (with --model)")
    shape = parser.add_mutually_exclusive_group()
    shape.add_argument("--pandas", action="store_true", help="print the records as a DataFrame (needs pandas)")
    shape.add_argument("--jsonl", action="store_true", help="print the records, one JSON object a line")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse(argv)
    source: Any = args.dir if args.dir is not None else reader.blob_container(Settings.from_env())
    wanted = {"since": args.since, "until": args.until, "model": args.model, "version": args.version}
    if args.pandas:
        try:
            frame = reader.to_pandas(source, **wanted)
        except ImportError as exc:
            sys.stderr.write(f"{exc}\n")
            return 2
        sys.stdout.write(f"{frame}\n")
        return 0
    records = reader.load(source, **wanted)
    if args.jsonl:
        sys.stdout.buffer.write(b"".join(orjson.dumps(r, option=orjson.OPT_APPEND_NEWLINE) for r in records))
    else:
        sys.stdout.write(reader.render(reader.summarize(records)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
