"""The apparatus: CLI, pipeline stages, agent backends, workspaces, reports."""
