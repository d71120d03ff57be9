"""The run layer: the one place that runs one sample through a graph and shapes its record.

Layers, each importing only those below it: `tools` <- `agents` <- `graphs` <- `runner` <- `evaluation`,
`training` <- the CLI (`unveil`). Here live detection (TAG and vanilla, with the one context builder),
refinement (IPR), a CTD scene, the resumable JSONL batch runner and the CTD dataset folder. Batches, evaluation
and a distributed engine all call these same functions.
"""
