"""Errors of the scripted LLM backend.

ScriptedLLMError(Exception)
 ├── UnknownRuleError(ScriptedLLMError, KeyError)     policy names an unregistered rule
 ├── DuplicateRuleError(ScriptedLLMError, ValueError) a rule name registered twice
 └── ProtocolError(ScriptedLLMError, ValueError)      a request vLLM would refuse; carries
      │                                               the HTTP status and envelope fields
      └── ContractError(ProtocolError)                SGLang 0.5.23's sampling-params contract
                                                      refusal, sent as `{"error": "<message>"}`
"""

from typing import Any


class ScriptedLLMError(Exception):
    """Root of every error this package raises."""


class UnknownRuleError(ScriptedLLMError, KeyError):
    def __str__(self) -> str:  # KeyError would repr() the message
        return str(self.args[0]) if self.args else ""


class DuplicateRuleError(ScriptedLLMError, ValueError):
    pass


class ProtocolError(ScriptedLLMError, ValueError):
    """A request refused the way vLLM refuses it: `{"error": {message, type, param, code}}`."""

    def __init__(
        self,
        message: str,
        *,
        status: int = 400,
        err_type: str = "BadRequestError",
        param: Any = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.err_type = err_type
        self.param = param

    def envelope(self) -> dict[str, Any]:
        return {
            "error": {
                "message": self.message,
                "type": self.err_type,
                "param": self.param,
                "code": self.status,
            }
        }


class ContractError(ProtocolError):
    """SGLang 0.5.23 refuses unknown `sampling_params` keys with a bare-string error body."""

    def envelope(self) -> dict[str, Any]:
        return {"error": self.message}
