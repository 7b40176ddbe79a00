#!/usr/bin/env python3
"""Checks the documentation's links: README.md and docs/**/*.md.

Every relative link and image ([text](path), ![alt](path), [ref]: path, and
HTML href/src) must name a file or folder that exists, and every #anchor into
a markdown file must match one of its headings as GitHub makes anchors of them
(lowercase; punctuation but '-' and '_' dropped; spaces to '-'; a repeated
heading gets -1, -2, ...). Links in code blocks and code spans are not links.
README.md must stay a front page: at most --max-readme-lines lines.

Usage: check_links.py [ROOT] [--max-readme-lines N]
Prints one line per broken link (FILE:LINE: ...) and exits 1 if there is any,
2 on a usage error, 0 otherwise. Standard library only.
"""
import argparse
import os
import re
import sys
from urllib.parse import unquote

FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
HEADING = re.compile(r"^ {0,3}(#{1,6})[ \t]+(.*?)[ \t]*#*[ \t]*$")
CODE_SPAN = re.compile(r"(`+)(.+?)\1", re.S)
# [text](target "title") and ![alt](target): text may span lines and hold [brackets] once.
INLINE = re.compile(r"!?\[(?:[^\[\]]|\[[^\[\]]*\])*\]\(\s*<?([^)\s>]*)>?(?:\s+\"[^\"]*\")?\s*\)")
REFERENCE = re.compile(r"^ {0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+.*)?$", re.M)
HTML = re.compile(r"<(?:a|img)\b[^>]*?\b(?:href|src)\s*=\s*[\"']([^\"']*)[\"']", re.I)
HTML_ANCHOR = re.compile(r"<a\b[^>]*?\b(?:name|id)\s*=\s*[\"']([^\"']*)[\"']", re.I)
SCHEME = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")


def slug(heading):
    """GitHub's anchor for a heading's text."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link: its text
    text = re.sub(r"<[^>]+>", "", text)  # inline HTML tags
    text = re.sub(r"[^\w\- ]", "", text.lower())
    return text.replace(" ", "-")


def prose_lines(text):
    """The lines outside fenced code blocks, as (line number, line); code lines become ''."""
    out, fence = [], None
    for number, line in enumerate(text.split("\n"), 1):
        m = FENCE.match(line)
        if fence is None and m:
            fence = m.group(1)[0] * len(m.group(1))
            out.append((number, ""))
        elif fence is not None:
            if line.strip().startswith(fence) and set(line.strip()) <= set(fence[0]):
                fence = None
            out.append((number, ""))
        else:
            out.append((number, line))
    return out


def anchors(path, cache={}):
    """The anchors a markdown file defines: its headings' slugs and HTML name/id."""
    if path not in cache:
        with open(path, encoding="utf-8") as f:
            lines = prose_lines(f.read())
        found, seen = set(), {}
        for _, line in lines:
            m = HEADING.match(line)
            if m:
                base = slug(m.group(2))
                n = seen.get(base, 0)
                seen[base] = n + 1
                found.add(base if n == 0 else "%s-%d" % (base, n))
            found.update(HTML_ANCHOR.findall(line))
        cache[path] = found
    return cache[path]


def links(text):
    """(line number, target) of every link in a markdown text, code left out."""
    lines = prose_lines(text)
    prose = "\n".join(line for _, line in lines)
    # Code spans hold no links; blank them keeping offsets (and so line numbers).
    prose = CODE_SPAN.sub(lambda m: re.sub(r"[^\n]", " ", m.group(0)), prose)
    found = []
    for pattern in (INLINE, REFERENCE, HTML):
        for m in pattern.finditer(prose):
            found.append((prose.count("\n", 0, m.start(1)) + 1, m.group(1)))
    return sorted(found)


def check_file(path, root):
    """Problems with the links of one markdown file, as printable lines."""
    with open(path, encoding="utf-8") as f:
        text = f.read()
    problems = []
    where = os.path.relpath(path, root)
    for line, target in links(text):
        if not target or SCHEME.match(target) or target.startswith("//"):
            continue
        file_part, _, anchor = target.partition("#")
        file_part = unquote(file_part)
        if file_part.startswith("/"):
            dest = os.path.join(root, file_part.lstrip("/"))
        elif file_part:
            dest = os.path.normpath(os.path.join(os.path.dirname(path), file_part))
        else:
            dest = path
        if not os.path.exists(dest):
            problems.append("%s:%d: %s: no such file %s" % (where, line, target, os.path.relpath(dest, root)))
        elif anchor and dest.endswith(".md") and os.path.isfile(dest):
            if unquote(anchor).lower() not in anchors(dest):
                problems.append("%s:%d: %s: no heading in %s makes the anchor #%s" %
                                (where, line, target, os.path.relpath(dest, root), anchor))
    return problems


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("root", nargs="?", default=os.path.join(os.path.dirname(__file__), ".."))
    parser.add_argument("--max-readme-lines", type=int, default=300)
    args = parser.parse_args()
    root = os.path.abspath(args.root)
    readme = os.path.join(root, "README.md")
    if not os.path.isfile(readme):
        print("check_links: %s: no README.md" % root, file=sys.stderr)
        return 2
    files = [readme]
    for folder, dirs, names in os.walk(os.path.join(root, "docs")):
        dirs.sort()
        files += [os.path.join(folder, n) for n in sorted(names) if n.endswith(".md")]
    problems = []
    for path in files:
        problems += check_file(path, root)
    with open(readme, encoding="utf-8") as f:
        readme_lines = len(f.read().splitlines())
    if readme_lines > args.max_readme_lines:
        problems.append("README.md: %d lines, over %d: it is the front page; move detail into docs/" %
                        (readme_lines, args.max_readme_lines))
    for p in problems:
        print(p)
    print("check_links: %d markdown files, %d problem(s)" % (len(files), len(problems)))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
