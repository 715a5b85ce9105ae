"""A provider step type opted in to running on Dask workers: the llm step with
``runs_anywhere``. What a plugin's provider type does to let its calls run on a cluster; the
tests register it in the coordinator (StepRegistry.register) and the workers load it from
here (Job.type_path)."""

from __future__ import annotations

from runner.steps.llm import LlmStep


class LlmAnywhere(LlmStep):
    name = "llm_anywhere"
    runs_anywhere = True
