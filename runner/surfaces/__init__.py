"""The surfaces people and tools use: the command line, the web review surface, `runner watch`,
the pytest plugin and the generated reference docs. Nothing below imports from here."""
