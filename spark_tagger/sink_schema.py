"""What Spark's Kafka sink accepts as a DataFrame's columns, checked before anything is sent.

Shared by the tagger's batch writes (every Spark version) and the pure-Python sink (Spark 4).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from spark_tagger.options import SinkOptions

if TYPE_CHECKING:
    from pyspark.sql.types import StructType


def check_sink_schema(schema: StructType, opts: SinkOptions) -> None:
    """Spark's Kafka sink rules: a value column, string/binary key and value, a topic."""
    from pyspark.sql.types import ArrayType, BinaryType, IntegerType, StringType

    fields = {f.name: f.dataType for f in schema.fields}
    if "value" not in fields:
        raise ValueError("the Kafka sink needs a 'value' column (string or binary)")
    for name in ("key", "value"):
        if name in fields and not isinstance(fields[name], (StringType, BinaryType)):
            raise ValueError(f"the Kafka sink's {name!r} column must be string or binary, "
                             f"not {fields[name].simpleString()}")
    if opts.topic is None and not isinstance(fields.get("topic"), StringType):
        raise ValueError("the Kafka sink needs the option 'topic' or a string 'topic' column")
    if "partition" in fields and not isinstance(fields["partition"], IntegerType):
        raise ValueError("the Kafka sink's 'partition' column must be int")
    if "headers" in fields and not isinstance(fields["headers"], ArrayType):
        raise ValueError("the Kafka sink's 'headers' column must be "
                         "array<struct<key:string,value:binary>>")
