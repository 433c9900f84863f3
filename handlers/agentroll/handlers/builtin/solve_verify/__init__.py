"""The `solve_verify` task family: two agents of one job on the `math` tasks, a solver and
its verifier (`handler`)."""

from agentroll.handlers.builtin.solve_verify.handler import SolveVerifyHandler

HANDLERS = {"solve_verify": "SolveVerifyHandler"}
"""The handler names this family serves (read by `agentroll.handlers.families`)."""

__all__ = ["SolveVerifyHandler"]
