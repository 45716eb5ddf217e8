"""``cutover rollout`` as data and rules: the journal it keeps on the status topic
(:mod:`cutover.rollout.journal`), the phase machine that decides every step from that journal
and what it observes (:mod:`cutover.rollout.machine`, pure; what it hears and asks for in
:mod:`cutover.rollout.events`, the sentences it ends with in :mod:`cutover.rollout.sentences`),
and the metrics drawn from the journal (:mod:`cutover.rollout.metrics`). The command that runs
them is ``cutover.cli.rollout``.
"""
