#!/usr/bin/env bash
# Checks that the tree keeps the shape docs/DESIGN.md section 1 describes. Cheap (no build), so
# scripts/test.sh runs it first. Exit 1 with one line per problem.
#
# 1. Includes go down the layers, never up. The layers, lowest first:
#      core/include, core/src   the framework (config, validation, runtime)
#      core/cli                 the command-line framework
#      stages                   stages, their libraries, models and product commands
#      tests                    (anything)
#    So no file of core/ includes a header of stages/, and no file of core/include or core/src
#    includes one of core/cli. A quoted include is looked up where the compiler would: beside the
#    file, then in core/include, core and stages.
#    Inside stages/, each folder is one target and stages/CMakeLists.txt adds them lowest first: a
#    folder includes only its own headers and those of folders added before it.
# 2. No file-name pattern in CMake files (file(GLOB...), list(FILTER ... REGEX)): every source is
#    named, and every .cc and .cu of core/, stages/ and tests/ is named in the CMakeLists.txt of its
#    own folder (by its file name; a fuzz target's <name>_fuzz.cc by wam_add_fuzz_target(<name>)),
#    so that each folder is one target.
# 3. No function over 100 lines outside tests/. A heuristic, not a parser: comments, strings and
#    preprocessor lines are blanked, then braces are counted; a brace opened at namespace or class
#    level after text ending in ")" (or a trailing const, override, noexcept, -> type, ...) opens a
#    function, whose length runs from the first line of its signature to its closing brace.
#    ALLOWED_LONG_FUNCTIONS names a function over the limit while other work splits it.
set -euo pipefail
cd "$(dirname "$0")/.."

# path:function, each with its reason; empty since issue 22 split the last ones.
ALLOWED_LONG_FUNCTIONS=()

python3 - "${ALLOWED_LONG_FUNCTIONS[@]}" <<'EOF'
import os, re, subprocess, sys

MAX_LINES = 100
allowed = set(sys.argv[1:])
files = subprocess.check_output(["git", "ls-files", "--cached", "--others", "--exclude-standard"],
                                text=True).split("\n")
files = [f for f in files if f and os.path.exists(f)]
problems = []

# 1. Includes.
def layer(path):
    if path.startswith(("core/include/", "core/src/")): return 1
    if path.startswith("core/cli/"): return 2
    if path.startswith("stages/"): return 3
    return 4
LAYER_NAMES = {1: "core/include, core/src", 2: "core/cli", 3: "stages", 4: "tests"}
include_re = re.compile(r'^\s*#\s*include\s*"([^"]+)"', re.M)
# The folders of stages/ in the order stages/CMakeLists.txt adds them, lowest first.
stage_folders = []
if os.path.exists("stages/CMakeLists.txt"):
    stage_folders = re.findall(r"^\s*add_subdirectory\(\s*([\w/]+)\s*\)",
                               open("stages/CMakeLists.txt", encoding="utf-8").read(), re.M)
def check_stage_folders(f, line, target):
    here, there = (os.path.dirname(p)[len("stages/"):] for p in (f, target))
    if here == there: return
    for folder in (here, there):
        if folder not in stage_folders:
            problems.append(f"{f}:{line}: stages/{folder} is not added by stages/CMakeLists.txt")
            return
    if stage_folders.index(there) > stage_folders.index(here):
        problems.append(f"{f}:{line}: includes {target}: stages/{here} must not include "
                        f"stages/{there}, which stages/CMakeLists.txt adds after it")
for f in files:
    if not f.endswith((".h", ".cc", ".cu")) or layer(f) == 4: continue
    text = open(f, encoding="utf-8", errors="replace").read()
    for m in include_re.finditer(text):
        name = m.group(1)
        for root in (os.path.dirname(f), "core/include", "core", "stages"):
            target = os.path.normpath(os.path.join(root, name))
            if os.path.exists(target): break
        else:
            continue  # a generated or system header
        line = text.count("\n", 0, m.start()) + 1
        if layer(target) > layer(f):
            problems.append(f"{f}:{line}: includes {target}: {LAYER_NAMES[layer(f)]} must not "
                            f"include {LAYER_NAMES[layer(target)]}")
        elif layer(f) == layer(target) == 3:
            check_stage_folders(f, line, target)

