"""Render a plan's jobs into batch scripts with the scheduler's Jinja2 templates.

Every value reaching a template is shell-quoted unless it went through a filter that makes it
safe: ``argv`` (a quoted command line), ``header`` (a directive value checked against a strict
character set), ``comment`` (text folded onto one comment line) or ``verbatim`` (the user's own
script text, which is theirs to run). Undefined variables are errors (``StrictUndefined``).
"""

from __future__ import annotations

import functools
import os
import re
import shlex
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from ..config import SiteConfig
from ..errors import ConfigError
from ..transfer.classify import grep_pattern
from .plan import COMPUTE, Plan, PlannedJob

if TYPE_CHECKING:
    import jinja2

_HEADER_SAFE = re.compile(r"^[A-Za-z0-9._:+@/=-]+$")


class Shell(str):
    """Text already safe to put in a shell script as it is."""


def _finalize(value):
    if isinstance(value, Shell):
        return value
    if isinstance(value, bool):
        raise TypeError("a bare boolean reached a template; test it with {% if %}")
    if isinstance(value, (int, float)):
        return str(value)
    if value is None:
        raise TypeError("None reached a template; test it with {% if %}")
    return shlex.quote(str(value))


def _argv(value: Sequence[str]) -> Shell:
    return Shell(shlex.join(str(v) for v in value))


def _header(value) -> Shell:
    text = str(value)
    if not _HEADER_SAFE.match(text):
        raise ValueError(f"unsafe value for a scheduler directive: {text!r}")
    return Shell(text)


def _comment(value) -> Shell:
    return Shell(re.sub(r"[\x00-\x1f\x7f]+", " ", str(value)))


def _verbatim(value) -> Shell:
    return Shell(str(value))


def _quote(value) -> Shell:
    return Shell(shlex.quote(str(value)))


def template_environment(config: SiteConfig) -> jinja2.Environment:
    """The Jinja2 environment: site override folder first, then the built-in job-templates."""
    if config.templates.directory and not Path(config.templates.directory).is_dir():
        raise ConfigError(f"key 'templates.directory': expected a folder, got "
                          f"'{config.templates.directory}' which is not one", path=config.source)
    return _environment(config.templates.directory)


def builtin_templates() -> str:
    """The folder of the built-in job templates (the package ``scratchkeeper.job_templates``)."""
    from .. import job_templates

    return os.path.dirname(job_templates.__file__)


@functools.lru_cache(maxsize=8)
def _environment(override: str) -> jinja2.Environment:
    """One environment per override folder, so compiled templates are reused (Jinja2 checks
    the files' mtimes, so an edited site template is still picked up); their bytecode is kept
    beside the built-in templates (:mod:`.template_cache`) for the next process."""
    import hashlib

    import jinja2

    from .template_cache import TemplateBytecodeCache

    builtin = builtin_templates()
    search = [override, builtin] if override else [builtin]
    options = dict(undefined=jinja2.StrictUndefined, finalize=_finalize, autoescape=False,
                   keep_trailing_newline=True, trim_blocks=True, lstrip_blocks=True)
    filters = dict(argv=_argv, header=_header, comment=_comment, verbatim=_verbatim, q=_quote)
    # what the compiled code depends on: Jinja2's version, the options, the filters' names
    tag = hashlib.sha1(repr((jinja2.__version__, sorted(filters), sorted(
        (k, getattr(v, "__qualname__", v)) for k, v in options.items()))).encode()).hexdigest()
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(search),
        bytecode_cache=TemplateBytecodeCache(os.path.join(builtin, "__pycache__"), tag[:16]),
        **options)
    env.filters.update(filters)
    return env


def compile_templates() -> list[str]:
    """Compile every built-in template into the cache beside them (an installer runs this
    as the owner of the package, as pip compiles the modules); the names compiled."""
    env = _environment("")
    names = [name for name in env.list_templates() if name.endswith(".j2")]
    for name in names:
        env.get_template(name)
    return names


