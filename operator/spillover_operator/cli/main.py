"""spilloverctl: the kill switch and status view for the SpilloverPolicy operator.

`run(argv)` is the testable entry point (returns the exit code); `main()` is the console
script. Expected failures (the client library's error types, BadInput) print one clear
message and map to the shared exit-code table (`errors.exit_code`); only a bug prints a
traceback, and exits 1.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import re
import sys
from typing import Any, TextIO

from spillover_operator import exit_codes
from spillover_operator.client import ClientError
from spillover_operator.domain.model import ENV_FIELDS
from spillover_operator.interrupts import caused_by_interrupt

from . import change as changes
from .errors import EXIT_CODES_HELP, BadInput, exit_code

# Each command imports what only it needs (render: yaml and the env planner; status: the
# assessment and the report) where it runs: `kill` is the command that must start fast.

DEFAULT_POLICY = "spillover"
# Shown in managedFields of the policy and as the source of Events: who flipped the switch.
FIELD_MANAGER = "spilloverctl"
DEFAULT_TIMEOUT = 300.0

_DESCRIPTION = """\
The kill switch and status view for workflow step spillover (SpilloverPolicy,
spillover.clerum.io/v1alpha1). The policy lives in the namespace of the workflow-recipe
controller (WRC) Deployment; the operator writes its spec onto that Deployment's env.

commands:
  status   [POLICY]   what the policy says, what is in effect on the WRC Deployment
                      (the three CLERUM_WORKFLOW_TOOL_SPILLOVER_* variables and whether
                      MCP_HOST_ENV_PASSTHROUGH forwards them), rollout progress, the
                      recipe mcp-host pods (current/stale/unknown, one line each), and
                      every mismatch between them (exit 6 if there is any, a stale
                      recipe pod included)
  kill     [POLICY]   engage the kill switch: spec.enabled=false (spillover OFF)
  restore  [POLICY]   release the kill switch: spec.enabled=true (spillover ON)
  set      [POLICY]   --threshold N / --unset-threshold, --budget N / --unset-budget
  render   -f FILE    no cluster: validate a policy file and print the env and the
                      Deployment patch it produces

kill, restore and set change the policy and let the operator apply it. With --wait they
return once the operator has observed the new generation with Ready=True, the
Deployment rollout is complete AND no recipe mcp-host pod (spec.recipePods.selector)
still runs old values (progress on stderr, --timeout SECONDS, default 300; the timeout
names the stale pods). --no-wait-recipe-pods skips the pods (and says so);
--refresh-recipe-pods restarts the owners of stale pods once; --reason TEXT records
who and why on the policy and in the Events.
kill turns spillover OFF first: a refused or failed extra (--reason's record,
--refresh-recipe-pods, --wait) never undoes or blocks it; each is printed with what
to do, and the exit code is 11. restore and set are all or nothing.
With --direct (operator down) they ALSO patch the WRC Deployment themselves, so the
operator finds nothing to change when it comes back; --wait then waits for the rollout
and the recipe pods (not the operator) and reports whether the policy status is stale;
--refresh-recipe-pods then restarts the owners of stale pods itself.

POLICY defaults to 'spillover'. The namespace is -n, else the kubeconfig context's
namespace, else 'clerum'.

kill, restore and status take --context more than once, or --all-contexts: every
cluster in parallel, its lines on stderr prefixed [context], one line each on stdout
as soon as it is known, and a summary; exit 0 only when every cluster is done, else
the first cluster code in the order 130, 1, 5, 4, 2, 6, 3, 11. A cluster that is not
done within --context-timeout SECONDS (default 60; --wait adds its --timeout once the
change is made) is reported 'timed out' and the command ends without it. Ctrl-C
finishes the writes in flight (each cluster all or nothing), starts no other, and the
table says which is which."""

_EPILOG = f"""\
{EXIT_CODES_HELP}

examples:
  spilloverctl -n clerum status
  spilloverctl -n clerum kill --wait --timeout 300
  spilloverctl -n clerum kill --wait --refresh-recipe-pods --reason "INC-123 spill storm"
  spilloverctl -n clerum kill --direct --wait        # the operator is down
  spilloverctl -n clerum --context prod-eu --context prod-us kill --wait
  spilloverctl -n clerum status --all-contexts
  spilloverctl -n clerum set --threshold 32768 --unset-budget --wait
  spilloverctl render -f manifests/samples/default.yaml --deployment wrc.yaml

