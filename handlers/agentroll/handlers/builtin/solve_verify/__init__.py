"""The `solve_verify` task family: two agents of one job on the `math` tasks, a solver and
its verifier (`handler`)."""

from agentroll.handlers.builtin.solve_verify.handler import SolveVerifyHandler

__all__ = ["SolveVerifyHandler"]
