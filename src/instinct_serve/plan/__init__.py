"""Plan: the exact launch command (pure planner + renderers)."""
