"""The `logdoctor` command line.

Exit codes (all commands): 0 no failure found / success, 1 failure diagnosed (explain, batch),
2 usage or input error (a clear one-line message on stderr, never a traceback), 3 `explain --follow`
stalled (no new line for --stall-timeout seconds), 130 interrupted
(SIGINT, Ctrl-C), 143 terminated (SIGTERM), 141 output pipe closed early (`| head`).
"""
from __future__ import annotations

import atexit
import gc
import io
import os
import signal
import sys
from typing import Any, NoReturn

import click

from logdoctor import __version__
from logdoctor.cli.common import EXIT_OK, EXIT_PIPE_CLOSED, EXIT_USAGE, UsageError
from logdoctor.paths import OutputError, display_text
from logdoctor.read.ingest import InputError


class Signalled(BaseException):
    """SIGINT or SIGTERM reached the command. A BaseException, so `except Exception` (one bad file must
    not end a batch) never swallows it; it unwinds every `finally` that removes temp files."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


class PipeClosed(BaseException):
    """stdout's reader went away. click would turn BrokenPipeError into exit 1; this passes it by."""


class _Cli(click.Group):
    def make_context(self, *args: Any, **kwargs: Any) -> click.Context:
        try:  # `logdoctor --help | head -c1`: the help is written while the arguments are parsed
            return super().make_context(*args, **kwargs)
        except BrokenPipeError:
            raise PipeClosed() from None

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except BrokenPipeError:
            raise PipeClosed() from None


class _ClosedStream(io.TextIOBase):
    """Stands in for a standard stream whose descriptor was closed (`<&-`, `>&-`): says so when used."""

    def __init__(self, name: str) -> None:
        self._name = name

    @property
    def buffer(self) -> _ClosedStream:  # ingest reads sys.stdin.buffer
        return self

    def isatty(self) -> bool:
        return False

    def read(self, *_: Any) -> NoReturn:
        raise InputError(f"<{self._name}>: {self._name} is closed")

    peek = readline = read

    def write(self, _: Any) -> NoReturn:
        raise UsageError(f"{self._name} is closed: nothing can be written (redirect it, or use -o FILE)")

    def flush(self) -> None:
        pass


def _guard_standard_streams() -> None:
    """A closed fd 0/1/2 gets /dev/null, so no file opened later lands on it (and gets our output
    or is read as stdin); the Python-level stream says it is closed when the command uses it."""
    for fd, name in ((0, "stdin"), (1, "stdout"), (2, "stderr")):
        try:
            os.fstat(fd)
            closed = getattr(sys, name) is None
        except OSError:
            nul = os.open(os.devnull, os.O_RDWR)
            if nul != fd:
                os.dup2(nul, fd)
                os.close(nul)
            closed = True
        if closed:
            setattr(sys, name, open(os.devnull, "w") if name == "stderr" else _ClosedStream(name))


def _on_signal(signum: int, _frame: Any) -> None:
    # a second signal while cleaning up ends at once
    for s in (signal.SIGINT, signal.SIGTERM):
        signal.signal(s, lambda n, _f: os._exit(128 + n))
    raise Signalled(signum)


def _install_signal_handlers() -> None:
    for s, untouched in ((signal.SIGINT, signal.default_int_handler), (signal.SIGTERM, signal.SIG_DFL)):
        if signal.getsignal(s) is untouched:  # keep an ignored SIGINT ignored (`nohup`, background jobs)
            signal.signal(s, _on_signal)


@click.group(cls=_Cli, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="logdoctor")
@click.pass_context
def cli(ctx: click.Context) -> None:
    """Read SGLang server logs and say why a launch failed.

    Exit codes: 0 no failure, 1 failure diagnosed, 2 usage or input error, 3 explain --follow stalled, 130 / 143 interrupted
    (SIGINT / SIGTERM), 141 output pipe closed.
    """
    settings.configure(ctx)  # [tool.logdoctor] / logdoctor.toml and LOGDOCTOR_* as the commands' defaults


from logdoctor.cli import many, one, report_cmd, rules, settings  # noqa: E402  (command modules attach to `cli`)

for _command in (*one.COMMANDS, rules.rules_group, *report_cmd.COMMANDS):
    cli.add_command(_command)
many.register(cli)
cli.add_command(settings.config_cmd)


def _say(message: str) -> None:
    """One line on stderr; the message may quote a file name, so it is escaped."""
    try:
        click.echo(f"logdoctor: {display_text(message)}", err=True)
    except OSError:
        pass  # stderr itself is gone: the exit code still tells


