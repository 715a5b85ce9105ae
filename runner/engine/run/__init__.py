"""Running: the journaling interpreter, its scheduler and executors, step keys and reuse, gates,
the recorder that journals each execution, and the apply entry point."""
