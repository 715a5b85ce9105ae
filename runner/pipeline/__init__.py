"""A pipeline on its way to a plan: a validated document compiled into something runnable.

- ``loader``: a document (read by ``runner.source``) checked against the pipeline schema
  (``runner.source._fastschema`` is its fast path), params resolved: the validated document.
- ``compiler``: the document compiled into a ``Plan``: expressions, rules, step types, the DAG.
- ``order``: the order steps run in; a cycle is an error naming its path.
- ``graphview``: a plan's DAG as text, Graphviz dot or Mermaid.
- ``prompt_lock``: published prompt versions, immutable once locked.
- ``schemas/``: the format's JSON Schemas (a link to the project's ``schemas/``).

The compiler sits above the step types (it asks each for its schema); reading YAML and keeping
paths inside their root are below, in ``runner.source``. This file imports nothing.
"""
