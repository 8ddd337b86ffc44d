"""Every code example in sdk/ compiles as written (issue #17 item 10): the
```cpp / ```c blocks of sdk/*.md and the examples in the SDK headers'
leading comments (indented lines). A block that is a whole translation unit
is compiled as one; a block of statements (the testing snippet) is compiled
inside main(), its #include and using lines hoisted; a block with main() is
linked too. The ```python blocks must parse and the ```yaml blocks load."""
import re
import subprocess
from pathlib import Path

import pytest
import yaml

from conftest import SOURCE

SDK = SOURCE / "sdk"
INCLUDE = SDK / "include"


def markdown_blocks():
    for md in sorted(SDK.rglob("*.md")):
        text = md.read_text()
        for m in re.finditer(r"^```(\w+)\n(.*?)^```", text, re.S | re.M):
            line = text.count("\n", 0, m.start()) + 1
            yield f"{md.relative_to(SOURCE)}:{line}", m.group(1), m.group(2)


def header_examples():
    """Example blocks in a header's leading comment: indented lines ('//     '
    or ' *     ') after an empty comment line, up to the next one that is not
    indented (an empty comment line inside the example belongs to it)."""
    for h in sorted(INCLUDE.rglob("*.h*")):
        lines = h.read_text().splitlines()
        block, start, prev_empty = [], 0, False
        for n, line in enumerate(lines, 1):
            if not (line.startswith("//") or line.startswith(" *") or line.startswith("/*")):
                break  # end of the leading comment
            empty = line.rstrip() in ("//", " *")
            m = re.match(r"^(?://| \*) {5}(.*)$", line)
            if m and (block or prev_empty):
                if not block:
                    start = n
                block.append(m.group(1))
            elif empty and block:
                block.append("")
            elif block:
                yield f"{h.relative_to(SOURCE)}:{start}", block
                block = []
            prev_empty = empty
        if block:
            yield f"{h.relative_to(SOURCE)}:{start}", block


def compile_unit(code, lang, tmp_path, link):
    suffix = ".cpp" if lang == "cpp" else ".c"
    src = tmp_path / f"example{suffix}"
    src.write_text(code)
    cc = ["g++", "-std=c++17"] if lang == "cpp" else ["gcc", "-std=c11"]
    cmd = cc + ["-Wall", f"-I{INCLUDE}", str(src)]
    if lang == "c":
        cmd.append("-Werror=implicit-function-declaration")
    # A whole program is linked; anything else is checked by the compiler only.
    cmd += ["-o", str(tmp_path / "example"), "-ldl"] if link else ["-fsyntax-only"]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300)


def wrap_in_main(code):
    head, body = [], []
    for line in code.splitlines():
        (head if re.match(r"\s*(#include|using )", line) else body).append(line)
    return "\n".join(head) + "\nint main(int argc, char** argv) {\n(void)argc; (void)argv;\n" + \
        "\n".join(body) + "\nreturn 0;\n}\n"


def is_statements(code):
    """A snippet of statements (no function or class of its own): it runs in main()."""
    return not re.search(r"^(?:\w[\w:<>*& ]*\s)?\w+\s*\([^;]*\)\s*\{|^(?:class|struct|namespace)\b", code, re.M)


def check_compiles(where, lang, code, tmp_path):
    if is_statements(code):
        code = wrap_in_main(code)
    link = re.search(r"\bint main\s*\(", code) is not None
    p = compile_unit(code, lang, tmp_path, link)
    assert p.returncode == 0, f"{where}: the example does not compile:\n{code}\n{p.stderr}"


CODE_BLOCKS = [(w, lang, code) for w, lang, code in markdown_blocks() if lang in ("cpp", "c")]
HEADER_EXAMPLES = list(header_examples())


def test_there_are_examples_to_check():
    assert len(CODE_BLOCKS) >= 3, CODE_BLOCKS
    assert {w.split(":")[0] for w, _ in HEADER_EXAMPLES} >= {
        "sdk/include/msmemscope/plugin.hpp", "sdk/include/msmemscope/testing.hpp", "sdk/include/msmemscope/agent.h"}


@pytest.mark.parametrize("where,lang,code", CODE_BLOCKS, ids=[w for w, _, _ in CODE_BLOCKS])
def test_readme_code_block_compiles(where, lang, code, tmp_path):
    check_compiles(where, lang, code, tmp_path)


@pytest.mark.parametrize("where,lines", HEADER_EXAMPLES, ids=[w for w, _ in HEADER_EXAMPLES])
def test_header_example_compiles(where, lines, tmp_path):
    code = "\n".join(lines) + "\n"
    lang = "c" if where.endswith(".h") else "cpp"
    if lang == "cpp" and "#include" not in code:
        code = f"#include <msmemscope/{Path(where.split(':')[0]).name}>\n" + code
    if lang == "c" and "#include" not in code:
        code = f"#include <msmemscope/{Path(where.split(':')[0]).name}>\n" + code
    check_compiles(where, lang, code, tmp_path)


def test_python_and_yaml_blocks_parse():
    for where, lang, code in markdown_blocks():
        if lang == "python":
            compile(code, where, "exec")
        elif lang == "yaml":
            assert yaml.safe_load(code) is not None, where
