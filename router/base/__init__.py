"""What every other room of the router stands on: the confluent-kafka helpers the worker shares
with the CLI (kafka_io), the shape of a record the router writes (output_record), the worker's
named failures (errors), its test seams (failpoints) and the metrics it exports (metrics).
Nothing here imports another room."""
