"""No record lost, none written twice: where a raw partition resumes (resume), its checkpoints
(checkpoint), taking it over (takeover, readback, fencing), who may write and from where
(ownership, positions), a batch's output and its end (output_writer, inline_output,
transactions, batch_end), and the owned partition all of them act on (partition). Also the
output log counted by version (output_tally). Imports rule, dedup and base, never the worker."""
