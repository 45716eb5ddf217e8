"""The dedup store of each raw partition (store), its front filter (bloom), and the memory all of a
worker's stores share (memory)."""
