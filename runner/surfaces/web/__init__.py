"""`runner serve`: a local web page (and JSON API) over a state directory.

``create_app(state_dir, token)`` in ``runner.surfaces.web.app`` builds the Starlette application;
the pages and the API call the same library functions as the CLI (see
``runner.surfaces.web.service``).
"""
