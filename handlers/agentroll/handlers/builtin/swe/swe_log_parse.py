"""The worker that runs one official `swebench` log parser: a JSON request on stdin
({"parser", "log", "instance_id", "repo", "version"}), {"statuses": {...}} on stdout, or
{"unavailable": "..."} when the package or the parser is missing here. `swe_log.parse`
starts it, bounds it and kills it: the parsers are regular expressions over output the
policy wrote, so they run here, never in the server. A parser that fails on the output
answers {"parser_failed": "..."} (the output's doing); a worker that dies before it answers
is not the output's doing. The address space is capped before the package is imported."""

import json
import resource
import sys

from agentroll.handlers.builtin.swe import swe_official

MEMORY_LIMIT_BYTES = 2 << 30


def main() -> int:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT_BYTES, MEMORY_LIMIT_BYTES))
    request = json.loads(sys.stdin.read())
    try:
        parse = swe_official.parser(request["parser"])
    except swe_official.OfficialPackageMissing as exc:
        json.dump({"unavailable": str(exc)}, sys.stdout)
        return 0
    except KeyError:
        json.dump({"unavailable": f"swebench has no parser {request['parser']!r}"}, sys.stdout)
        return 0
    try:
        statuses = swe_official.parse_log(
            parse,
            request["log"],
            instance_id=request["instance_id"],
            repo=request["repo"],
            version=request["version"],
        )
    except Exception as exc:  # the parser's own failure on this output, whatever it raises
        json.dump({"parser_failed": repr(exc)[-500:]}, sys.stdout)
        return 0
    json.dump({"statuses": statuses}, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
