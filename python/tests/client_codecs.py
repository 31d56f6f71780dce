"""Codecs only the tests need: the strict decoder of the JSON records the trainer writes (Go's
``Decode*``: unknown fields, duplicate keys, wrong JSON types and unknown schema ids are refused)
and the Arrow encoder of advantages (Go's correct stage writes them; the client only reads them).
They live here, not in wmrl_client, because no trainer calls them."""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa
import pyarrow.ipc as ipc

from wmrl_client import _json as j
from wmrl_client import contract as c
from wmrl_client.arrow import check_schema, schema_for, validate_table
from wmrl_client.codec import _SPECS, Record
from wmrl_client.errors import UNKNOWN_SCHEMA, FieldError, SchemaVersionError
from wmrl_client.records import AdvantageRow, validate_advantage_rows


def decode_record(schema: str, b: bytes) -> Record:
    """Strictly decode and validate the record named by schema (the wmrl-schema header)."""
    if schema in c.ADVANTAGE_SCHEMAS:
        raise SchemaVersionError(
            c.HEADER_SCHEMA, schema, "a JSON record schema", "advantages are Arrow: use decode_advantages"
        )
    spec = _SPECS.get(schema)
    if spec is None:
        raise FieldError("", c.HEADER_SCHEMA, schema, "no decoder for this schema", UNKNOWN_SCHEMA)
    rec: Record = j.decode(b, spec, schema)
    rec.validate()
    return rec


def schema_id_for(rows: Sequence[AdvantageRow]) -> str:
    """wmrl.advantages.v2 when a row uses a v2 column, else v1 (topics.AdvantageSchemaID)."""
    return c.SCHEMA_ADVANTAGES_V2 if any(r.uses_v2() for r in rows) else c.SCHEMA_ADVANTAGES


def table_from_rows(rows: Sequence[AdvantageRow]) -> pa.Table:
    """A Table of the rows' schema (v1, or v2 when a row uses staleness or mask_reason); predicted,
    executed and staleness are null where their OK flag is false."""
    schema = schema_for(schema_id_for(rows))
    cols: dict[str, list[object]] = {f.name: [] for f in schema}
    for r in rows:
        for name in cols:
            if name == "predicted":
                cols[name].append(r.predicted if r.predicted_ok else None)
            elif name == "executed":
                cols[name].append(r.executed if r.executed_ok else None)
            elif name == "staleness":
                cols[name].append(r.staleness if r.staleness_ok else None)
            else:
                cols[name].append(getattr(r, name))
    return pa.Table.from_pydict(cols, schema=schema)


def encode_advantages(rows: Sequence[AdvantageRow] | pa.Table) -> bytes:
    """Validate rows and encode them, in order, as one Arrow IPC stream with one record batch."""
    if isinstance(rows, pa.Table):
        schema = check_schema(rows.schema)
        table = pa.Table.from_arrays(rows.columns, schema=schema)
        validate_table(table)
    else:
        validate_advantage_rows(list(rows))
        table = table_from_rows(rows)
        schema = table.schema
    batch = table.combine_chunks().to_batches()
    sink = pa.BufferOutputStream()
    with ipc.new_stream(sink, schema) as w:
        if batch:
            w.write_batch(batch[0])
        else:
            w.write_batch(pa.RecordBatch.from_pylist([], schema=schema))
    return bytes(sink.getvalue().to_pybytes())
