"""The worker: the Faust application (app) and its batched data path (datapath), and what they
run with: the group's assignment (assignment), the control topic (control), the status board
(status_publisher), start-up topic checks (topics), liveness (watchdog, rebuilds), reads of a
partition over max_held (held_reads) and the process's memory and collector (allocator,
gc_pause). May import every other room."""
