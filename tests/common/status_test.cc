#include "runtime/common/status.h"

#include <catch2/catch.hpp>

using namespace grapevine;

namespace {
Result<int> parsePositive(int v) {
  if (v <= 0) return invalidArgument("not positive: " + std::to_string(v));
  return v;
}
Status twice(int v, int* out) {
  GV_ASSIGN_OR_RETURN(int x, parsePositive(v));
  *out = 2 * x;
  return Status::ok();
}
}  // namespace

TEST_CASE("Status carries code and message") {
  Status ok;
  CHECK(ok.isOk());
  CHECK(ok.toString() == "ok");
  Status st = unavailable("peer 3 closed the connection");
  CHECK_FALSE(st.isOk());
  CHECK(st.code() == ErrorCode::kUnavailable);
  CHECK(st.toString() == "unavailable: peer 3 closed the connection");
}

TEST_CASE("Result propagates errors through GV_ASSIGN_OR_RETURN") {
  int out = 0;
  CHECK(twice(4, &out).isOk());
  CHECK(out == 8);
  Status st = twice(-1, &out);
  CHECK(st.code() == ErrorCode::kInvalidArgument);
  CHECK(st.message() == "not positive: -1");
  CHECK(out == 8);
}

TEST_CASE("checkValueCount names what was of another size", "[status]") {
  CHECK(checkValueCount("model", 5, 5).isOk());
  const Status s = checkValueCount("optimizer momentum", 4, 6);
  CHECK(s.code() == ErrorCode::kInvalidArgument);
  CHECK(s.message() == "optimizer momentum: 4 values, this peer has 6");
}
