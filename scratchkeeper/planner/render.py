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
from ..errors import ConfigError, TemplateError
from ..transfer.classify import DENIED_PATTERNS, MISSING_PATTERNS, grep_pattern
from ..transfer.clients import file_url
from . import compiled_templates
from .plan import COMPUTE, Plan, PlannedJob
from .spool import OFFLOADED_LIST, spool_dir

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


#: the environment's options and filters; the compiled templates are made for exactly these
_OPTIONS = dict(autoescape=False, keep_trailing_newline=True, trim_blocks=True, lstrip_blocks=True)
FILTERS = dict(argv=_argv, header=_header, comment=_comment, verbatim=_verbatim, q=_quote)
_TAG = repr((sorted(_OPTIONS.items()), sorted(FILTERS), "StrictUndefined", _finalize.__qualname__))


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
    # what the compiled code depends on: Jinja2's version, the options, the filters' names
    tag = hashlib.sha1(repr((jinja2.__version__, _TAG)).encode()).hexdigest()
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(search),
        bytecode_cache=TemplateBytecodeCache(os.path.join(builtin, "__pycache__"), tag[:16]),
        undefined=jinja2.StrictUndefined, finalize=_finalize, **_OPTIONS)
    env.filters.update(FILTERS)
    return env


def _compile_builtin() -> dict[str, tuple[str, dict]]:
    """Every built-in template compiled to Python (:mod:`.template_compiler`, with Jinja2)."""
    from .template_compiler import compile_template

    env = _environment("")
    return {name: compile_template(env, name, set(FILTERS))
            for name in env.list_templates() if name.endswith(".j2")}


_compiled_memo: dict[str, tuple[dict, dict]] = {}


def _builtin_compiled() -> dict[str, compiled_templates.Template] | None:
    """The built-in templates compiled to Python: from the file beside them when it is current,
    else compiled now (and the file written when this caller may); None when a template uses
    what the compiler does not translate (Jinja2 renders them then)."""
    folder = builtin_templates()
    memo = _compiled_memo.get(folder)
    if memo is not None and compiled_templates.unchanged(folder, memo[0]):
        return memo[1]
    found = compiled_templates.load(folder, _TAG, _finalize, FILTERS)
    if found is None:
        from .template_compiler import Unsupported

        try:
            compiled = _compile_builtin()
        except Unsupported as err:
            import logging

            logging.getLogger(__name__).debug("job templates rendered by Jinja2: %s", err)
            return None
        compiled_templates.store(folder, _TAG, compiled)
        found = compiled_templates.build(folder, compiled, _finalize, FILTERS)
    _compiled_memo[folder] = found
    return found[1]


def compile_templates() -> list[str]:
    """Compile every built-in template into the caches beside them, the Python code the short
    commands run and Jinja2's bytecode (an installer runs this as the owner of the package, as
    pip compiles the modules); the names compiled."""
    env = _environment("")
    names = [name for name in env.list_templates() if name.endswith(".j2")]
    for name in names:
        env.get_template(name)
    _compiled_memo.clear()
    compiled_templates.store(builtin_templates(), _TAG, _compile_builtin())
    return names


def _templates(config: SiteConfig):
    """``name -> template`` (each with ``render(**values)``): the compiled built-in templates,
    or Jinja2's environment when the site overrides templates or the compiler cannot help."""
    if not config.templates.directory:
        compiled = _builtin_compiled()
        if compiled is not None:
            return compiled.__getitem__
    return template_environment(config).get_template


def _render(template, values: dict) -> str:
    """``template.render(**values)``; a value a template refuses (an unsafe directive value, an
    undefined or None value) or a broken site template is a :class:`TemplateError` naming the
    template file and line."""
    errors: tuple = (ValueError, TypeError, compiled_templates.UndefinedError)
    if "jinja2" in sys.modules:
        errors += (sys.modules["jinja2"].TemplateError,)
    try:
        return template.render(**values)
    except errors as err:
        where = template.where(err.__traceback__) \
            if isinstance(template, compiled_templates.Template) else None
        if where is None:  # Jinja2 gives its frames the template's file name and line
            traceback = err.__traceback__
            while traceback is not None:
                if traceback.tb_frame.f_code.co_filename.endswith(".j2"):
                    where = (traceback.tb_frame.f_code.co_filename, traceback.tb_lineno)
                traceback = traceback.tb_next
        if where is None and getattr(err, "lineno", None):   # a syntax error of a site template
            where = (getattr(err, "filename", None) or template.name, err.lineno)
        path, line = where if where else (template.name, None)
        message = getattr(err, "message", None) or str(err)
        raise TemplateError(message, path=path, line=line) from err


