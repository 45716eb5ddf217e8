"""A stateless job that relays orders over SASL_SSL, written as a user writes it for Spark's
Kafka connector: the Java client's security options, the password read from the file the
deployment mounts: SCRAM, or with ``--token-url`` an OIDC client-credentials login
(``--user`` is the client id, the file holds its secret), or with ``--keystore`` mutual TLS
(a PEM key store: the private key and the certificate). It knows nothing of the tagger."""

from __future__ import annotations

import argparse
from pathlib import Path

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

ORDER_SCHEMA = "order_id STRING, amount DOUBLE, ts BIGINT"


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--bootstrap", required=True)
    p.add_argument("--input", required=True)
    p.add_argument("--output", required=True)
    p.add_argument("--checkpoint", required=True)
    p.add_argument("--user", default=None)
    p.add_argument("--password-file", default=None)
    p.add_argument("--keystore", default=None)
    p.add_argument("--ca-file", required=True)
    p.add_argument("--token-url", default=None)
    args = p.parse_args()
    password = Path(args.password_file).read_text().strip() if args.password_file else ""
    security = {
        "kafka.bootstrap.servers": args.bootstrap,
        "kafka.security.protocol": "SASL_SSL",
        "kafka.sasl.mechanism": "SCRAM-SHA-512",
        "kafka.sasl.jaas.config": "org.apache.kafka.common.security.scram.ScramLoginModule "
                                  f'required username="{args.user}" password="{password}";',
        "kafka.ssl.truststore.type": "PEM",
        "kafka.ssl.truststore.location": args.ca_file,
    }
    if args.token_url:
        security.update({
            "kafka.sasl.mechanism": "OAUTHBEARER",
            "kafka.sasl.oauthbearer.token.endpoint.url": args.token_url,
            "kafka.sasl.login.callback.handler.class": "org.apache.kafka.common.security."
                                                       "oauthbearer.OAuthBearerLoginCallbackHandler",
            "kafka.sasl.jaas.config": "org.apache.kafka.common.security.oauthbearer."
                                      f'OAuthBearerLoginModule required clientId="{args.user}" '
                                      f'clientSecret="{password}";',
        })
    if args.keystore:
        security = {"kafka.bootstrap.servers": args.bootstrap,
                    "kafka.security.protocol": "SSL",
                    "kafka.ssl.keystore.type": "PEM",
                    "kafka.ssl.keystore.location": args.keystore,
                    "kafka.ssl.truststore.type": "PEM",
                    "kafka.ssl.truststore.location": args.ca_file}
    spark = SparkSession.builder.appName("secure-relay").getOrCreate()
    orders = (spark.readStream.format("kafka").options(**security)
              .option("subscribe", args.input)
              .option("startingOffsets", "earliest")
              .load()
              .select(F.col("key"), F.from_json(F.col("value").cast("string"), ORDER_SCHEMA)
                      .alias("o"))
              .select("key", "o.*")
              .withColumn("event_time", F.timestamp_millis("ts"))
              .withWatermark("event_time", "5 seconds"))
    out = orders.select("key", F.to_json(F.struct("order_id", "amount", "ts")).alias("value"),
                        "event_time")
    (out.writeStream.format("kafka").options(**security)
     .option("topic", args.output)
     .option("checkpointLocation", args.checkpoint)
     .trigger(availableNow=True)
     .start()
     .awaitTermination())


if __name__ == "__main__":
    main()
