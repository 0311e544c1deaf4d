"""The only lumen-ex files bound into a sandbox: the worker (it imports the learner's module and
answers calls) and the wire format it speaks (wire.py, which re-exports its parts: wire_limits.py,
wire_decode.py, wire_replies.py). They import nothing else of lumen-ex: inside the sandbox they run
as plain top-level modules, from this folder alone, so each file imports its siblings by their plain
names there and relative to this package in the harness (``if __spec__.parent:``)."""
