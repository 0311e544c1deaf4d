"""The only lumen-ex files bound into a sandbox: the worker (it imports the learner's module and
answers calls) and the wire format it speaks. They import nothing else of lumen-ex: inside the
sandbox they run as plain scripts, from this folder alone."""