sizes take bytes, or a KiB/MiB suffix: 32768, 32KiB, 16MiB."""

_SIZE_RE = re.compile(r"^\s*(\d+)\s*(|b|kib|ki|k|mib|mi|m)\s*$", re.IGNORECASE)
_UNITS = {"": 1, "b": 1, "kib": 1024, "ki": 1024, "k": 1024, "mib": 1 << 20, "mi": 1 << 20}
_UNITS["m"] = 1 << 20


def _size(flag: str, low: int, high: int) -> Any:
    """An argparse type: a byte count within [low, high], checked before any API call."""

    def parse(text: str) -> int:
        match = _SIZE_RE.match(text)
        if not match:
            raise argparse.ArgumentTypeError(
                f"{flag} takes a number of bytes ({low}..{high}, or with a KiB/MiB suffix), "
                f"got {text!r}"
            )
        value = int(match.group(1)) * _UNITS[match.group(2).lower()]
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(
                f"{flag} must be between {low} and {high} bytes "
                f"({_human(low)}..{_human(high)}), got {value}"
            )
        return value

    return parse


def _human(n: int) -> str:
    if n % (1 << 20) == 0:
        return f"{n >> 20} MiB"
    if n % 1024 == 0:
        return f"{n >> 10} KiB"
    return f"{n} B"


REASON_MAX = 256
MAX_AS_GROUPS = 64  # client.kubeconfig.MAX_GROUPS
MAX_CONTEXTS = 64  # cli.fleet.MAX_CONTEXTS
DEFAULT_CONTEXT_TIMEOUT = 60.0  # cli.fleet.DEFAULT_CONTEXT_TIMEOUT


def _reason(text: str) -> str:
    """--reason: one printable line (a newline could forge a line of `status`), bounded."""
    if len(text) > REASON_MAX:
        raise argparse.ArgumentTypeError(
            f"--reason is at most {REASON_MAX} characters (got {len(text)}): name the "
            "incident and put the details in your incident record"
        )
    if not text.isprintable():
        raise argparse.ArgumentTypeError(
            "--reason must be one printable line: no newline, tab or other control "
            "character (they could forge lines of `spilloverctl status`)"
        )
    return text


def _identity(flag: str) -> Any:
    """An argparse type for --as/--as-group/--as-uid: a value an HTTP header carries."""

    def parse(text: str) -> str:
        from spillover_operator.client.kubeconfig import flag_value_problem

        problem = flag_value_problem(text)
        if problem:
            raise argparse.ArgumentTypeError(f"{flag} {text[:40]!r}: {problem}")
        return text

    return parse


def _seconds(flag: str) -> Any:
    """An argparse type: a number of seconds, more than 0."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{flag} takes seconds, got {text!r}") from None
        if not value > 0:
            raise argparse.ArgumentTypeError(f"{flag} must be more than 0 seconds, got {text}")
        return value

    return parse


_timeout = _seconds("--timeout")


class _HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """argparse's RawDescriptionHelpFormatter, as wide as the terminal the way argparse
    measures it (shutil.get_terminal_size) but without importing shutil: argparse makes
    a formatter for every argument it adds, and the import is ~2 ms of every command."""

    def __init__(
        self,
        prog: str,
        indent_increment: int = 2,
        max_help_position: int = 24,
        width: int | None = None,
    ) -> None:
        if width is None:
            width = _terminal_columns() - 2  # what argparse subtracts from shutil's
        super().__init__(prog, indent_increment, max_help_position, width)


