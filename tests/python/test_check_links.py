"""scripts/check_links.py, the suite's documentation check (ctest doc_links), on small
trees made here: each kind of broken link is reported with its file and line and
makes the check fail; a tree whose links all hold passes."""
import os
import subprocess
import sys

import pytest

SCRIPT = os.path.join(os.path.dirname(__file__), "..", "..", "scripts", "check_links.py")

GOOD_README = """# demo

See [the loader](docs/loader.md), its [resume](docs/loader.md#resume-exact-and-elastic),
[options][opts] and ![a plot](docs/plot.svg); [this page](#install) and
[the web](https://example.org/missing.md) too. `[code](nowhere.md)` is code.

## Install

```sh
echo "[not a link](nowhere.md)"
```

[opts]: docs/loader.md#options
"""

GOOD_LOADER = """# The loader

## Options

## Resume: exact, and elastic

## Options

Back to the [front page](../README.md#demo), the second
[options](#options-1) and <a href="../README.md">the README</a>.
"""


def make_tree(tmp_path, readme=GOOD_README, loader=GOOD_LOADER):
    (tmp_path / "docs").mkdir()
    (tmp_path / "README.md").write_text(readme)
    (tmp_path / "docs" / "loader.md").write_text(loader)
    (tmp_path / "docs" / "plot.svg").write_text("<svg/>")
    return tmp_path


def run(root, *args):
    p = subprocess.run([sys.executable, SCRIPT, str(root)] + list(args), stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, universal_newlines=True)
    return p.returncode, p.stdout


def test_a_tree_whose_links_hold_passes(tmp_path):
    code, out = run(make_tree(tmp_path))
    assert code == 0, out
    assert "2 markdown files, 0 problem(s)" in out


@pytest.mark.parametrize("old,new,expected", [
    ("(docs/loader.md)", "(docs/loaders.md)", "README.md:3: docs/loaders.md: no such file docs/loaders.md"),
    ("(docs/plot.svg)", "(docs/plot.png)", "README.md:4: docs/plot.png: no such file docs/plot.png"),
    ("#resume-exact-and-elastic", "#resume", "README.md:3: docs/loader.md#resume: no heading in docs/loader.md"),
    ("(#install)", "(#installing)", "README.md:4: #installing: no heading in README.md"),
    ("[opts]: docs/loader.md#options", "[opts]: docs/loader.md#option", "README.md:13: docs/loader.md#option:"),
])
def test_a_broken_link_in_the_readme_fails_naming_it(tmp_path, old, new, expected):
    assert old in GOOD_README
    code, out = run(make_tree(tmp_path, readme=GOOD_README.replace(old, new)))
    assert code == 1, out
    assert expected in out
    assert "1 problem(s)" in out


@pytest.mark.parametrize("old,new,expected", [
    ("(../README.md#demo)", "(../README.md#demos)", "docs/loader.md:9: ../README.md#demos: no heading"),
    ("(#options-1)", "(#options-2)", "docs/loader.md:10: #options-2: no heading in docs/loader.md"),
    ('href="../README.md"', 'href="README.md"', "docs/loader.md:10: README.md: no such file docs/README.md"),
])
def test_a_broken_link_in_docs_fails_naming_it(tmp_path, old, new, expected):
    code, out = run(make_tree(tmp_path, loader=GOOD_LOADER.replace(old, new)))
    assert code == 1, out
    assert expected in out


def test_a_readme_over_the_limit_is_not_a_front_page(tmp_path):
    root = make_tree(tmp_path, readme=GOOD_README + "\n" * 300)
    code, out = run(root)
    assert code == 1, out
    assert "README.md: 313 lines, over 300" in out
    assert run(root, "--max-readme-lines", "400")[0] == 0

