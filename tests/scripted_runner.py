"""A command runner that answers from a table, for tests of code that runs scheduler commands."""

from __future__ import annotations

from scratchkeeper.runner import CommandResult, CommandRunner


def result(argv, stdout: str = "", returncode: int = 0, stderr: str = "") -> CommandResult:
    return CommandResult(tuple(argv), returncode, stdout, stderr, 0.01)


class ScriptedRunner(CommandRunner):
    """Answers commands from a table: (argv prefix) -> CommandResult, exception or a callable
    of the argv returning either; records every argv it was asked to run."""

    def __init__(self, answers):
        super().__init__()
        self.answers = answers
        self.recorded: list[tuple[str, ...]] = []

    def run(self, argv, **kwargs):
        self.recorded.append(tuple(argv))
        for prefix, answer in self.answers:
            if tuple(argv[: len(prefix)]) == prefix:
                if callable(answer) and not isinstance(answer, CommandResult):
                    answer = answer(tuple(argv))
                if isinstance(answer, Exception):
                    raise answer
                return answer
        raise AssertionError(f"unexpected command {argv}")

    def ran(self, name: str) -> list[tuple[str, ...]]:
        return [argv for argv in self.recorded if argv[0] == name]