def _terminal_columns() -> int:
    """shutil.get_terminal_size().columns: $COLUMNS, else stdout's terminal, else 80."""
    try:
        columns = int(os.environ.get("COLUMNS", "0"))
    except ValueError:
        columns = 0
    if columns <= 0:
        try:
            columns = os.get_terminal_size(sys.__stdout__.fileno()).columns  # type: ignore[union-attr]
        except (AttributeError, ValueError, OSError):
            columns = 0
    return columns if columns > 0 else 80


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="spilloverctl",
        description=_DESCRIPTION,
        epilog=_EPILOG,
        formatter_class=_HelpFormatter,
    )
    _cluster_flags(parser, suppress=False)

    # The same flags after the command (`spilloverctl status -n x`) override those before.
    common = argparse.ArgumentParser(add_help=False, formatter_class=_HelpFormatter)
    _cluster_flags(common, suppress=True)

    waiting = argparse.ArgumentParser(add_help=False, formatter_class=_HelpFormatter)
    waiting.add_argument(
        "--direct",
        action="store_true",
        help="the operator is down: also patch the WRC Deployment directly (and record an "
        "Event on the policy and the Deployment)",
    )
    waiting.add_argument(
        "--wait",
        action="store_true",
        help="wait until the change is in effect: the WRC rollout complete and no matched "
        "recipe mcp-host pod still running old values",
    )
    waiting.add_argument(
        "--no-wait-recipe-pods",
        action="store_true",
        help="with --wait: do not wait for the recipe mcp-host pods (stale pods keep "
        "running the old values; the command says how many)",
    )
    waiting.add_argument(
        "--refresh-recipe-pods",
        action="store_true",
        help="restart the owners of stale recipe pods once now, whatever "
        "spec.recipePods.refresh says (the incident path; with --direct spilloverctl "
        "does it itself, after the WRC rollout)",
    )
    waiting.add_argument(
        "--reason",
        metavar="TEXT",
        type=_reason,
        help="why: recorded with the change (annotation spillover.clerum.io/change-record, "
        "with who you are as the API server says, the generation and the time), in the "
        f"operator's Events and shown by status; one printable line of at most {REASON_MAX} "
        "characters",
    )
    waiting.add_argument(
        "--timeout",
        type=_timeout,
        default=None,
        metavar="SECONDS",
        help=f"with --wait: give up after this many seconds (exit 3); default {DEFAULT_TIMEOUT:g}",
    )

    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    fmt = _HelpFormatter

    status = sub.add_parser(
        "status",
        parents=[common],
        formatter_class=fmt,
        help="policy, what is in effect on the WRC Deployment, rollout, mismatches",
        description="Show the policy, the env in effect on the WRC Deployment container, "
        "the rollout and every mismatch between them.\nExit 0 when consistent, 6 when a "
        "mismatch or a not-ready state exists, 4 when the policy or Deployment is missing.",
        epilog=EXIT_CODES_HELP,
    )
    _policy_arg(status)
    _fleet_flags(status)
    status.add_argument("-o", "--output", choices=("text", "json"), default="text")

    for name, text in (
        ("kill", "engage the kill switch: set spec.enabled=false (spillover OFF)"),
        ("restore", "release the kill switch: set spec.enabled=true (spillover ON)"),
    ):
        cmd = sub.add_parser(
            name,
            parents=[common, waiting],
            formatter_class=fmt,
            help=text,
            description=text[0].upper() + text[1:] + ".",
            epilog=EXIT_CODES_HELP,
        )
        _policy_arg(cmd)
        _fleet_flags(cmd)
        cmd.set_defaults(command_parser=cmd)

    set_cmd = sub.add_parser(
        "set",
        parents=[common, waiting],
        formatter_class=fmt,
        help="change thresholdBytes / budgetBytes (or unset them: the mcp-host default applies)",
        description="Change spec.thresholdBytes and/or spec.budgetBytes. Values are checked "
        "against the bounds before anything is sent to the cluster.",
        epilog=EXIT_CODES_HELP,
    )
    _policy_arg(set_cmd)
    set_cmd.set_defaults(command_parser=set_cmd)
    for f in ENV_FIELDS:  # one --<flag> / --unset-<flag> pair per bytes field (model.py)
        if f.flag is None or f.kind != "bytes":
            continue
        group = set_cmd.add_mutually_exclusive_group()
        group.add_argument(
            f"--{f.flag}",
            type=_size(f"--{f.flag}", f.low, f.high),
            metavar="BYTES",
            help=f"spec.{f.key}, {f.low}..{f.high}",
        )
        group.add_argument(
            f"--unset-{f.flag}",
            action="store_true",
            help=f"remove spec.{f.key} (the mcp-host default {f.default} applies)",
        )

    render_cmd = sub.add_parser(
        "render",
        formatter_class=fmt,
        help="no cluster: validate a policy file, print its env and Deployment patch",
        description="Validate a SpilloverPolicy file and print the env it renders to and the "
        "strategic merge patch it would send to the Deployment (given with --deployment, "
        "or a minimal Deployment with an empty env). No cluster is contacted.\n"
        "Exit 2 (with the field and the fix named) when a file is invalid.",
        epilog=EXIT_CODES_HELP,
    )
    render_cmd.add_argument(
        "-f", "--filename", required=True, metavar="POLICY.yaml", help="policy file ('-': stdin)"
    )
    render_cmd.add_argument(
        "--deployment", metavar="DEPLOYMENT.yaml", help="the target Deployment's manifest"
    )
    render_cmd.add_argument(
        "--config-map",
        action="append",
        default=[],
        metavar="CONFIGMAP.yaml",
        help="a ConfigMap the Deployment's envFrom names (repeatable); one not given may set "
        "any variable, so an unset field it could shadow is rendered as the default",
    )
    render_cmd.add_argument("-o", "--output", choices=("yaml", "json"), default="yaml")
    return parser


