"""What every other room of the router stands on: the confluent-kafka helpers the worker shares
with the CLI (kafka_io), the worker's named failures (errors), its test seams (failpoints) and
the metrics it exports (metrics). Nothing here imports another room."""
