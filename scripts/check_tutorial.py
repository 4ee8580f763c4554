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

Every other number in a lesson's prose must be one of the arguments of that lesson's
commands (`--stages 4`: "4 stages"); numbers in `code` (formulas, output lines quoted as
they print) and lesson references ("lesson 3") are left alone. So a number written into a
sentence without a check ("100 links of 20×20") fails.

Nothing is skipped: a command for a scheme this build lacks fails like any other.

Commands run as a student runs them: with bash from the repository root, build/ replaced by
$BUILD/ when BUILD differs, and an environment of PATH, HOME, USER, LANG and the like only
(no OMPI_*, OPENBLAS_*, SCANPROP_*: a lesson that needs one must show it). Run as root, the
page is then checked a second time as an unprivileged user (nobody, with runuser or
setpriv) in a scratch folder that holds copies of the programs, so that every command also
works without root. Exit status 1 on any failure."""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

BUILD = os.environ.get("BUILD", "build")
KEEP = ("PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "LANGUAGE", "TERM", "TMPDIR", "TZ")
ENV = {k: v for k, v in os.environ.items() if k in KEEP or k.startswith("LC_")}
cache = {}
failures, checks, commands = [], [], []

NUM = r"[-+]?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?"
CHECK = re.compile(r"(" + NUM + r")\s*(?:\*\*)?\s*<!--\s*check:\s*(.*?)\s*-->", re.S)
ANY_CHECK = re.compile(r"(?<!`)<!--\s*check:(.*?)-->", re.S)   # not the markup quoted in `code`
PROSE_NUM = re.compile(r"(?<![\w.\-/])\d+(?:\.\d+)?(?![\w])")


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


def blank(text, pattern, flags=0):
    """text with every match of pattern replaced by spaces (positions and lines kept)."""
    return re.sub(pattern, lambda m: re.sub(r"[^\n]", " ", m.group(0)), text, flags=flags)


def prose_numbers(path, text):
    """Every number of a lesson's prose that is neither checked nor an argument of the
    lesson's commands (see the module's docstring)."""
    checked = {m.start(1) for m in CHECK.finditer(text)}
    start = text.find("\n## Lesson 1")
    end = text.find("\n## How the checks work")
    if start < 0 or end < 0:
        return ["%s: no '## Lesson 1' … '## How the checks work' section to read" % path]
    bad = []
    lessons = [m.start() for m in re.finditer(r"\n## Lesson \d+", text)] + [end]
    for a, b in zip(lessons, lessons[1:]):
        part = text[a:b]
        args = set()
        for m in re.finditer(r"```sh\n(.*?)```", part, re.S):
            args.update(re.findall(r"(?<![\w.])\d+(?:\.\d+)?", m.group(1)))
        masked = blank(part, r"```.*?```", re.S)
        masked = blank(masked, r"<!--.*?-->", re.S)
        masked = blank(masked, r"`[^`\n]*`")
        masked = blank(masked, r"^#.*$", re.M)                          # headings
        masked = blank(masked, r"<a id=[^>]*>")
        masked = blank(masked, r"\]\([^)]*\)")                          # link targets
        masked = blank(masked, r"[Ll]essons? \d+(?:\s*(?:[–,-]|and)\s*\d+)*")
        masked = blank(masked, r"(?:ICLR|MLSys|EuroSys|NeurIPS|ICML) \d{4}")
        for m in PROSE_NUM.finditer(masked):
            if a + m.start() in checked or m.group(0) in args:
                continue
            bad.append("%s:%d: the number %s is neither checked (<!-- check: … -->) nor an argument of the "
                       "lesson's commands" % (path, line_of(text, a + m.start()), m.group(0)))
    return bad


def check_page(path):
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
    failures.extend(prose_numbers(path, text))


def as_user(path):
    """Run this script on the page again as nobody, in a scratch folder that holds copies of
    BUILD's programs, site/profiles, the page and this script (nobody may not be able to
    read the checkout, and the lessons write under build/). Returns (exit status, what it
    printed)."""
    if shutil.which("runuser"):
        drop = ["runuser", "-u", "nobody", "--"]
    elif shutil.which("setpriv"):
        drop = ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups", "--"]
    else:
        return 1, "neither runuser nor setpriv: cannot run the lessons as an unprivileged user"
    scratch = tempfile.mkdtemp(prefix="scanprop-tutorial-")
    try:
        os.mkdir(os.path.join(scratch, "build"))
        for name in os.listdir(BUILD):
            f = os.path.join(BUILD, name)
            if os.path.isfile(f) and os.access(f, os.X_OK):
                shutil.copy2(f, os.path.join(scratch, "build", name))
        shutil.copytree("site/profiles", os.path.join(scratch, "site", "profiles"))
        os.mkdir(os.path.join(scratch, "docs"))
        page = os.path.join("docs", os.path.basename(path))
        shutil.copy2(path, os.path.join(scratch, page))
        shutil.copy2(os.path.abspath(__file__), os.path.join(scratch, "check_tutorial.py"))
        for d, dirs, files in os.walk(scratch):
            for name in [d] + [os.path.join(d, x) for x in dirs + files]:
                shutil.chown(name, "nobody")
        env = dict(ENV, HOME=scratch, USER="nobody", LOGNAME="nobody")
        p = subprocess.run(drop + ["/usr/bin/python3", "check_tutorial.py", "--no-user-pass", page],
                           cwd=scratch, env=env, capture_output=True, text=True, timeout=1200)
        return p.returncode, (p.stdout + p.stderr).strip()
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def main(argv):
    user_pass = "--no-user-pass" not in argv
    args = [a for a in argv if a != "--no-user-pass"]
    path = args[0] if args else "docs/TUTORIAL.md"
    check_page(path)
    for f in failures:
        print("FAIL " + f)
    who = "as root" if os.geteuid() == 0 else "as %s" % os.environ.get("USER", "uid %d" % os.geteuid())
    print("tutorial (%s): %d commands run, %d quoted numbers checked, %d failures" %
          (who, len(set(commands)), len(checks), len(failures)))
    st = 1 if failures else 0
    if user_pass and os.geteuid() == 0:
        rc, out = as_user(path)
        print(out)
        st |= 1 if rc else 0
    return st


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
