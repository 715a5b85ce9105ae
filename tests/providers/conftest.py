"""The provider test helpers live in plain modules (servers, stepkit) that tests import.

Fixtures are deliberately not used for the servers: each test starts the server it needs with
``with OpenAIServer() as server:`` so the socket's lifetime is visible in the test itself.
"""