def scratchkeeper_argv(config: SiteConfig | None = None) -> list[str]:
    """How a data job calls back into scratchkeeper: ``templates.command``, else this
    interpreter with this package."""
    if config is not None and config.templates.command.strip():
        return shlex.split(config.templates.command)
    return [sys.executable, "-m", "scratchkeeper"]


def render_plan(plan: Plan, parsed_shebang: str, compute_script: str, config: SiteConfig) -> None:
    """Fill in ``job.script`` for every job of ``plan``."""
    templates = _templates(config)
    folder = plan.scheduler
    for job in plan.jobs:
        if job.role == COMPUTE:
            body = compute_script
            if parsed_shebang and body.startswith(parsed_shebang):
                # the shebang's own line break only: blank lines after it keep the compute
                # script's line N the script's line N (docs/planner.rst)
                body = body[len(parsed_shebang) + 1:]
            job.script = _render(templates(f"{folder}/compute.sh.j2"), dict(
                shebang=parsed_shebang or "#!/bin/bash", body=body, chain_id=plan.chain_id,
                script_path=plan.script_path))
        else:
            job.script = _render(templates(f"{folder}/stage.sh.j2"),
                                 _stage_context(plan, job, config))


def render_data_job(job: PlannedJob, config: SiteConfig, *, chain_id: str, script_path: str,
                    workdir: str, scheduler: str) -> None:
    """Fill in ``job.script`` for a data job added to a chain already submitted (an offload
    job of the chain service), from what names the chain: its plan is not at hand."""
    chain = Plan(chain_id=chain_id, script_path=script_path, workdir=workdir, scheduler=scheduler,
                 jobs=[job], staged_files=[], offloaded_files=[], inputs=[])
    render_plan(chain, "", "", config)


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
    retry = config.retry
    sk = scratchkeeper_argv(config)
    if config.source != "(defaults)":
        sk += ["--config", str(Path(config.source).resolve())]
    return dict(
        job=job, chain_id=plan.chain_id, script_path=plan.script_path, workdir=plan.workdir,
        attempts=job.retries + 1, delay=job.retry_delay, backoff=retry.backoff,
        max_delay=retry.max_delay, timeout=int(config.transfer.timeout),
        permanent=grep_pattern(), denied=grep_pattern(DENIED_PATTERNS),
        missing=grep_pattern(MISSING_PATTERNS), scratchkeeper=sk, stage_in=job.role == "stage-in",
        offload=job.role == "offload",
        # #STAGEIN -layout: the command that lays out each file before its transfer writes it
        setstripe=_setstripe_argv(job, config, sk),
        remove_before_setstripe=config.storage.backend == "lustre",
        # -when close: the results the chain service offloaded while the job ran
        offloaded_list=str(spool_dir(config, plan.chain_id) / OFFLOADED_LIST)
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
        # the URL the client builder gave the folder (percent-encoded: no wildcard expands)
        source = file_url(local, folder=True) if local else ""
        if job.role == "stage-out" and job.start == "close" and local and action.argv and \
                "globus-url-copy" in os.path.basename(action.argv[0]) and source in action.argv:
            parent, name = os.path.split(local)
            folder = os.path.join(parent, f".{name}.sk-changed-{plan.chain_id}")
            dirs.append(folder)
            changed = file_url(folder, folder=True)
            argvs.append(tuple(changed if a == source else a for a in action.argv))
        else:
            dirs.append("")
            argvs.append(())
    return {"changed_dirs": dirs, "changed_argv": argvs}
