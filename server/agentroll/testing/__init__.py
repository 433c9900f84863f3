"""Test doubles: stand-ins that tests, benchmarks and the demo run instead of real servers.

- `scripted_llm`: a GPU-free vLLM / SGLang server with a real BPE tokenizer and scripted
  policies (`agentroll scripted-llm`);
- `fake_apptainer`: an `apptainer` CLI that runs its instances through bubblewrap;
- `fake_images`: an image builder that needs neither mmdebstrap nor network;
- `fake_rollout_server`: an in-memory agentroll server on a virtual clock, behind an httpx
  transport, for trainer-client tests (selection bias, faults) that must not depend on speed;
- `redteam`: the red-team suite's attack catalogue and batch runner;
- `sandboxes`: agentroll's sandboxes seen from outside (their processes, their leases).
- `netlab`: "the internet" for sandboxes with network, in network namespaces of its own.
- `atif_schema`: Harbor's ATIF trajectory schema as a validator (Harbor needs Python 3.12);
- `atropos_api`: atroposlib's own trajectory API server, in a cached environment of its own;
- `nemo_gym_client`: NeMo RL's side of NeMo Gym's agent `/run` protocol;
- `prime_env_client`: prime-rl's side of the verifiers v1 env-server protocol (ZMQ).

Production code never imports this package (`tests/unit/test_layering.py`): only the command
line (`agentroll scripted-llm`) and the demo do, on demand. Importing it is cheap.
"""
