"""Hydra's own multi-line composition errors (an unknown key, a value of the wrong type, a missing option,
an override it cannot parse) condensed into the one line the rest of the start-up checks give."""

from __future__ import annotations

import re

_FULL_ERROR_HINT = "Set the environment variable HYDRA_FULL_ERROR=1"


def condense(message: str) -> str:
    """One line that names the key, the value and what is wrong, from the text Hydra printed when it could
    not compose the config (`message`: everything it wrote to stderr)."""
    lines = [line.rstrip() for line in message.split(_FULL_ERROR_HINT)[0].splitlines() if line.strip()]
    text = "\n".join(lines)
    if missing := re.search(r"Could not find '([^/']+)/([^']+)'", text):
        group, choice = missing.groups()
        options = re.search(rf"Available options in '{re.escape(group)}':\n((?:\t.*\n?)*)", text + "\n")
        names = ", ".join(o.strip() for o in options.group(1).splitlines()) if options else "see --help"
        return f"{group}={choice}: no such option in {group}; choose one of {names}"
    unknown = re.search(r"Could not override '([^']+)'.*?Key '([^']+)' not in '([^']+)'", text, re.S)
    if unknown:
        key, field, schema = unknown.groups()
        given = re.search(r"To append to your config use \+(\S+)", text)
        return f"{given.group(1) if given else key}: no such setting ({schema} has no field '{field}'; --cfg job shows the settings)"
    if wrong := re.search(r"Error merging override (\S+)\n(.+?)\n\s*full_key", text, re.S):
        override, reason = wrong.groups()
        return f"{override}: {reason.strip()}"
    if unparsed := re.search(r"Error parsing override '([^']*)'\n(.+)", text):
        override, reason = unparsed.groups()
        return f"{override}: Hydra cannot parse this override ({reason.strip()}); write key=value"
    return "; ".join(line.strip() for line in lines if not line.startswith(("\t", "    "))) or message.strip()
