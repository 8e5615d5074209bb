"""Reading a Singularity definition back: the header and each %section's body, in order.

hpccm emits one %post (and %environment) per building block; Singularity >= 3.1 runs them
all in order, so a section kind's shell is the bodies of its sections joined.
"""

from __future__ import annotations

import re

SECTION = re.compile(r"^%([a-z]+)\b(.*)$")


def sections(text: str) -> list[tuple[str, str]]:
    """[(name, body)] for each %section, in file order; the header is ('header', ...)."""
    out: list[tuple[str, list[str]]] = [("header", [])]
    for line in text.splitlines():
        m = SECTION.match(line)
        if m:
            out.append((m.group(1), []))
        else:
            out[-1][1].append(line)
    return [(name, "\n".join(body).strip("\n") + "\n") for name, body in out]


def shell_of(text: str, name: str) -> str:
    """The shell a section kind runs: every %NAME body joined, under a bash shebang."""
    bodies = [body for kind, body in sections(text) if kind == name]
    return "#!/bin/bash\n" + "\n".join(bodies)
