"""A model fuzzer for glow-py: generated and mutated ONNX models, each run in a sandboxed worker.

The package is not part of glow-core (nothing in ``glow_core`` imports it); ``scripts/fuzz``
and ``tests/test_fuzz.py`` drive it. One job per module:

- ``generate``: small, mostly valid models built from the ONNX op schemas of the ops glow imports;
- ``mutate``: protobuf-level damage (dims, element types, raw data, attributes, names, opsets);
- ``spec``: a case as a small replayable recipe (base model + mutation steps), built from a seed;
- ``oracle``: onnxruntime and ``onnx.reference`` outputs, and the agreement rule;
- ``check``: one case through glow and the oracles, giving an outcome (runs in a worker);
- ``worker``: the subprocess loop, with its address space capped;
- ``supervisor``: a pool of workers, per-case timeouts, crashes seen as signal exits;
- ``minimize``: shrinking a failing recipe while it fails the same way;
- ``campaign``: many cases, the summary and the saved reproducers (what ``scripts/fuzz`` runs).
"""
