"""A tiny Qwen2 policy trained on agentroll's own transcripts, for the real CPU engine
(docs/tinypolicy.md): `data` (transcripts), `train` (SFT), `build` (cached model folder),
`evaluate` (tool use and reward), `rollouts` (an in-process agentroll server)."""
