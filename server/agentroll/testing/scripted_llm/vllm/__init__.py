"""The scripted backend's vLLM face: routes, request models and response shapes per vLLM release."""
