"""The scripted backend's SGLang face: native routes, request models and /generate."""
