"""The rigs tests and benchmarks share: the file systems the mount is measured against
(:mod:`testkit.mount_targets`) and pjdfstest's script and accepted-failures list
(:mod:`testkit.pjdfstest`).

It sits below both: ``tests/`` never imports ``benchmarks/`` (ruff's TID251, pyproject.toml),
so what both need lives here. Like ``benchmarks/`` it is not installed: it is imported from the
repository's root (``python -m benchmarks...`` run there; the tests that need it put the root
on ``sys.path``).
"""
