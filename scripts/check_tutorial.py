#!/usr/bin/python3
"""make test-tutorial: run every command of a tutorial page and check every number it quotes.

The markup (docs/TUTORIAL.md, "How the checks work"):

  ```sh                       a command block: each line that is not blank or a '#'
  build/schedule --list       comment is run from the repository root with bash and must
  ```                         exit 0.

  27 <!-- check: CMD | json latency -->
                              the number just before the comment must be what CMD prints:
                              `json PATH` reads the last stdout line as JSON (PATH: keys and
                              [i] indices, e.g. ops[0].nnz, busy_ms[1]); `re REGEX` takes the
                              first group of REGEX in stdout. A quoted number with d decimals
                              must equal the value rounded to d decimals.

Nothing is skipped: a command for a scheme this build lacks fails like any other.

Commands run with BUILD's programs (build/ is replaced by $BUILD/ when BUILD differs) and
with Open MPI allowed to run as root and to oversubscribe. Exit status 1 on any failure."""
import json
import os
import re
import subprocess
import sys

BUILD = os.environ.get("BUILD", "build")
ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
           OMPI_MCA_rmaps_base_oversubscribe="1", OPENBLAS_NUM_THREADS="1")
cache = {}
failures, checks, commands = [], [], []

CHECK = re.compile(r"([-+]?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?)\s*(?:\*\*)?\s*<!--\s*check:\s*(.*?)\s*-->", re.S)
ANY_CHECK = re.compile(r"(?<!`)<!--\s*check:(.*?)-->", re.S)   # not the markup quoted in `code`


def fix(cmd):
    return re.sub(r"(^|[\s;|&(])build/", lambda m: m.group(1) + BUILD + "/", cmd) if BUILD != "build" else cmd


def run(cmd):
    if cmd not in cache:
        p = subprocess.run(["bash", "-o", "pipefail", "-c", fix(cmd)], capture_output=True, text=True, env=ENV,
                           timeout=300)
        cache[cmd] = p
    return cache[cmd]


def select(out, sel):
    kind, _, arg = sel.strip().partition(" ")
    if kind == "json":
        v = json.loads(out.strip().splitlines()[-1])
        for key, idx in re.findall(r"([^.\[\]]+)|\[(\d+)\]", arg.strip()):
            v = v[int(idx)] if idx else v[key]
        return float(v)
    if kind == "re":
        m = re.search(arg.strip(), out)
        if not m:
            raise ValueError("no match for %s" % arg.strip())
        return float(m.group(1))
    raise ValueError("unknown selector %r (expected json PATH or re REGEX)" % kind)


def matches(quoted, value):
    d = len(quoted.split(".")[1]) if "." in quoted and "e" not in quoted.lower() else 0
    return abs(float(quoted) - value) <= 0.5 * 10 ** -d + 1e-9 * max(1.0, abs(value))


def line_of(text, pos):
    return text.count("\n", 0, pos) + 1


def main(path):
    text = open(path, encoding="utf-8").read()
    # command blocks
    for m in re.finditer(r"```sh\n(.*?)```", text, re.S):
        for k, cmd in enumerate(m.group(1).splitlines()):
            cmd = cmd.strip()
            if not cmd or cmd.startswith("#"):
                continue
            where = "%s:%d" % (path, line_of(text, m.start()) + 1 + k)
            p = run(cmd)
            commands.append(cmd)
            if p.returncode != 0:
                failures.append("%s: `%s` exited %d: %s" % (where, cmd, p.returncode, p.stderr.strip()[-300:]))
    # quoted numbers
    found = 0
    for m in CHECK.finditer(text):
        found += 1
        quoted, body = m.group(1), m.group(2)
        parts = [s.strip() for s in body.split("|")]
        where = "%s:%d" % (path, line_of(text, m.start()))
        if len(parts) < 2:
            failures.append("%s: check %r: expected `CMD | json PATH` or `CMD | re REGEX`" % (where, body))
            continue
        cmd, sel = " | ".join(parts[:-1]), parts[-1]
        p = run(cmd)
        if p.returncode != 0:
            failures.append("%s: `%s` exited %d: %s" % (where, cmd, p.returncode, p.stderr.strip()[-300:]))
            continue
        try:
            value = select(p.stdout, sel)
        except (ValueError, KeyError, IndexError, TypeError) as e:
            failures.append("%s: %s in the output of `%s`: %s" % (where, sel, cmd, e))
            continue
        checks.append(where)
        if not matches(quoted, value):
            failures.append("%s: the text says %s, `%s` gives %s = %.10g" % (where, quoted, cmd, sel, value))
    if found != len(ANY_CHECK.findall(text)):
        failures.append("%s: %d check comments follow no number" % (path, len(ANY_CHECK.findall(text)) - found))
    for f in failures:
        print("FAIL " + f)
    print("tutorial: %d commands run, %d quoted numbers checked, %d failures" %
          (len(set(commands)), len(checks), len(failures)))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "docs/TUTORIAL.md"))