def _silence_stdout() -> None:
    """After the reader of stdout went away, let the interpreter's final flush go nowhere."""
    try:
        nul = os.open(os.devnull, os.O_WRONLY)
        os.dup2(nul, sys.stdout.fileno())
        os.close(nul)
    except (OSError, ValueError, AttributeError, io.UnsupportedOperation):
        pass


def _run() -> int:
    try:
        rv = cli.main(standalone_mode=False)
        sys.stdout.flush()  # a closed pipe shows here, not in the interpreter's exit
    except click.exceptions.Exit as e:
        return e.exit_code
    except click.exceptions.Abort:  # click's prompt on EOF; ours never prompt
        _say("aborted")
        return EXIT_USAGE
    except click.UsageError as e:
        if type(e).__name__ == "NoArgsIsHelpError":  # bare `logdoctor` / `logdoctor rules`: the help is the answer
            e.show()
        else:  # one line naming the option, not click's usage block
            hint = f" (see '{e.ctx.command_path} --help')" if e.ctx is not None else ""
            _say(f"{e.format_message()}{hint}")
        return EXIT_USAGE
    except click.ClickException as e:
        _say(e.format_message())
        return EXIT_USAGE
    except (InputError, UsageError, OutputError) as e:
        _say(str(e))
        return EXIT_USAGE
    except (PipeClosed, BrokenPipeError):
        _silence_stdout()
        return EXIT_PIPE_CLOSED
    except Signalled as e:
        _say("interrupted" if e.signum == signal.SIGINT else "terminated")
        return 128 + e.signum
    except KeyboardInterrupt:  # SIGINT before the handler was installed, or as a library
        _say("interrupted")
        return 128 + signal.SIGINT
    except RecursionError:
        _say("input too deeply nested to analyse")
        return EXIT_USAGE
    except OSError as e:  # reads and -o are wrapped (InputError, OutputError): what is left is stdout (`> /dev/full`)
        _silence_stdout()
        why = (e.strerror or str(e)).lower()
        _say(f"{e.filename}: {why}" if e.filename else f"stdout: write failed ({why})")
        return EXIT_USAGE
    except Exception as e:  # never a traceback: say what failed in one line
        _say(f"internal error: {type(e).__name__}: {e}")
        return EXIT_USAGE
    return rv if isinstance(rv, int) else EXIT_OK


def _alone() -> bool:
    """No other thread and no child process machinery: nothing the interpreter's own exit would wait for."""
    threading = sys.modules.get("threading")
    return (threading is None or threading.active_count() == 1) and "multiprocessing" not in sys.modules


def _leave(code: int) -> NoReturn:
    """End the process with `code`, without the interpreter's teardown when nothing needs it.

    That teardown collects and frees every object the run made (the parser, the rule set, the events):
    20-30 ms after a 5k-line explain, a sixth of its time, for memory the system reclaims anyway. The
    standard streams are flushed and the `atexit` functions run, as at a normal exit; with another thread
    alive, or after a batch (worker processes), the exit is the interpreter's own. Every file the commands
    write is closed before they return (paths.py writes via a temporary file and a rename)."""
    run_exitfuncs = getattr(atexit, "_run_exitfuncs", None)
    if run_exitfuncs is not None and _alone():
        run_exitfuncs()
        for stream in (sys.stdout, sys.stderr):
            try:
                if stream is not None:
                    stream.flush()
            except (OSError, ValueError):
                pass  # stdout was flushed (or silenced) already; stderr gone: the exit code still tells
        os._exit(code & 0xFF)
    gc.freeze()  # the objects left are freed as the modules go; a last collection over them finds nothing
    sys.exit(code)


def _settle_collector() -> None:
    """Young objects collected less often: a run's events mostly live to its end, and what the stages import
    and build on first use (the parser, the rule set) lives to the end of the process, so frequent collections
    free nothing (at 10,000 a 5k-line explain still collected twice, ~3 ms, over the parser's and rule set's
    objects). Garbage is still collected, every 50,000 net allocations: memory stays bounded. What the
    imports made is already out of the collector's reach (logdoctor/cli/__init__.py)."""
    gc.set_threshold(50_000, 10, 10)


def main() -> NoReturn:
    """The `logdoctor` program: parse the arguments, run the command, end the process with its exit code.
    It never returns (embedders call `cli.main(standalone_mode=False)` or `_run` instead)."""
    _settle_collector()
    _guard_standard_streams()
    _install_signal_handlers()
    code = _run()
    try:
        sys.stdout.flush()
    except (OSError, ValueError):
        _silence_stdout()
    _leave(code)


if __name__ == "__main__":
    main()
