"""The registered step types, one module each (``registry.py`` names them), with prompt cards
(``cards/``) and image finishing (``imaging/``). A step body gets plain data and returns a
result: scheduling, retries and journaling are the engine's."""
