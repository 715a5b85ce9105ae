"""Testing support: snapshot tests of rendered prompts (see ``runner.surfaces.testing.plugin``).

In a test module::

    @pytest.mark.parametrize("path, fixture", pipeline_cases("pipelines"))
    def test_prompts(request, path, fixture):
        check_pipeline(request.node, path, fixture)
"""

from __future__ import annotations

from .cases import check_pipeline, find_pipelines, pipeline_cases

__all__ = ["check_pipeline", "find_pipelines", "pipeline_cases"]
