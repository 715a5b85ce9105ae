"""A pipeline file on its way to something runnable: source -> document -> plan.

- ``source``: YAML text read as YAML 1.2's core schema, every value with its file:line:column.
- ``loader``: a source checked against the pipeline schema (``_fastschema`` is its fast path),
  params resolved: the validated document.
- ``compiler``: the document compiled into a ``Plan``: expressions, rules, step types, the DAG.
- ``graphview``: a plan's DAG as text, Graphviz dot or Mermaid.
- ``paths``: paths named by pipelines or users, kept inside their root.

``source`` and ``paths`` depend only on ``runner.errors``, so steps, checks and templates may use
them; ``compiler`` sits above the steps. This file imports nothing, so importing one leaf
module never pulls in the compiler.
"""