class _Contexts(argparse.Action):
    """--context NAME, repeatable: `context` is the last one given (one context, as it
    always was), `contexts` every one in order."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option_string: str | None = None,
    ) -> None:
        namespace.contexts = [*(getattr(namespace, "contexts", None) or []), values]
        setattr(namespace, self.dest, values)


def _fleet_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--all-contexts",
        action="store_true",
        help="every context of the kubeconfig, each cluster in parallel (as --context given "
        "once per context)",
    )
    parser.add_argument(
        "--context-timeout",
        type=_seconds("--context-timeout"),
        default=None,
        metavar="SECONDS",
        help="with several contexts: each cluster's bound on its credentials (an exec "
        "plugin included), its connection and its change; --wait's --timeout comes on top "
        "once the change is made. A cluster past it is reported 'timed out' (exit 5, or 3 "
        f"when its change was made) and the others are not held; default "
        f"{DEFAULT_CONTEXT_TIMEOUT:g}",
    )


def _cluster_flags(parser: argparse.ArgumentParser, *, suppress: bool) -> None:
    default: Any = argparse.SUPPRESS if suppress else None
    parser.add_argument(
        "-n",
        "--namespace",
        default=default,
        help="namespace of the policy and the WRC (default: the context's, else clerum)",
    )
    parser.add_argument(
        "--kubeconfig",
        default=default,
        metavar="PATH",
        help="kubeconfig file (default: $KUBECONFIG, else ~/.kube/config)",
    )
    parser.add_argument(
        "--context",
        action=_Contexts,
        default=default,
        metavar="NAME",
        help="kubeconfig context (default: current); kill, restore and status take it more "
        "than once: each cluster in parallel, one line each (docs/spilloverctl.md, The fleet)",
    )
    parser.add_argument(
        "--as",
        dest="as_user",
        type=_identity("--as"),
        default=default,
        metavar="USER",
        help="act as this user (impersonation, as kubectl; needs the impersonate verb); "
        "overrides the kubeconfig user's `as`",
    )
    parser.add_argument(
        "--as-group",
        dest="as_group",
        type=_identity("--as-group"),
        action="append",
        default=default,
        metavar="GROUP",
        help="with --as: act as a member of this group (repeatable); overrides `as-groups`",
    )
    parser.add_argument(
        "--as-uid",
        dest="as_uid",
        type=_identity("--as-uid"),
        default=default,
        metavar="UID",
        help="with --as: act with this UID; overrides `as-uid`",
    )


def _policy_arg(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "policy",
        nargs="?",
        default=DEFAULT_POLICY,
        metavar="POLICY",
        help=f"SpilloverPolicy name (default {DEFAULT_POLICY})",
    )


def _dump(document: Any, output: str) -> str:
    if output == "json":
        return json.dumps(document, indent=2) + "\n"
    import yaml

    return "# null: the variable is absent (the mcp-host default applies)\n" + yaml.safe_dump(
        document, sort_keys=False, default_flow_style=False
    )


def _dispatch(
    parser: argparse.ArgumentParser, args: argparse.Namespace, out: TextIO, err: TextIO
) -> int:
    if args.command is None:
        parser.print_help(err)
        return exit_codes.BAD_INPUT

    if args.command == "render":
        from .render import render, rendered_to_document

        rendered = render(args.filename, args.deployment, args.config_map)
        out.write(_dump(rendered_to_document(rendered), args.output))
        return exit_codes.OK

    change: changes.Change | None = None
    if args.command in ("kill", "restore", "set"):
        waits = args.wait or (args.direct and args.refresh_recipe_pods)
        if args.timeout is not None and not waits:
            args.command_parser.error(
                "--timeout only applies together with --wait (or --direct "
                "--refresh-recipe-pods, which waits for the WRC rollout and each restart)"
            )
        if args.no_wait_recipe_pods and not args.wait:
            args.command_parser.error("--no-wait-recipe-pods only applies together with --wait")
        if args.reason is not None and not args.reason.strip():
            args.command_parser.error("--reason needs a text (who is recorded anyway)")
        if args.command == "kill":
            change = changes.KILL
        elif args.command == "restore":
            change = changes.RESTORE
        else:
            fields: dict[str, Any] = {}
            for f in ENV_FIELDS:
                if f.flag is None or f.kind != "bytes":
                    continue
                value = getattr(args, f.flag)
                if value is not None or getattr(args, f"unset_{f.flag}"):
                    fields[f.key] = value
            if not fields:
                args.command_parser.error(
                    "nothing to set; give --threshold N or --unset-threshold, and/or "
                    "--budget N or --unset-budget"
                )
            change = changes.set_change(fields)

    if (args.as_group or args.as_uid) and not args.as_user:
        parser.error("--as-group and --as-uid need --as USER (the user to act as)")
    if args.as_group and len(args.as_group) > MAX_AS_GROUPS:
        parser.error(f"--as-group is given at most {MAX_AS_GROUPS} times")
    from spillover_operator.client import connect, impersonation_from_flags

    contexts = _fleet_contexts(parser, args)
    if contexts is not None:
        return _fleet(args, contexts, change, out, err)
    if getattr(args, "context_timeout", None) is not None:
        parser.error(
            "--context-timeout applies to several clusters (--context more than once, or "
            "--all-contexts)"
        )
    cluster = connect(
        args.kubeconfig,
        args.context,
        args.namespace,
        field_manager=FIELD_MANAGER,
        impersonate=impersonation_from_flags(args.as_user, args.as_group, args.as_uid),
    )
    if args.command == "status":
        from .status import cmd_status

        return cmd_status(cluster, args.policy, args.output, out)
    assert change is not None
    return changes.cmd_change(
        cluster,
        args.policy,
        change,
        direct=args.direct,
        wait=args.wait,
        timeout=args.timeout if args.timeout is not None else DEFAULT_TIMEOUT,
        out=out,
        err=err,
        options=changes.Options(
            reason=args.reason,
            refresh_recipe_pods=args.refresh_recipe_pods,
            wait_recipe_pods=not args.no_wait_recipe_pods,
        ),
    )


def _fleet_contexts(parser: argparse.ArgumentParser, args: argparse.Namespace) -> list[str] | None:
    """The contexts of a fleet command (--context more than once, --all-contexts), else
    None: one cluster, exactly as ever."""
    given: list[str] = getattr(args, "contexts", None) or []
    every = bool(getattr(args, "all_contexts", False))
    if len(given) > 1 and args.command not in ("kill", "restore", "status"):
        parser.error(f"{args.command} takes one --context; kill, restore and status take several")
    if every and given:
        parser.error("--all-contexts and --context exclude each other: give one or the other")
    if len(given) > MAX_CONTEXTS:
        parser.error(f"--context is given at most {MAX_CONTEXTS} times (got {len(given)})")
    twice = sorted({c for c in given if given.count(c) > 1})
    if twice:
        parser.error(f"--context {twice[0]!r} is given more than once")
    if every:
        from spillover_operator.client import context_names

        names = context_names(args.kubeconfig)
        if len(names) > MAX_CONTEXTS:
            raise BadInput(
                f"the kubeconfig has {len(names)} contexts; --all-contexts takes at most "
                f"{MAX_CONTEXTS}: name them with --context"
            )
        return names
    return given if len(given) > 1 else None


def _fleet(
    args: argparse.Namespace,
    contexts: list[str],
    change: changes.Change | None,
    out: TextIO,
    err: TextIO,
) -> int:
    """kill / restore / status on every context, in parallel (cli/fleet.py)."""
    from spillover_operator.client import Connection, connect, impersonation_from_flags

    from . import fleet

    acting = impersonation_from_flags(args.as_user, args.as_group, args.as_uid)
    bound = args.context_timeout if args.context_timeout is not None else DEFAULT_CONTEXT_TIMEOUT

    def connect_to(context: str) -> Connection:
        return connect(
            args.kubeconfig, context, args.namespace, field_manager=FIELD_MANAGER,
            impersonate=acting,
        )  # fmt: skip

    if args.command == "status":
        from .status import cmd_status

        def status(
            cluster: Connection, result: fleet.Cluster, o: TextIO, e: TextIO, on_made: Any
        ) -> int:
            buffer = io.StringIO()
            code = cmd_status(cluster, args.policy, "json", buffer)
            result.document = json.loads(buffer.getvalue())
            return code

        plan = fleet.Plan("status", connect_to, status, writes=False,
                          json_output=args.output == "json", context_timeout=bound)  # fmt: skip
        return fleet.run_fleet(contexts, plan, out, err)
    assert change is not None
    # What the threads would import on their own, imported once here first.
    if args.wait:
        import spillover_operator.observed  # noqa: F401

        from . import report  # noqa: F401
    options = changes.Options(
        reason=args.reason,
        refresh_recipe_pods=args.refresh_recipe_pods,
        wait_recipe_pods=not args.no_wait_recipe_pods,
    )
    timeout = args.timeout if args.timeout is not None else DEFAULT_TIMEOUT

    def command(
        cluster: Connection, result: fleet.Cluster, o: TextIO, e: TextIO, on_made: Any
    ) -> int:
        return changes.cmd_change(
            cluster, args.policy, change, direct=args.direct, wait=args.wait, timeout=timeout,
            out=o, err=e, options=options, on_made=on_made,
        )  # fmt: skip

    waits = args.wait or (args.direct and args.refresh_recipe_pods)
    plan = fleet.Plan(args.command, connect_to, command, writes=True, context_timeout=bound,
                      wait_timeout=timeout if waits else 0.0)  # fmt: skip
    return fleet.run_fleet(contexts, plan, out, err)


def run(
    argv: list[str] | None = None, *, stdout: TextIO | None = None, stderr: TextIO | None = None
) -> int:
    """Run spilloverctl with `argv` (default sys.argv[1:]); return the exit code."""
    out = stdout or sys.stdout
    err = stderr or sys.stderr
    try:
        parser = build_parser()  # inside: a Ctrl-C while it builds is an interruption too
        args = parser.parse_args(sys.argv[1:] if argv is None else argv)
        return _dispatch(parser, args, out, err)
    except SystemExit as exc:  # argparse: --help (0) and usage errors (2)
        return exc.code if isinstance(exc.code, int) else exit_codes.BAD_INPUT
    except (BadInput, ClientError) as exc:
        err.write(f"spilloverctl: error: {exc.message}\n")
        return exit_code(exc)
    except KeyboardInterrupt:
        return _interrupted(err)
    except Exception as exc:
        if caused_by_interrupt(exc):  # Ctrl-C while a lazily imported class was built
            return _interrupted(err)
        import traceback  # only a bug needs it

        err.write("spilloverctl: internal error (a bug in spilloverctl; please report it)\n")
        err.write(traceback.format_exc())
        return exit_codes.INTERNAL


def _interrupted(err: TextIO) -> int:
    err.write(
        "spilloverctl: interrupted; any change already sent to the cluster stays in place "
        "(check with `spilloverctl status`)\n"
    )
    return exit_codes.INTERRUPTED


def main(argv: list[str] | None = None) -> None:
    """The console script: exits with run()'s code."""
    raise SystemExit(run(argv))


if __name__ == "__main__":
    main()
