"""Why a request was refused, as the HTTP status and OpenAI-style error the server answers with."""

from __future__ import annotations


class RequestError(Exception):
    """A request the engine will not run: 400 (bad or oversize), 404 (unknown model), 429 (overloaded)."""

    def __init__(
        self, status: int, message: str, type: str = "invalid_request_error", retry_after_s: int | None = None
    ):
        super().__init__(message)
        self.status = status
        self.message = message
        self.type = type
        self.retry_after_s = retry_after_s

    def body(self) -> dict:
        return {"error": {"message": self.message, "type": self.type, "param": None, "code": self.status}}
