"""Review: how a person sees and decides what the engine made: gates in a terminal, a run's
view, the thumbnail workflow (iterate, contact sheets, hooks)."""
