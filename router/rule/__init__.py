"""The routing rule and what it decides with: the decision for one raw partition of a route
(decision), which records count as the same record (identity), held records over max_held
(held_bound) and records too large for their topics (oversize). Imports no other room of the
router."""
