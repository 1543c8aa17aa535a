"""HTTP redirects on root's paths: none is followed before it is checked.

recoveryd's ranged reads and the chain service's size query reach a source only after its URL
passed the site's allow-list (``recovery.allowed_sources``); a server's ``302`` would take curl
to a URL nobody checked. So their curl never follows a redirect itself (``--no-location``,
after the site's own curl options, so no ``-L`` there turns it back on): the reader reads where
a 3xx answer points (curl's ``%{redirect_url}``, the ``Location`` resolved against the URL
asked, as curl would have followed it) and goes there only if :func:`next_hop` allows it, at
most :data:`MAX_REDIRECTS` times per request. A hop is followed when

* it is spelled plainly: ``http(s)://`` host (DNS name, IPv4 or bracketed IPv6) ``[:port]``
  and a path of printable ASCII without ``\\``, ``#`` or spaces, so that Python's reading of
  its host and port (the check) and curl's (the connection) cannot differ (no userinfo, no
  fragment, nothing one parser skips and the other does not);
* it is a source location as a directive's URL must be (:func:`.uri.parse_location`: a host
  name, a path, no control character);
* its caller's policy allows it: the allow-list that checked the first URL, asked again for
  this one (``scratchkeeper.planner.sources``).

A policy is a function of a URL that answers None (follow) or why not (one line); None as the
policy means no redirect is followed at all. A caller acting with its own rights only (a user's
own size query) may pass :func:`follow_any`.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from urllib.parse import urlsplit

from ..errors import TransferError
from .uri import UnknownScheme, parse_location

#: hops one request may take (curl's own default is 50; the site's endpoints need one or two)
MAX_REDIRECTS = 5

#: None: follow the URL; a string: why not
RedirectPolicy = Callable[[str], "str | None"]

_PLAIN_URL_RE = re.compile(r"https?://(?:[A-Za-z0-9._-]+|\[[0-9A-Fa-f:.]+\])(?::[0-9]{1,5})?"
                           r"(?:/[!-~]*)?\Z")
_SHOWN = 300  # characters of a Location shown in an error


def follow_any(url: str) -> str | None:
    """The policy of a caller that acts with no rights but its own: every plain hop."""
    return None


def is_redirect(code: str) -> bool:
    """A 3xx answer: curl names where it points (its ``%{redirect_url}``), or it points nowhere
    a reader may go (a 304 or a 3xx without ``Location``), which :func:`next_hop` says."""
    return len(code) == 3 and code.startswith("3")


def next_hop(uri: str, asked: str, code: str, location: str, policy: RedirectPolicy | None,
             hops: int) -> str:
    """The URL a ``code`` answer to ``asked`` points to (``location``, resolved by curl), once
    checked; ``hops``: redirects this request followed so far.

    Raises a permanent :class:`TransferError` naming the server and the Location when the hop
    is not to be followed."""
    answer = f"{_server(asked)} answered HTTP {code}"
    if not location:
        raise TransferError(f"{uri}: {answer} with no Location to follow", permanent=True)
    answer += f" with Location {_shown(location)}"
    if policy is None:
        raise TransferError(f"{uri}: redirect not followed: {answer} (this reader follows "
                            "none)", permanent=True)
    if hops >= MAX_REDIRECTS:
        raise TransferError(f"{uri}: redirect not followed: more than {MAX_REDIRECTS} "
                            f"redirects (the last: {answer})", permanent=True)
    why = _why_not_plain(location) or policy(location)
    if why is not None:
        raise TransferError(f"{uri}: redirect not followed: {answer}: {why}", permanent=True)
    return location


def _why_not_plain(url: str) -> str | None:
    """Why ``url`` is not a hop curl and the check read alike, or None."""
    if not _PLAIN_URL_RE.match(url) or "\\" in url or "#" in url:
        return ("not a plain http(s)://host[:port]/path URL (no userinfo, fragment, "
                "backslash, space or other character)")
    try:
        parse_location(url)
    except (ValueError, UnknownScheme) as err:
        return str(err)
    return None


def _server(url: str) -> str:
    """``scheme://host[:port]`` of a URL (its userinfo, if any, left out of error lines)."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    host = f"[{host}]" if ":" in host else host
    try:
        port = parts.port
    except ValueError:  # not a number: shown as written
        return f"{parts.scheme}://{parts.netloc.rpartition('@')[2]}"
    return f"{parts.scheme}://{host}" + (f":{port}" if port else "")


def _shown(location: str) -> str:
    """A server's Location as an error line shows it: printable, cut at :data:`_SHOWN`."""
    text = "".join(c if c.isprintable() else "?" for c in location)
    return text if len(text) <= _SHOWN else text[:_SHOWN] + "..."
