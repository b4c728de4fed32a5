"""Keep secrets out of the runtime's logs: engine flags that carry one, and secret-sourced env.

The operator passes secrets to the pod as env from Secret keys (never in the engine config or
on the command line) and lists their names in ``ASCEND_LLM_REDACT_ENV``. Every value of those
variables and of those that always hold secrets (``VLLM_API_KEY``, ``HF_TOKEN``,
``MODELSCOPE_API_TOKEN``), when 4 characters or longer, is replaced by ``***`` wherever it
appears in a log line, and so is the value of a secret flag (``--api-key X``, ``--api-key=X``).
:func:`install` puts a filter on the root logger's handlers, so every logger is covered.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from ascend_runtime.config import ALWAYS_SECRET_ENV, REDACT_ENV

__all__ = ["ALWAYS_SECRET_ENV", "MASK", "REDACT_ENV", "SECRET_FLAGS", "RedactingFilter", "Redactor", "install"]

#: Engine flags whose value is a secret (vLLM spells them with - or _).
SECRET_FLAGS = ("--api-key",)
MASK = "***"
#: Shorter values are not masked: a secret "1" or "on" would mask ordinary text in every line.
MIN_SECRET_LENGTH = 4

_FLAG = re.compile(r"^--api[-_]key(=.*)?$")
#: The same flags inside one line of text: ``--api-key VALUE``, ``--api-key=VALUE`` and a logged
#: Python list ``'--api-key', 'VALUE'``.
_FLAG_IN_TEXT = re.compile(r"(--api[-_]key)(=|\s+|['\"],\s*['\"])([^\s'\",\]]+)")


def secret_names(environ: Mapping[str, str]) -> list[str]:
    """Names of the variables whose values must not be logged."""
    listed = [name.strip() for name in environ.get(REDACT_ENV, "").split(",") if name.strip()]
    return sorted({*listed, *ALWAYS_SECRET_ENV})


@dataclass(frozen=True)
class Redactor:
    """Replaces known secret values (longest first, so a value inside another goes too)."""

    values: tuple[str, ...] = ()

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Redactor:
        env = os.environ if environ is None else environ
        found = {env[name] for name in secret_names(env) if len(env.get(name) or "") >= MIN_SECRET_LENGTH}
        return cls(tuple(sorted(found, key=len, reverse=True)))

    def text(self, line: str) -> str:
        for value in self.values:
            line = line.replace(value, MASK)
        return _FLAG_IN_TEXT.sub(lambda m: f"{m.group(1)}{m.group(2)}{MASK}", line)

    def argv(self, argv: Sequence[str]) -> str:
        """``argv`` joined for a log line, secret flag values and secret values masked."""
        shown: list[str] = []
        hide_next = False
        for token in argv:
            if hide_next:
                shown.append(MASK)
                hide_next = False
                continue
            match = _FLAG.match(token)
            if match is not None:
                hide_next = match.group(1) is None
                shown.append(token if hide_next else token.split("=", 1)[0] + "=" + MASK)
                continue
            shown.append(token)
        return self.text(" ".join(shown))


class RedactingFilter(logging.Filter):
    """A handler filter that masks secrets in the formatted message of every record."""

    def __init__(self, redactor: Redactor) -> None:
        super().__init__()
        self.redactor = redactor

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        redacted = self.redactor.text(message)
        if redacted != message:
            record.msg, record.args = redacted, None
        return True


def install(handlers: Iterable[logging.Handler] | None = None, environ: Mapping[str, str] | None = None) -> Redactor:
    """Put a :class:`RedactingFilter` on ``handlers`` (default: the root logger's)."""
    redactor = Redactor.from_env(environ)
    for handler in logging.getLogger().handlers if handlers is None else handlers:
        if not any(isinstance(f, RedactingFilter) for f in handler.filters):
            handler.addFilter(RedactingFilter(redactor))
    return redactor
