#!/usr/bin/env python3
"""Reports C++ functions longer than a limit (issue 33: none over 120 lines
outside tests/). scripts/test.sh runs it over the tracked sources.

    scripts/check_function_length.py [--max-lines N] FILE...

Prints FILE:LINE: N lines: HEAD for each function body longer than N lines
(default 120), counted from the line of its opening brace to that of its
closing one, and exits 1 if there was any.

A heuristic, not a parser: comments, string and character literals (raw
strings too) are blanked out, then braces are matched. A brace opens a
function body when the text before it, back to the previous ';', '{' or '}',
ends like a function head: a ')' followed only by qualifiers (const,
noexcept, override, final, mutable), a trailing return type or a
constructor's member initialisers; and does not start with namespace, class,
struct, enum or union, nor end in '=' (a brace initialiser). Braces inside a
function body (blocks, lambdas, local classes) count towards that function,
never as functions of their own. Macros that open braces, or heads with
odd shapes, can fool it; it reports what it sees so that a person can look.
"""
import argparse
import re
import sys

# What may follow a function head's closing ')' before its body's '{'.
_FUNCTION_HEAD_END = re.compile(
    r"\)\s*("
    r"const|noexcept|override|final|mutable|\s"
    r"|->\s*[\w:<>,\s*&]+"  # trailing return type
    r"|:\s*[\w:]+\s*[\(\{].*"  # constructor's member initialisers
    r")*$",
    re.S,
)
_NOT_A_FUNCTION = re.compile(r"(namespace|class|struct|enum|union)\b")
_RAW_STRING_START = re.compile(r'R"([^(\s\\]{0,16})\(')


def strip_literals(src):
    """Returns src with comments and the contents of string and character
    literals removed, keeping every newline so that line numbers hold."""
    out = []
    i, n = 0, len(src)
    while i < n:
        c = src[i]
        if src.startswith("//", i):
            j = src.find("\n", i)
            i = n if j < 0 else j
            continue
        if src.startswith("/*", i):
            j = src.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append("\n" * src.count("\n", i, j))
            i = j
            continue
        if c == "R":
            m = _RAW_STRING_START.match(src, i)
            prev = src[i - 1] if i > 0 else " "
            if m and (not (prev.isalnum() or prev == "_") or prev in "8uUL"):  # u8R"(...)"
                end = ")" + m.group(1) + '"'
                j = src.find(end, m.end())
                j = n if j < 0 else j + len(end)
                out.append('""' + "\n" * src.count("\n", i, j))
                i = j
                continue
        if c == "'" and i > 0 and src[i - 1].isalnum() and i + 1 < n and src[i + 1].isalnum():
            i += 1  # a digit separator: 50'000'000
            continue
        if c in "\"'":
            j = i + 1
            while j < n and src[j] != c and src[j] != "\n":
                j += 2 if src[j] == "\\" else 1
            out.append(c + c)
            i = j if j < n and src[j] == "\n" else j + 1  # unterminated: keep the newline
            continue
        out.append(c)
        i += 1
    return "".join(out)


def long_functions(path, max_lines):
    """Yields (line, length, head) for each function in path over max_lines."""
    with open(path, encoding="utf-8", errors="replace") as f:
        text = strip_literals(f.read())
    stack = []  # per open brace: (is_function, line, head)
    line = 1
    for i, c in enumerate(text):
        if c == "\n":
            line += 1
        elif c == "{":
            before = text[max(0, i - 400) : i]
            start = max(before.rfind(";"), before.rfind("{"), before.rfind("}"))
            head = before[start + 1 :].strip()
            in_function = any(is_fn for is_fn, _, _ in stack)
            is_function = (
                not in_function
                and _FUNCTION_HEAD_END.search(head) is not None
                and not _NOT_A_FUNCTION.match(head)
                and not re.search(r"=\s*$", head)
            )
            stack.append((is_function, line, " ".join(head.split())[:80]))
        elif c == "}" and stack:
            is_function, first, head = stack.pop()
            length = line - first + 1
            if is_function and length > max_lines:
                yield first, length, head


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--max-lines", type=int, default=120)
    parser.add_argument("files", nargs="+")
    args = parser.parse_args()
    found = 0
    for path in args.files:
        for first, length, head in long_functions(path, args.max_lines):
            print(f"{path}:{first}: {length} lines: {head}")
            found += 1
    if found:
        print(f"function length: {found} function(s) over {args.max_lines} lines; split them")
        return 1
    print(f"function length: none over {args.max_lines} lines in {len(args.files)} file(s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
