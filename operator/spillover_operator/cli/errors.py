"""Exit codes and the one exception type spilloverctl turns into a message and an exit code."""

from __future__ import annotations

from typing import Final

EXIT_OK: Final = 0
EXIT_NOT_CONSISTENT: Final = 1
EXIT_USAGE: Final = 2
EXIT_TIMEOUT: Final = 3
EXIT_NOT_FOUND: Final = 4
EXIT_API: Final = 5
EXIT_INTERRUPTED: Final = 130

EXIT_CODES_HELP: Final = f"""\
exit codes:
  {EXIT_OK}    success (status: policy and Deployment agree, rollout complete)
  {EXIT_NOT_CONSISTENT}    status found a mismatch or a not-ready state (each one is printed);
       --wait: the operator refused the policy (Ready=False: InvalidSpec, Conflict, ...)
  {EXIT_USAGE}    bad input or usage: unknown flag, value out of range, invalid policy file
  {EXIT_TIMEOUT}    --wait timed out (the change itself was made; what was still pending is printed)
  {EXIT_NOT_FOUND}    the SpilloverPolicy or its target Deployment does not exist
  {EXIT_API}    API error: kubeconfig/context unusable, server unreachable, forbidden, rejected
  {EXIT_INTERRUPTED}  interrupted (Ctrl-C); a change already sent stays in place"""


class CliError(Exception):
    """An expected failure: printed as `spilloverctl: error: <message>`, never as a traceback."""

    def __init__(self, message: str, exit_code: int) -> None:
        super().__init__(message)
        self.message = message
        self.exit_code = exit_code
