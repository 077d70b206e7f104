"""A worker process: runs batches of cases and answers one JSON line per case, in order.

Protocol (stdin/stdout, one JSON object per line): the runner sends ``{"device", "plugins",
"prefer", "exclude", "demo_epochs"}``, the worker answers ``{"ready": true}``; then the runner sends
``{"ids": [...]}`` and reads one result per id.  A case that kills the process (a segfaulting
kernel) or never answers is judged by the runner, which starts a new worker for the rest.
Anything else written to stdout (a chatty kernel) is diverted to stderr, the worker's log.
"""

from __future__ import annotations

import contextlib
import faulthandler
import json
import os
import sys
import warnings


def main() -> None:
    protocol = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    faulthandler.enable(sys.stderr)
    warnings.simplefilter("ignore")
    init = json.loads(sys.stdin.readline())
    from ember_conformance import plugin_loader

    plugin_loader.register_all(init["plugins"])
    import ember_core as em
    from ember_conformance.cases import group_samples
    from ember_conformance.execute import parse_case_id, run_sample

    with contextlib.ExitStack() as stack:
        if init["prefer"] or init["exclude"]:
            stack.enter_context(em.providers(prefer=init["prefer"], exclude=init["exclude"]))
        stack.enter_context(em.fallback_policy("allow"))
        protocol.write(json.dumps({"ready": True}) + "\n")
        for line in sys.stdin:
            for case in json.loads(line)["ids"]:
                level, op, dtype, name = parse_case_id(case)
                samples = {s.name: s for s in group_samples(level, op, dtype, init["device"], init["demo_epochs"])}
                print(f"--- {case}", file=sys.stderr, flush=True)
                result = run_sample(level, op, dtype, samples[name], init["device"])
                protocol.write(json.dumps(result.to_json(), default=str) + "\n")


if __name__ == "__main__":
    main()
