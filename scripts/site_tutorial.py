#!/usr/bin/python3
"""docs/TUTORIAL.md as the teaching page's TUTORIAL.html (make site), so the page's links
open it in the browser with its lesson anchors (a static server sends .md as a download).
Only what the tutorial uses: headings, fenced code, paragraphs, inline code, bold, links,
and the HTML it already holds (anchors, the check comments). Standard library only.
Usage: site_tutorial.py docs/TUTORIAL.md OUT.html"""
import html
import re
import sys


def inline(text):
    parts = re.split(r"(`[^`]*`|<!--.*?-->|<a id=\"[^\"]*\"></a>)", text, flags=re.S)
    out = []
    for p in parts:
        if p.startswith("`") and p.endswith("`") and len(p) > 1:
            out.append("<code>%s</code>" % html.escape(p[1:-1]))
        elif p.startswith("<!--") or p.startswith("<a id="):
            out.append(p)
        else:
            p = html.escape(p, quote=False)
            p = re.sub(r"\*\*(.+?)\*\*", r"<strong>\1</strong>", p)
            p = re.sub(r"!\[([^\]]*)\]\(([^)]*)\)", r'<img alt="\1" src="\2">', p)
            p = re.sub(r"\[([^\]]+)\]\(([^)]+)\)", lambda m: '<a href="%s">%s</a>' % (
                m.group(2).replace(".md", ".html") if m.group(2).startswith("TUTORIAL") else m.group(2), m.group(1)), p)
            out.append(p)
    return "".join(out)


def convert(md):
    body, para, lines = [], [], md.split("\n")
    i = 0

    def flush():
        if para:
            body.append("<p>%s</p>" % inline("\n".join(para)))
            para.clear()
    while i < len(lines):
        line = lines[i]
        if line.startswith("```"):
            flush()
            j = i + 1
            while j < len(lines) and not lines[j].startswith("```"):
                j += 1
            body.append("<pre><code>%s</code></pre>" % html.escape("\n".join(lines[i + 1:j])))
            i = j + 1
            continue
        m = re.match(r"(#{1,6}) (.*)", line)
        if m:
            flush()
            slug = re.sub(r"[^a-z0-9]+", "-", m.group(2).lower()).strip("-")   # "#the-page" links
            body.append('<h%d id="%s">%s</h%d>' % (len(m.group(1)), slug, inline(m.group(2)), len(m.group(1))))
        elif not line.strip():
            flush()
        elif line.startswith("    ") and not para:
            body.append("<pre><code>%s</code></pre>" % html.escape(line[4:]))
        else:
            para.append(line)
        i += 1
    flush()
    return body


def main(src, dst):
    body = convert(open(src, encoding="utf-8").read())
    page = ('<!doctype html>\n<html lang="en"><head><meta charset="utf-8">'
            '<meta name="viewport" content="width=device-width, initial-scale=1">'
            '<link rel="icon" href="data:,"><title>Back-propagation scheduling, hands on</title>'
            '<link rel="stylesheet" href="style.css"></head>\n<body><main class="tutorial">'
            '<p><a href="index.html">← the page</a></p>\n%s\n</main></body></html>\n' % "\n".join(body))
    open(dst, "w", encoding="utf-8").write(page)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
