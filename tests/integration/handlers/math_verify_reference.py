"""math-verify's own verdicts, called directly: the reference for the differential test.

Reads `{"gold", "predicted"}` JSON lines on stdin and answers each with `{"equal": bool,
"gold_parsed": bool}` on stdout. math-verify's own (signal-based) timeouts are on and
generous; a pair that still times out is "not equal", which is math-verify's own answer.
The address-space cap only keeps a pathological pair from taking the test machine down.
"""

import json
import logging
import resource
import sys

from math_verify import parse, verify

TIMEOUT_S = 10
MEMORY_LIMIT_BYTES = 4 << 30


def main() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT_BYTES, MEMORY_LIMIT_BYTES))
    logging.getLogger("math_verify").setLevel(logging.CRITICAL)  # one line per timeout
    for line in sys.stdin:
        pair = json.loads(line)
        gold = parse(f"${pair['gold']}$", parsing_timeout=TIMEOUT_S)
        predicted = parse(f"${pair['predicted']}$", parsing_timeout=TIMEOUT_S)
        equal = bool(gold and predicted and verify(gold, predicted, timeout_seconds=TIMEOUT_S))
        print(json.dumps({"equal": equal, "gold_parsed": bool(gold)}), flush=True)


if __name__ == "__main__":
    main()
