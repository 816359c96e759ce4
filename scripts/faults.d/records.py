#!/usr/bin/env python3
"""Reads a fenzi audit log (JSON Lines) for scripts/faults.

    records.py seq LOG PORT                 the records naming PORT, one token each, space-separated:
                                            METHOD=decision[/reason][@tool][<source]
    records.py count LOG PORT DECISION      how many records naming PORT have that decision
    records.py lines LOG                    complete lines in the log (a torn last line not counted)
    records.py torn LOG                     `torn` when the file ends inside a line, else `whole`
    records.py pad LOG PAGE END            the path length that makes the next record (a request like
                                            the last one, on another path) end END bytes into a page,
                                            and the length of such a record less its path

A line that is not JSON (a torn write) becomes the token `<torn>`.
`pad` lets scripts/faults place records against a tmpfs's page boundaries: a full tmpfs still has
the rest of the log's last page, so where the next record ends decides whether it fits there, or is
cut at the page end by ENOSPC.
"""

import json
import sys


def records(path: str):
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        return
    for line in data.split(b"\n"):
        if not line:
            continue
        try:
            yield json.loads(line)
        except ValueError:
            yield None


def token(r) -> str:
    if r is None:
        return "<torn>"
    t = f"{r.get('method')}={r.get('decision')}"
    if r.get("reason"):
        t += "/" + r["reason"]
    if r.get("tool"):
        t += "@" + r["tool"]
    if r.get("source"):
        t += "<" + r["source"]
    return t


def main() -> int:
    args = sys.argv[1:]
    cmd, log = args[0], args[1]
    if cmd == "seq":
        port = int(args[2])
        print(" ".join(token(r) for r in records(log) if r is None or r.get("port") == port))
    elif cmd == "count":
        port, decision = int(args[2]), args[3]
        print(sum(1 for r in records(log) if r and r.get("port") == port and r.get("decision") == decision))
    elif cmd == "lines":
        try:
            with open(log, "rb") as f:
                print(f.read().count(b"\n"))
        except FileNotFoundError:
            print(0)
    elif cmd == "torn":
        with open(log, "rb") as f:
            data = f.read()
        print("torn" if data and not data.endswith(b"\n") else "whole")
    elif cmd == "pad":
        page, end = int(args[2]), int(args[3])
        with open(log, "rb") as f:
            data = f.read()
        last = data.rstrip(b"\n").rsplit(b"\n", 1)[-1]
        path = json.loads(last)["path"]
        base = len(last) + 1 - len(path.encode())  # the line and its newline, less its path
        want = (end - len(data) - base) % page  # the path length putting the end there
        while want < 64:  # room for the path's prefix
            want += page
        print(want, base)
    else:
        print(__doc__, file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
