"""The `pip install` commands a container definition runs, read back as a builder would run them.

A definition can be valid shell and still install nothing sensible: two commands glued onto one
line (`... 'python-hostlist>=2.0'/opt/envs/tensorflow/bin/pip install ...`) pass `bash -n`, and
pip stops at build time with "Invalid requirement", after an hour of compiling. So each shell
line of %post (Singularity) or RUN (Dockerfile) is split into simple commands the way the shell
splits it (quotes, `&&`, `;`, `|`), and every argument of each `pip install` must be an option,
a path, or a requirement specifier pip accepts (PEP 508, `packaging.requirements.Requirement`,
the parser pip itself vendors).
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field

#: pip install options that take a value (pip's `install` and general options that hpcdl's
#: definitions use or a centre's might; an unknown option is reported, not guessed at)
VALUE_OPTIONS = {"-i", "--index-url", "--extra-index-url", "-f", "--find-links", "--no-binary",
                 "--only-binary", "-c", "--constraint", "-r", "--requirement", "-t", "--target",
                 "--prefix", "--root", "--platform", "--python-version", "--implementation", "--abi",
                 "--cert", "--trusted-host", "--progress-bar", "--upgrade-strategy", "--report", "-e",
                 "--editable", "--config-settings", "-C", "--global-option", "--src", "--cache-dir",
                 "--timeout", "--retries", "--log", "--proxy", "--python", "--exists-action"}
FLAG_OPTIONS = {"--no-cache-dir", "--upgrade", "-U", "--no-deps", "--no-build-isolation", "--pre", "-q",
                "--quiet", "-v", "--verbose", "--user", "--dry-run", "--ignore-installed", "-I",
                "--force-reinstall", "--no-index", "--isolated", "--require-hashes", "--no-warn-script-location",
                "--disable-pip-version-check", "--break-system-packages", "--no-compile", "--compile",
                "--use-pep517", "--no-use-pep517", "--prefer-binary", "--no-clean", "--root-user-action"}
SEPARATORS = {"&&", "||", ";", "|", "&", "(", ")", ";;"}
KEYWORDS = {"if", "then", "else", "elif", "fi", "do", "done", "while", "until", "!", "{", "}", "exec"}
ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")


@dataclass
class PipInstall:
    """One `pip install` command: the pip it runs (so the environment), its options and targets."""

    pip: str
    line: str
    options: list[str] = field(default_factory=list)
    requirements: list[str] = field(default_factory=list)
    paths: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    @property
    def environment(self) -> str | None:
        """NAME for /opt/envs/NAME/bin/pip, else None (a system pip)."""
        m = re.match(r"^/opt/envs/([^/]+)/bin/pip3?$", self.pip)
        return m.group(1) if m else None

    def option(self, name: str) -> list[str]:
        """Every value given to option `name`, in order."""
        values = []
        for i, word in enumerate(self.options):
            if word == name and i + 1 < len(self.options):
                values.append(self.options[i + 1])
            elif word.startswith(name + "="):
                values.append(word.split("=", 1)[1])
        return values


def logical_lines(script: str) -> list[str]:
    """Shell lines with backslash-newline continuations joined (what the shell reads as one)."""
    return [line.strip() for line in script.replace("\\\n", " ").splitlines() if line.strip()]


def simple_commands(line: str) -> list[list[str]]:
    """The words of each simple command on a shell line, assignments and keywords in front dropped."""
    lexer = shlex.shlex(line, posix=True, punctuation_chars=";&|()")
    lexer.whitespace_split = True
    lexer.commenters = "#"
    commands: list[list[str]] = [[]]
    for token in lexer:  # raises ValueError on an unbalanced quote
        if token in SEPARATORS:
            commands.append([])
        else:
            commands[-1].append(token)
    out = []
    for words in commands:
        while words and (words[0] in KEYWORDS or ASSIGNMENT.match(words[0])):
            words = words[1:]
        if words:
            out.append(words)
    return out


def _is_pip(word: str) -> bool:
    return word.rsplit("/", 1)[-1] in ("pip", "pip3")


def parse_install(words: list[str], line: str) -> PipInstall:
    """Classify the words after `pip install`: options (with their values), paths, requirements."""
    from packaging.requirements import InvalidRequirement, Requirement

    cmd = PipInstall(pip=words[0], line=line)
    args = words[2:]
    i = 0
    while i < len(args):
        word = args[i]
        if word.startswith("-"):
            name = word.split("=", 1)[0]
            if name in VALUE_OPTIONS and "=" not in word:
                cmd.options += args[i:i + 2]
                i += 2
                continue
            if name not in VALUE_OPTIONS and name not in FLAG_OPTIONS:
                cmd.problems.append(f"unknown pip install option {word!r}")
            cmd.options.append(word)
        elif word.startswith(("/", "./", "../")) or word.endswith((".whl", ".tar.gz", ".zip")):
            cmd.paths.append(word)
        else:
            try:
                Requirement(word)
            except InvalidRequirement as exc:
                cmd.problems.append(f"{word!r} is not a requirement pip accepts ({str(exc).splitlines()[0]})")
            else:
                cmd.requirements.append(word)
        i += 1
    if not (cmd.requirements or cmd.paths or cmd.option("-r") or cmd.option("--requirement")):
        cmd.problems.append("pip install with nothing to install")
    return cmd


def pip_installs(script: str) -> list[PipInstall]:
    """Every `pip install` in a shell script (a %post body, a Dockerfile's RUN lines)."""
    found = []
    for line in logical_lines(script):
        if "pip" not in line:
            continue
        try:
            commands = simple_commands(line)
        except ValueError as exc:
            found.append(PipInstall(pip="?", line=line, problems=[f"the shell cannot split this line: {exc}"]))
            continue
        for words in commands:
            if len(words) >= 2 and _is_pip(words[0]) and words[1] == "install":
                found.append(parse_install(words, line))
            elif any(_is_pip(w) for w in words[1:]) and words[0] not in ("python3", "python", "echo", "ls", "test"):
                # a pip path as an argument of another command: a glued line
                found.append(PipInstall(pip="?", line=line, problems=[
                    f"a pip command is an argument of {words[0]!r}: two commands on one line?"]))
    return found


def definition_problems(install_lines: list[str]) -> list[str]:
    """One line per problem in the `pip install` commands of a definition's %post or RUN lines."""
    out = []
    for cmd in pip_installs("\n".join(install_lines)):
        out += [f"{p}: {cmd.line[:160]}" for p in cmd.problems]
    return out
