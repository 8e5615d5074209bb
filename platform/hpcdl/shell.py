"""Quoting at the one edge where values meet the shell (and the batch directives)."""

from __future__ import annotations

import re
import shlex

from hpcdl.errors import HpcdlError

#: $NAME, ${NAME}, or ${NAME%word}: the shell's removal of a literal suffix (a project's folder from the account
#: Slurm charged, $SLURM_JOB_ACCOUNT less a node kind's account suffix); the word holds no pattern or expansion.
#: The one spelling of a variable reference that hpcdl lets expand: the profile's checks, the job script's
#: quoting and the modulefiles' all read it here.
VARIABLE = re.compile(r"\$(?:\{([A-Za-z_][A-Za-z0-9_]*)(%[A-Za-z0-9._-]+)?\}|([A-Za-z_][A-Za-z0-9_]*))")


def variables_in(text: str) -> list[str]:
    """The names of the variables `text` refers to, in order ($SCRATCH/${USER} -> SCRATCH, USER)."""
    return [match.group(1) or match.group(3) for match in VARIABLE.finditer(text)]


def _braced(match: re.Match) -> str:
    """One VARIABLE match written ${NAME} or ${NAME%word}, the form every reader expands."""
    return "${" + (match.group(1) or match.group(3)) + (match.group(2) or "") + "}"


def with_braces(text: str) -> str:
    """`text` with each variable written ${NAME} ($SCRATCH/x -> ${SCRATCH}/x), for readers that expand only that form."""
    return VARIABLE.sub(_braced, text)


def leading_variable(path: str) -> str | None:
    """The variable `path` starts with, alone or followed by a folder ($RCAC_SCRATCH/runs -> RCAC_SCRATCH); None
    where it starts otherwise, or with ${NAME%word}, which is not the variable's value."""
    match = VARIABLE.match(path)
    if match is None or match.group(2) or path[match.end():match.end() + 1] not in ("", "/"):
        return None
    return match.group(1) or match.group(3)


class Expanding(str):
    """An argv word whose $VARIABLES expand when the job runs: a site path such as /mnt/bb/$USER.

    Only plain variable references expand (see path_with_variables); everything else stays literal.
    """


class RuntimeExpands(str):
    """An argv word whose $VARIABLES the container runtime expands, not the job shell: a library
    path that names the container's own value (LD_LIBRARY_PATH=/host/lib:$LD_LIBRARY_PATH).
    Apptainer evaluates --env values "in the container context" (its "Using Container Variables":
    escape the `$` as `\\$`); ch-run expands $VAR in --set-env values. The job shell expands nothing:
    every quote, `$`, backtick and backslash is escaped with a backslash, the rest quoted as shlex quotes.
    """


_ANSI_C = {"\\": "\\\\", "'": "\\x27", '"': "\\x22", "$": "\\x24", "`": "\\x60", "\n": "\\n", "\t": "\\t"}


def quote(value) -> str:
    """One shell word that bash reads back as exactly `value`, and that runs nothing.

    Plain text goes in single quotes (shlex). Text that holds quotes, '$', backticks,
    backslashes or control characters goes in bash's $'...' with those characters
    written as escapes: as safe as single quotes, and shellcheck does not take the
    literal '$(...)' or quote characters for mistakes (SC2016, SC2089).
    """
    if isinstance(value, Expanding):
        return path_with_variables(value)
    if isinstance(value, RuntimeExpands):
        one_line("container setting", value)
        # the specials backslashed outside quotes, which bash and shlex read alike (no "A"\\$"B": SC2140)
        return "".join(f"\\{part}" if part in '\\"$`' else shlex.quote(part)
                       for part in re.split(r'([\\"$`])', str(value)) if part)
    text = str(value)
    if not any(c in text for c in "'\"$`\\") and text.isprintable():
        # shlex leaves a leading '=' bare: bash reads `export A==x` as A="=x", but shellcheck stops it as a
        # comparison (SC1097); NCCL's exact-match form, NCCL_IB_HCA="=mlx5_0:1,mlx5_3:1", starts so
        return f"'{text}'" if text.startswith("=") else shlex.quote(text)
    out = []
    for c in text:
        if c in _ANSI_C:
            out.append(_ANSI_C[c])
        elif not c.isprintable():
            out.append("".join(f"\\x{b:02x}" for b in c.encode()))
        else:
            out.append(c)
    return "$'" + "".join(out) + "'"


