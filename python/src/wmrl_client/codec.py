"""The JSON codec of the records the trainer writes (``topics/codec.go``): ``encode_record``
validates and produces the bytes Go's ``Encode*`` would produce (the strict decoder, which only
the tests need, is tests/client_codecs.py). Advantages travel as Arrow (arrow.py). The records
only Go stages write (predicted, executed, calibration) are not decoded here: nothing in the
client reads them."""

from __future__ import annotations

from dataclasses import replace

from . import _json as j
from . import contract as c
from .records import ROLLOUT_SPEC, STEP_SPEC, Rollout, StepManifest

Record = Rollout | StepManifest

_SPECS: dict[str, j.Spec] = {c.SCHEMA_ROLLOUT: ROLLOUT_SPEC, c.SCHEMA_STEP: STEP_SPEC}
_SCHEMA_OF: dict[type, str] = {spec.cls: schema for schema, spec in _SPECS.items()}


def schema_of(record: Record) -> str:
    """The schema id a record type travels under (its type alone decides it)."""
    try:
        return _SCHEMA_OF[type(record)]
    except KeyError:
        raise TypeError(f"{type(record).__name__} is not a wmrl JSON record type the client writes") from None


def encode_record(record: Record) -> bytes:
    """Validate a record and encode it as Go's Encode* functions do, byte for byte.

    An empty schema is filled in; any other schema than the type's own is refused
    (SchemaVersionError), because the type alone decides the wire schema.
    """
    schema = schema_of(record)
    if record.schema == "":
        record = replace(record, schema=schema)
    record.validate()
    return j.encode(record, _SPECS[schema], type(record).__name__)
