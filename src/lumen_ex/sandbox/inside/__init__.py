"""The only lumen-ex files bound into a sandbox: the worker (it imports the learner's module and
answers calls) and the wire format it speaks (wire.py, which re-exports its parts: wire_limits.py,
wire_decode.py), the worker's layer against forbidden APIs (forbid.py) and its work counter
(work_counter.py), and the zygote that forks workers under bwrap (zygote.py, with its system calls
in confine.py). They import nothing else of lumen-ex. In the harness this folder is
the package ``lumen_ex.sandbox.inside``; inside the sandbox worker.py imports it by its path as the
package ``lumen_inside`` (worker.py ``_wire_module``), so the wire files import each other relatively
in both places. This file must stay free of imports: the worker runs it first."""
