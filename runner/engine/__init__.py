"""The engine: planning what would run (plan/) on top of running it (run/). Plan imports run,
never the other way."""
