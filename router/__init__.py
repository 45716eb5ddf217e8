"""The router worker, in rooms that import only the rooms below them: base, rule, dedup,
durability, native, worker (docs/decisions/022-router-rooms.md)."""
