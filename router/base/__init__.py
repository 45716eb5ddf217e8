"""What every other room of the router stands on: the confluent-kafka helpers the worker shares
with the CLI (kafka_io), the worker's named failures (errors) and its test seams (failpoints).
Nothing here imports another room."""
