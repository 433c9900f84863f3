"""agentroll rollout server: HTTP API, job store, three-stage pipeline, LLM backends, CLI.

Kept free of imports so that `agentroll.server.schema` (shared with the trainer clients)
stays import-light: importing a subpackage imports this file first.
"""

__all__: list[str] = []
