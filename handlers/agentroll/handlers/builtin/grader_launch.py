"""How a grader's own Python process starts: isolated from everything it grades.

`python -I` (isolated mode): neither the script's folder nor the working directory is on the
import path, so no file beside the graded code (a solution saved as `json.py`, a `secrets.py`
in the server's working directory) can stand in for a module the grader imports; no
`PYTHON*` environment variable (`PYTHONPATH`, `PYTHONSTARTUP`...) and no user site-packages
take part either. The grader then takes its report channel (a duplicate of its stdout)
before it imports or runs anything it grades.

Two ways to name the program: a grader-owned file outside every directory graded code can
write (`isolated_script`: the math workers, from the installed package on the host), or its
source on the command line (`isolated_source`: the `code` runner, in a sandbox where every
writable folder is the solution's too, so no file of the grader exists there at all).
"""

from collections.abc import Sequence

ISOLATED = "-I"


def isolated_script(python: str, script: str, args: Sequence[str] = ()) -> list[str]:
    """argv that runs the file `script` in an isolated interpreter."""
    return [python, ISOLATED, script, *args]


def isolated_source(python: str, source: str, args: Sequence[str] = ()) -> list[str]:
    """argv that runs the program text `source` in an isolated interpreter."""
    return [python, ISOLATED, "-c", source, *args]
