#!/usr/bin/env bash
# tools/lint's shape rules are shown to catch what they claim. tools/check-includes: the real tree
# passes; a planted upward include (topology/ including an engine header), a folder missing from the
# table and a cycle in docs/architecture.md's include rule each fail, naming the file and line or the
# cycle. The clang-tidy naming checks (.clang-tidy): a planted snake_case class, an unsuffixed
# private member and a snake_case public field fail, the same class named as STYLE.md says passes.
#   tests/lint_rules_test.sh SOURCE_DIR
set -euo pipefail
src=$1
check=$src/tools/check-includes
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

"$check" --root "$src" || fail "the real tree does not follow its own include rule"

# A copy of the table and three planted files in a scratch tree.
mkdir -p "$work/docs" "$work/topology" "$work/runtime/engine" "$work/kernels" "$work/newfolder"
cp "$src/docs/architecture.md" "$work/docs/"
: > "$work/runtime/engine/peer_core.h"
: > "$work/kernels/ops.h"
printf '#include <vector>\n#include "runtime/engine/peer_core.h"\n' > "$work/topology/planted.cc"
printf '#include "kernels/ops.h"\n' > "$work/newfolder/a.cc"
printf '#include "kernels/ops.h"\n' > "$work/runtime/engine/fine.cc"

"$check" --root "$work" --files runtime/engine/fine.cc || fail "a downward include was refused"
if "$check" --root "$work" --files topology/planted.cc 2> "$work/up.err"; then
  fail "a planted upward include (topology -> engine) passed"
fi
grep -q 'topology/planted.cc:2: includes runtime/engine/peer_core.h' "$work/up.err" ||
  { cat "$work/up.err" >&2; fail "the upward include's message does not name file:line and header"; }
if "$check" --root "$work" --files newfolder/a.cc 2> "$work/folder.err"; then
  fail "a source folder missing from the table passed"
fi
grep -q 'newfolder/a.cc: its folder is not in' "$work/folder.err" || fail "missing-folder message"

# common may include engine: engine -> config -> ... -> common -> engine is a cycle.
sed -i 's#^\(| `runtime/common/` .*| \)— |$#\1engine |#' "$work/docs/architecture.md"
grep -q '^| `runtime/common/` .*| engine |$' "$work/docs/architecture.md" || fail "could not plant the cycle"
if "$check" --root "$work" --files runtime/engine/fine.cc 2> "$work/cycle.err"; then
  fail "a cycle in the include rule passed"
fi
grep -q 'has a cycle' "$work/cycle.err" || { cat "$work/cycle.err" >&2; fail "cycle message"; }

printf 'namespace grapevine {\nclass bad_name {\n  int count;\n\n public:\n  int block_size = 0;\n};\n}  // namespace grapevine\n' > "$work/bad.cc"
printf 'namespace grapevine {\nclass GoodName {\n  int count_;\n\n public:\n  int blockSize = 0;\n};\n}  // namespace grapevine\n' > "$work/good.cc"
"$src/tools/lint" --tidy-files "$work/good.cc" || fail "a well-named class failed the naming checks"
if "$src/tools/lint" --tidy-files "$work/bad.cc" 2> "$work/tidy.err"; then
  fail "a planted snake_case class passed the naming checks"
fi
grep -q "invalid case style for class 'bad_name'" "$work/tidy.err" || { cat "$work/tidy.err" >&2; fail "class naming"; }
grep -q "invalid case style for private member 'count'" "$work/tidy.err" || fail "member naming"
grep -q "invalid case style for public member 'block_size'" "$work/tidy.err" || fail "public field naming"
echo "lint_rules_test: real tree passes; upward include, unlisted folder, cycle and bad names all fail"
