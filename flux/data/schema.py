"""Columns of the preprocessed FLUX.1 Arrow shards, and the one error type the data package raises.

The MLPerf preprocessing script (torchtitan `scripts/preprocess_flux_dataset.py`) writes these
columns; `datasets` then records them as `Value` features in `dataset_info.json` and in the
`huggingface` entry of every shard's Arrow schema metadata:

    __key__         string   webdataset key (CC12M) or image id (COCO)
    t5_encodings    binary   np.save bytes of the T5 encoding, bf16 viewed as uint16, [256, 4096]
    clip_encodings  binary   same for the CLIP pooled output, [768]
    mean, logvar    binary   same for the VAE posterior, [16, 32, 32] each
    timestep        int32    validation (COCO) only: the fixed eval timestep index, 0..7
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa

KEY_COLUMN = "__key__"
T5_COLUMN = "t5_encodings"
CLIP_COLUMN = "clip_encodings"
MEAN_COLUMN = "mean"
LOGVAR_COLUMN = "logvar"
TIMESTEP_COLUMN = "timestep"

# The tensor columns, in the order a FluxBatch lists them.
TENSOR_COLUMNS: tuple[str, ...] = (T5_COLUMN, CLIP_COLUMN, MEAN_COLUMN, LOGVAR_COLUMN)
REQUIRED_COLUMNS: tuple[str, ...] = (KEY_COLUMN, *TENSOR_COLUMNS)

# What `datasets` accepts as the same feature: it writes the large_* variants when a column
# outgrows 32-bit offsets, so a reader must take both.
_BINARY_TYPES = (pa.binary(), pa.large_binary())
_STRING_TYPES = (pa.string(), pa.large_string())
_TIMESTEP_TYPES = (pa.int32(), pa.int64(), pa.int16(), pa.int8())

HF_METADATA_KEY = b"huggingface"


class FluxDataError(ValueError):
    """A dataset file is missing, malformed, or disagrees with the rest of the dataset.

    The message always names the file and, where it applies, the column and row.
    """


def arrow_schema(*, with_timestep: bool) -> pa.Schema:
    """The shard schema as `datasets` writes it, `huggingface` features metadata included."""
    fields = [
        pa.field(KEY_COLUMN, pa.string()),
        *(pa.field(name, pa.binary()) for name in TENSOR_COLUMNS),
    ]
    if with_timestep:
        fields.append(pa.field(TIMESTEP_COLUMN, pa.int32()))
    schema = pa.schema(fields)
    metadata = {"info": {"features": hf_features(schema)}}
    return schema.with_metadata({HF_METADATA_KEY: json.dumps(metadata).encode()})


def hf_features(schema: pa.Schema) -> dict[str, Any]:
    """`datasets` feature dicts ({"dtype": ..., "_type": "Value"}) for plain Arrow columns."""
    names = {
        pa.string(): "string",
        pa.large_string(): "large_string",
        pa.binary(): "binary",
        pa.large_binary(): "large_binary",
        pa.int32(): "int32",
        pa.int64(): "int64",
        pa.int16(): "int16",
        pa.int8(): "int8",
    }
    return {field.name: {"dtype": names[field.type], "_type": "Value"} for field in schema}


def check_shard_schema(schema: pa.Schema, *, path: Path) -> bool:
    """Raises FluxDataError naming `path` and the column if the schema is unusable.

    Returns whether the shard has a `timestep` column.
    """
    for name in REQUIRED_COLUMNS:
        index = schema.get_field_index(name)
        if index < 0:
            raise FluxDataError(
                f"{path}: no column {name!r} (columns: {schema.names}); a FLUX preprocessed shard needs "
                f"{list(REQUIRED_COLUMNS)}"
            )
        wanted = _STRING_TYPES if name == KEY_COLUMN else _BINARY_TYPES
        if schema.field(index).type not in wanted:
            raise FluxDataError(
                f"{path}: column {name!r} has Arrow type {schema.field(index).type}, expected one of "
                f"{[str(t) for t in wanted]}"
            )
    index = schema.get_field_index(TIMESTEP_COLUMN)
    if index >= 0 and schema.field(index).type not in _TIMESTEP_TYPES:
        raise FluxDataError(
            f"{path}: column {TIMESTEP_COLUMN!r} has Arrow type {schema.field(index).type}, expected an integer"
        )
    return index >= 0
