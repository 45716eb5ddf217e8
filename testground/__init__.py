"""The test ground: the brokers the tests start (Apache Kafka in KRaft mode, secured or open, and
Tansu), the throwaway PKI of the security suite, and the workarounds for Tansu's differences.

Not part of the distribution (setup.py ships cutover, router and spark_tagger only; the
packaging test checks that the wheel holds none of it). tests/, tests/bench, tests/soak and
tests/conformance import it from the checkout's root.
"""
