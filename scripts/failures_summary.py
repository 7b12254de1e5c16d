"""Each failed or errored test of a pytest JUnit XML report, with the error lines of its report.

test.sh prints it for each pass after the passes beside the main one, so that the tail of a CI log (what a
reviewer of a failed run sees first) names each failure and its cause, not only its count."""
from __future__ import annotations

import sys
import xml.etree.ElementTree as ET

LINES_PER_FAILURE = 60


def main(path: str, label: str = "the main pass") -> int:
    failures = []
    for case in ET.parse(path).getroot().iter("testcase"):
        for outcome in case:
            if outcome.tag in ("failure", "error"):
                name = f"{case.get('classname', '').replace('.', '/')}.py::{case.get('name')}"
                failures.append((outcome.tag, name, outcome.text or outcome.get("message") or ""))
    if not failures:
        return 0
    print(f"=== {label}: {len(failures)} failed, each with its last {LINES_PER_FAILURE} error lines ===")
    for tag, name, text in failures:
        # pytest's "E" lines: every exception of a chain (a cause before what wrapped it)
        lines = [line for line in text.splitlines() if line.startswith("E ")] or text.splitlines()
        print(f"--- {tag}: {name}")
        print("\n".join(lines[-LINES_PER_FAILURE:]))
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:3]))
