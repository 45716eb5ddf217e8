"""The operator's library, under the commands (cutover.cli), the demo and the tests: the routes'
state as the workers report it on the status topic and publishing a plan (``routes``), the
next plan of a switch (``next_plan``), the rollout's journal and its claim (``rollout_claim``),
and both versions' records compared (``comparison``, read by ``compare_reader``). It stands on
the worker's client helpers (router.base.kafka_io) and identities (router.rule.identity); the worker
never imports it."""