# 2. CMake files name their sources.
cmake_files = [f for f in files if os.path.basename(f) == "CMakeLists.txt" or f.endswith(".cmake")]
cmake_text = {}  # folder -> its CMakeLists.txt
pattern_re = re.compile(r"file\s*\(\s*GLOB|FILTER\s+\S+\s+(INCLUDE|EXCLUDE)\s+REGEX", re.I)
for f in cmake_files:
    text = open(f, encoding="utf-8").read()
    if os.path.basename(f) == "CMakeLists.txt":
        cmake_text[os.path.dirname(f)] = text
    for number, line in enumerate(text.split("\n"), 1):
        if pattern_re.search(line.split("#", 1)[0]):
            problems.append(f"{f}:{number}: a file-name pattern; name the sources: {line.strip()}")
for f in files:
    if not f.endswith((".cc", ".cu")) or not f.startswith(("core/", "stages/", "tests/")): continue
    name, folder = os.path.basename(f), os.path.dirname(f)
    own = cmake_text.get(folder, "")
    fuzz = re.fullmatch(r"(\w+)_fuzz\.cc", name)
    if re.search(r"(?<![\w.])" + re.escape(name) + r"\b", own) or \
            (fuzz and f"wam_add_fuzz_target({fuzz.group(1)}" in own):
        continue
    problems.append(f"{f}: not named in {folder}/CMakeLists.txt, the target of its folder")

# 3. Function length.
def blank(text):
    """Comments, string and character literals and preprocessor lines as spaces; newlines kept."""
    out, i, n = [], 0, len(text)
    while i < n:
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
        elif text.startswith('R"', i) and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")):
            open_paren = text.find("(", i)
            delimiter = text[i + 2:open_paren]
            close = text.find(")" + delimiter + '"', open_paren)
            j = n if open_paren < 0 or close < 0 else close + len(delimiter) + 2
        elif text[i] in "\"'" and not (text[i] == "'" and i > 0 and text[i - 1].isdigit()):
            quote, j = text[i], i + 1
            while j < n and text[j] != quote and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            j += 1
        elif text[i] == "#" and text[text.rfind("\n", 0, i) + 1:i].strip() == "":
            j = i
            while j < n and text[j] != "\n":
                j = j + 2 if text.startswith("\\\n", j) else j + 1
        else:
            out.append(text[i])
            i += 1
            continue
        out.append(re.sub(r"[^\n]", " ", text[i:j]))
        i = j
    return "".join(out)

signature_end_re = re.compile(
    r"\)\s*(const|override|final|noexcept|mutable|volatile|&|&&|->\s*[\w:<>,\s*&]+)*\s*$")
name_re = re.compile(r"([~\w:]+(?:operator\s*\S+)?)\s*\(")
for f in files:
    if not f.endswith(".cc") or not f.startswith(("core/", "stages/")): continue
    code = blank(open(f, encoding="utf-8", errors="replace").read())
    stack = []  # per open brace: "scope" (namespace, class), "function", "block"
    header_start = 0
    for i, c in enumerate(code):
        if c == ";" and (not stack or stack[-1] == "scope"):
            header_start = i + 1
        elif c == "{":
            if stack and stack[-1] in ("function", "block"):
                stack.append("block")
                continue
            header = code[header_start:i]
            if re.search(r"\b(namespace|class|struct|union|enum)\b|\bextern\s*\"", header) and \
                    not signature_end_re.search(header):
                stack.append("scope")
            elif "(" in header and signature_end_re.search(header):
                stack.append("function")
                lead = re.match(r"\s*((public|private|protected)\s*:(?!:))?\s*", header)
                first = header_start + lead.end()
                function_start = (code.count("\n", 0, first) + 1, header)
            else:
                stack.append("block")  # an initializer at namespace scope
            header_start = i + 1
        elif c == "}":
            kind = stack.pop() if stack else "scope"
            if kind == "function":
                start_line, header = function_start
                end_line = code.count("\n", 0, i) + 1
                length = end_line - start_line + 1
                names = name_re.findall(header.split("(")[0] + "(")
                name = names[-1].split("::")[-1] if names else "?"
                if length > MAX_LINES and f"{f}:{name}" not in allowed:
                    problems.append(f"{f}:{start_line}: function {name} is {length} lines "
                                    f"(at most {MAX_LINES}); split it where its parts are")
            if not stack or stack[-1] == "scope":
                header_start = i + 1

for p in problems: print(p)
sys.exit(1 if problems else 0)
EOF