def scratchkeeper_argv(config: SiteConfig | None = None) -> list[str]:
    """How a data job calls back into scratchkeeper: ``templates.command``, else this
    interpreter with this package."""
    if config is not None and config.templates.command.strip():
        return shlex.split(config.templates.command)
    return [sys.executable, "-m", "scratchkeeper"]


def render_plan(plan: Plan, parsed_shebang: str, compute_script: str, config: SiteConfig) -> None:
    """Fill in ``job.script`` for every job of ``plan``."""
    env = template_environment(config)
    folder = plan.scheduler
    for job in plan.jobs:
        if job.role == COMPUTE:
            template = env.get_template(f"{folder}/compute.sh.j2")
            body = compute_script
            if parsed_shebang and body.startswith(parsed_shebang):
                body = body[len(parsed_shebang):].lstrip("\n")
            job.script = template.render(
                shebang=parsed_shebang or "#!/bin/bash", body=body, chain_id=plan.chain_id,
                script_path=plan.script_path)
        else:
            template = env.get_template(f"{folder}/stage.sh.j2")
            job.script = template.render(**_stage_context(plan, job, config))


def _setstripe_argv(job: PlannedJob, config: SiteConfig, sk: list[str]) -> list[str] | None:
    """``lfs setstripe -c N -S SIZE`` (Lustre) or ``scratchkeeper store setstripe --file``
    (the local store) for a stage-in with a layout decision; the path follows."""
    if job.role != "stage-in" or job.layout is None:
        return None
    settings = ["-c", str(job.layout.stripe_count), "-S", str(job.layout.stripe_size)]
    if config.storage.backend == "lustre":
        return [*shlex.split(config.storage.lfs), "setstripe", *settings]
    return [*sk, "store", "setstripe", "--file", *settings]


def _stage_context(plan: Plan, job: PlannedJob, config: SiteConfig) -> dict:
    from .submit import spool_dir

    retry = config.retry
    sk = scratchkeeper_argv(config)
    if config.source != "(defaults)":
        sk += ["--config", str(Path(config.source).resolve())]
    return dict(
        job=job, chain_id=plan.chain_id, script_path=plan.script_path, workdir=plan.workdir,
        attempts=job.retries + 1, delay=job.retry_delay, backoff=retry.backoff,
        max_delay=retry.max_delay, timeout=int(config.transfer.timeout),
        permanent=grep_pattern(), scratchkeeper=sk, stage_in=job.role == "stage-in",
        offload=job.role == "offload",
        # #STAGEIN -layout: the command that lays out each file before its transfer writes it
        setstripe=_setstripe_argv(job, config, sk),
        remove_before_setstripe=config.storage.backend == "lustre",
        # -when close: the results the chain service offloaded while the job ran
        offloaded_list=str(spool_dir(config, plan.chain_id) / "offloaded.list")
        if job.role == "stage-out" and job.start == "close" else "",
        **_changed_only(plan, job))


def _changed_only(plan: Plan, job: PlannedJob) -> dict:
    """For a -when close stage-out, per action: the folder of hard links to the files to send
    again (beside the listed one, on scratch) and the client's argv reading it instead (only
    for globus-url-copy reading a folder, ``file:///folder/``, which puts its files (with -r,
    its whole tree) at the same relative paths under the destination)."""
    dirs, argvs = [], []
    for action in job.actions:
        local = (action.local_path or "").rstrip("/")
        source = f"file://{local}/"
        if job.role == "stage-out" and job.start == "close" and local and action.argv and \
                "globus-url-copy" in os.path.basename(action.argv[0]) and source in action.argv:
            parent, name = os.path.split(local)
            folder = os.path.join(parent, f".{name}.sk-changed-{plan.chain_id}")
            dirs.append(folder)
            argvs.append(tuple(f"file://{folder}/" if a == source else a for a in action.argv))
        else:
            dirs.append("")
            argvs.append(())
    return {"changed_dirs": dirs, "changed_argv": argvs}