def comment_text(value) -> str:
    """Text for a '#' comment line that stays inside it: printable text as it is, anything
    else (a newline, a carriage return, a control or line-separator character) as an escape.
    """
    text = str(value)
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in text)


def join(argv) -> str:
    return " ".join(quote(a) for a in argv)


def env_name(name: str) -> str:
    if not name or not name.replace("_", "a").isalnum() or name[0].isdigit() or not name.isascii():
        raise HpcdlError(f"environment variable name {name!r} is not a valid shell name")
    return name


def one_line(field: str, value: str | None) -> str | None:
    """Refuse values a scheduler directive cannot carry at all (a newline ends the directive), and
    characters that make the line look other than it is.

    U+2028 and U+2029 show as line breaks in editors and web views, and the bidirectional
    overrides (U+202E ...) reverse the text after them ("Trojan Source", CVE-2021-42574):
    neither bash nor sbatch treats them specially, so a reviewed script could ask for more than
    its reviewer saw. Comments print them escaped (comment_text); directive values refuse them,
    as they refuse any other character that is not printable except a tab.
    """
    if value is None:
        return value
    text = str(value)
    if any(c in text for c in "\n\r\0"):
        raise HpcdlError(f"{field}: contains a newline or NUL, which no batch directive can carry")
    hidden = next((c for c in text if not c.isprintable() and c != "\t"), None)
    if hidden is not None:
        raise HpcdlError(f"{field}: contains U+{ord(hidden):04X}, a control, line-separator or text-direction "
                         "character that would show the job script other than it runs")
    return value


def path_with_variables(path: str) -> str:
    """A site path such as /mnt/bb/$USER as one shell word: variables expand, nothing else does.

    Site profiles name per-user folders with $USER or ${HOME} (Summit's NVMe is /mnt/bb/$USER).
    Only plain variable references are expanded, inside double quotes; every other character,
    a `$(...)` or a backtick included, is single-quoted and stays literal.
    """
    one_line("path", path)
    parts, last = [], 0
    for match in VARIABLE.finditer(path):
        if match.start() > last:
            parts.append(quote(path[last:match.start()]))
        parts.append('"' + _braced(match) + '"')
        last = match.end()
    if last < len(path) or not parts:
        parts.append(quote(path[last:]))
    return "".join(parts)


def path_in_double_quotes(path: str) -> str:
    """A site path written to go inside a double-quoted word: its variables expand, nothing else does.

    A path that is only part of a word ("${SCRATCH}/hpcdl-runs/<name>-$HPCDL_JOB_ID") reads as one quoted
    string this way. The variables are written ${NAME}, as path_with_variables writes them; each other `$`,
    backtick, backslash and double quote gets a backslash, the only characters that act inside double quotes.
    """
    one_line("path", path)
    parts, last = [], 0
    for match in VARIABLE.finditer(path):
        parts.append(_inert_in_double_quotes(path[last:match.start()]))
        parts.append(_braced(match))
        last = match.end()
    parts.append(_inert_in_double_quotes(path[last:]))
    return "".join(parts)


def _inert_in_double_quotes(text: str) -> str:
    return "".join("\\" + c if c in '\\$`"' else c for c in text)


def slurm_directive_value(value: str) -> str:
    """A value as sbatch reads it back from an #SBATCH line, byte for byte.

    sbatch (src/sbatch/opt.c, get_argument) splits directive lines on blanks, groups with
    quotes, ends the line at an unquoted '#', and takes the character after a backslash
    literally, except a blank, which ends the word even after a backslash. So a value is
    written in double quotes, with backslashes before its own double quotes and backslashes.
    Plain values stay bare, as a person would write them. Checked against the real sbatch in
    tests/test_slurm_cluster.py.
    """
    value = str(one_line("value", value))
    if value and all(c.isalnum() or c in "._-:,/%=+@[]" for c in value):
        return value
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


_PLAIN_WORD = re.compile(r"^[A-Za-z0-9._:+=,@/%-]+$")


def plain_word(field: str, scheduler: str, value: str) -> str:
    """Values LSF and PBS directives carry without any quoting, or a clear refusal."""
    one_line(field, value)
    if not _PLAIN_WORD.match(str(value)):
        raise HpcdlError(
            f"{field}: {value!r} cannot be written into a {scheduler} directive; "
            "use letters, digits and . _ - : + = , @ / only"
        )
    return str(value)
