"""Planning: what an apply would run, reuse and cost, without running anything (plan, forecast,
costs, the no-op fast path, drift, render)."""
